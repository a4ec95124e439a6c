"""harness.retrieval.RetrievalRequest is the one description of a kb_retrieve call in Python: every other
place that offers kb_retrieve's arguments (the MCP tools, the framework retrievers, the lab's query form,
`pgkb query`) offers exactly its fields, and its fields are the SQL signature of kb_retrieve and
kb_retrieve_explain. A place that leaves an argument out, or offers it differently, says so here."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
from pathlib import Path

import pytest
from psycopg.types.json import Jsonb

from harness import retrieval

REPO = Path(__file__).resolve().parents[2]
ARGUMENTS = list(retrieval.OPTIONAL_ARGUMENTS)

# The MCP tools take doc_type (the one filter an assistant needs) instead of the free JSON filters, next to
# namespace; a per-namespace tool has its namespace fixed.
MCP_ARGUMENTS = list(ARGUMENTS)
MCP_ARGUMENTS.insert(MCP_ARGUMENTS.index("namespace") + 1, "doc_type")
# The lab offers max_per_document and merge_adjacent among its per-query settings of the same names.
LAB_ARGUMENTS = [name for name in ARGUMENTS if name not in {"max_per_document", "merge_adjacent"}]


def _mcp_tool_schemas() -> dict[str, dict]:
    """The input schema of kb_retrieve, kb_explain and a per-namespace tool."""
    from harness import mcp_server

    server = mcp_server.build_server("postgresql://unused.invalid/pgkb", None)
    tools = server.tools()
    in_namespace = mcp_server.NamespaceTools(server.db, None).spec("kb_retrieve_n", "n", "a namespace")
    found = {name: tools[name].tool.input_schema for name in ("kb_retrieve", "kb_explain")}
    found["kb_retrieve_<namespace>"] = in_namespace.tool.input_schema
    return found


def _cli_query_actions() -> dict[str, argparse.Action]:
    from harness.cli import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {a.dest: a for a in commands.choices["query"]._actions}


def _langchain_fields() -> list[str]:
    langchain = pytest.importorskip("harness.frameworks.langchain")
    from langchain_core.retrievers import BaseRetriever

    own = set(BaseRetriever.model_fields) | {"dsn", "pool_size"}
    return [name for name in langchain.PgkbRetriever.model_fields if name not in own]


def _llamaindex_keywords() -> list[str]:
    llamaindex = pytest.importorskip("harness.frameworks.llamaindex")
    from llama_index.core.base.base_retriever import BaseRetriever

    own = set(inspect.signature(BaseRetriever.__init__).parameters)
    parameters = inspect.signature(llamaindex.PgkbRetriever).parameters.values()
    return [
        p.name
        for p in parameters
        if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in own and p.name != "pool_size"
    ]


def _cli_query_options() -> list[str]:
    return [
        name for name, a in _cli_query_actions().items() if a.option_strings and name not in {"help", "json", "explain"}
    ]


def _lab_form_fields() -> list[str]:
    from harness.lab.forms import QueryForm

    return [f.name for f in dataclasses.fields(QueryForm) if f.name not in {"q", "settings"}]


def test_every_retrieval_argument_is_named_once_in_python():
    mcp = {name: list(schema["properties"]) for name, schema in _mcp_tool_schemas().items()}
    found = {
        "MCP kb_retrieve": mcp["kb_retrieve"],
        "MCP kb_explain": mcp["kb_explain"],
        "MCP kb_retrieve_<namespace>": mcp["kb_retrieve_<namespace>"],
        "LangChain PgkbRetriever fields": _langchain_fields(),
        "LlamaIndex PgkbRetriever keywords": _llamaindex_keywords(),
        "pgkb query options": _cli_query_options(),
        "lab query form": _lab_form_fields(),
    }
    expected = {
        "MCP kb_retrieve": ["query", *MCP_ARGUMENTS, "detail"],
        "MCP kb_explain": ["query", *MCP_ARGUMENTS],
        "MCP kb_retrieve_<namespace>": ["query", *(name for name in MCP_ARGUMENTS if name != "namespace"), "detail"],
        "LangChain PgkbRetriever fields": ARGUMENTS,
        "LlamaIndex PgkbRetriever keywords": ARGUMENTS,
        "pgkb query options": ARGUMENTS,
        "lab query form": LAB_ARGUMENTS,
    }
    differing = {place: names for place, names in found.items() if names != expected[place]}
    assert not differing, (
        "these places do not offer RetrievalRequest's fields (harness.retrieval) in its order: "
        + "; ".join(f"{place}: {names}, expected {expected[place]}" for place, names in differing.items())
    )


def test_the_lab_template_has_an_input_for_every_field_of_the_query_form():
    from harness.lab.forms import SIDE_ARGUMENTS

    macros = (REPO / "harness" / "lab" / "templates" / "macros.html").read_text(encoding="utf-8")
    shared = re.search(r"{% macro query_fields.*?{% endmacro %}", macros, re.S).group(0)
    per_side = re.search(r"{% macro side_fields.*?{% endmacro %}", macros, re.S).group(0)

    def offered(name: str) -> bool:
        return f'name="{name}"' in shared or (name in SIDE_ARGUMENTS and f'name="{{{{ prefix }}}}{name}"' in per_side)

    missing = [name for name in ["q", *_lab_form_fields()] if not offered(name)]
    assert not missing, f"macros.html query_fields and side_fields have no input for {missing}"
    assert "side_fields(form, meta)" in shared, "query_fields must include the per-side fields on one-sided pages"


def test_the_tools_and_the_command_line_describe_an_argument_in_the_requests_words():
    schemas = _mcp_tool_schemas()
    cli = _cli_query_actions()
    for field in dataclasses.fields(retrieval.RetrievalRequest):
        text = field.metadata["description"]
        assert text and "\n" not in text and "%" not in text, field.name  # one line, safe for argparse
        assert cli["text" if field.name == "query" else field.name].help.startswith(text)
        for schema in schemas.values():
            if field.name in schema["properties"]:
                assert schema["properties"][field.name]["description"] == text


def test_a_request_passes_only_the_arguments_it_has():
    call, params = retrieval.RetrievalRequest("refunds", k=3, filters={"doc_type": "policy"}, context=("a",)).sql_call(
        "kb_retrieve"
    )
    assert call == (
        "kb_retrieve(%(query)s::text, k => %(k)s::integer, filters => %(filters)s::jsonb, "
        "context => %(context)s::text[])"
    )
    assert params["query"] == "refunds" and params["k"] == 3 and params["context"] == ["a"]
    assert isinstance(params["filters"], Jsonb)
    assert retrieval.RetrievalRequest("refunds").sql_call("kb_retrieve_explain") == (
        "kb_retrieve_explain(%(query)s::text)",
        {"query": "refunds"},
    )


def test_keyword_arguments_make_or_amend_a_request():
    asked = retrieval.request_of("refunds", {"k": 3})
    assert asked == retrieval.RetrievalRequest("refunds", k=3)
    assert retrieval.request_of(asked, {"mode": "dense"}) == retrieval.RetrievalRequest("refunds", k=3, mode="dense")
    with pytest.raises(TypeError, match="kb_retrieve has no argument top_k"):
        retrieval.request_of("refunds", {"top_k": 3})


@pytest.mark.parametrize("function", retrieval.FUNCTIONS)
def test_the_request_is_the_sql_signature(migrated_db, function):
    found = migrated_db.execute(
        """SELECT p.proargnames[1:p.pronargs] AS names, p.pronargdefaults AS defaults,
                  array(SELECT format_type(t.oid, NULL) FROM unnest(p.proargtypes::oid[]) WITH ORDINALITY AS t(oid, n)
                        ORDER BY t.n) AS types
           FROM pg_proc AS p WHERE p.oid = %s::regproc""",
        (function,),
    ).fetchone()
    fields = dataclasses.fields(retrieval.RetrievalRequest)
    types = [
        migrated_db.execute("SELECT format_type(%s::regtype, NULL) AS t", (f.metadata["sql_type"],)).fetchone()["t"]
        for f in fields
    ]
    assert list(zip(found["names"], found["types"], strict=True)) == [
        (f.name, sql_type) for f, sql_type in zip(fields, types, strict=True)
    ]
    # every argument but the query has a default in SQL, which None leaves in force
    assert found["defaults"] == len(retrieval.OPTIONAL_FIELDS)
