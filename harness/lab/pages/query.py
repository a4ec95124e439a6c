"""The question pages: query (results and the answerability decision), explain (kb_retrieve_explain of the
same form) and compare (one question under two modes/settings side by side).

The forms are posted (a long question does not fit in a URL) or sent as GET by links, and these pages only
read. A result card's judge button posts the form again, with the judgment, to the page's judge action
(``POST /query/judge``, ``POST /compare/judge``: POST only, with this process's form token), which
kb.record_judgment stores as the lab's role before the page is shown again; a judgment sent to the page
itself, by GET or POST, is refused (405) and writes nothing. lab.js sends the same post asking for JSON
(``Accept: application/json``) with the passages the page shows (``shown``): the judgment is recorded
without asking the question again, and the card changes in place.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import psycopg
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...retrieval import RetrievalRequest
from .. import queries, render
from ..context import LabContext, parameters
from ..database import LabError, NotPermitted, QueryFailed
from ..forms import SIDE_ARGUMENTS, FormError, QueryForm, query_form


def form_meta(lab: LabContext) -> dict[str, Any]:
    """What the form offers: the namespaces the role sees and the settings a query may override."""

    def work(conn):
        return {
            "namespaces": queries.namespaces(conn),
            "settings": queries.query_settings(conn),
            "max_query_chars": queries.max_query_chars(conn),
        }

    return lab.db.run(work)


def read_form(lab: LabContext, params: Any, meta: dict[str, Any], side: str = "") -> tuple[QueryForm, str | None]:
    """The form of one side (``side``: the compare page's ``a.``/``b.`` prefix) and its problem, if any."""
    allowed = {s["key"]: s for s in meta["settings"]}
    try:
        form = query_form(params, set(allowed), side)
    except FormError as exc:
        return query_form(params, None, side), str(exc)
    known = {n["namespace"] for n in meta["namespaces"]}
    if form.namespace.strip() and form.namespace.strip() not in known:
        seen = ", ".join(sorted(known)) or "none"
        return form, (
            f"unknown namespace {form.namespace.strip()!r}: the role {lab.db.role_label} sees no document in it "
            f"(namespaces it sees: {seen})"
        )
    return form, None


def inline_error(exc: Exception) -> dict[str, Any]:
    """An error shown above the form, which stays filled in (rather than an error page)."""
    if isinstance(exc, LabError):
        return {"title": exc.title, "message": exc.message, "hint": exc.hint, "status": exc.status}
    return {"title": "The form has a mistake", "message": str(exc), "hint": None, "status": 400}


JUDGE_ACTIONS = {"query": "/query/judge", "compare": "/compare/judge"}  # the templates' buttons post there


def refuse_judgment(params: Any, page: str) -> None:
    """A page that reads refuses a judgment sent to it (a write link in a browser's history): 405, nothing written."""
    if params.get("judge"):
        raise HTTPException(405, f"a judgment is recorded only by POST to {JUDGE_ACTIONS[page]} (a result's button)")


def judge_choice(params: Any) -> dict[str, Any] | None:
    """The judgment a button posted with the form (``judge``: JSON of judgment, namespace and source; the
    source null for "no answer"), or None when none was posted; 400 for anything a button does not send."""
    raw = params.get("judge")
    if not raw:
        return None
    try:
        choice = json.loads(str(raw))
        judgment, namespace, source = str(choice["j"]), str(choice["ns"]), choice["src"]
    except (ValueError, KeyError, TypeError):
        raise HTTPException(400, "the judgment is not one a result card sends") from None
    side = choice.get("side", "a")
    if (source is not None and not isinstance(source, str)) or side not in ("a", "b"):
        raise HTTPException(400, "the judgment is not one a result card sends")
    return {"judgment": judgment, "namespace": namespace, "source": source, "side": side}


def shown_of(rows: list[dict[str, Any]]) -> list[str]:
    """The namespace/source of every passage a page shows."""
    return sorted({f"{r['namespace']}/{r['source']}" for r in rows})


def record_choice(conn, choice: dict[str, Any], form: QueryForm, shown: list[str]) -> dict[str, Any]:
    """Record a posted judgment as the lab's role (kb.record_judgment), with the namespace the question was
    asked in and every passage the page shows for it (namespace/source). Only the judge actions call it,
    after lab.checked_form (POST, this process's form token)."""
    stored = queries.record_judgment(
        conn,
        namespace=choice["namespace"],
        query=form.q,
        source=choice["source"],
        judgment=choice["judgment"],
        context=form.arguments().get("context"),
        as_of=form.as_of.strip() or None,
        asked_in=form.namespace.strip() or None,
        shown=shown,
    )
    return {**choice, "id": stored["id"], "status": stored["status"]}


async def query_page(lab: LabContext, request: Request) -> Response:
    params = await parameters(request)
    refuse_judgment(params, "query")
    return await run_in_threadpool(_query_page, lab, request, params)


async def query_judge(lab: LabContext, request: Request) -> Response:
    """POST /query/judge: record the judgment, then the query page of the same form (or JSON, asked by lab.js)."""
    params = await lab.checked_form(request)
    if wants_json(request):
        return await run_in_threadpool(judge_in_place, lab, params, "")
    return await run_in_threadpool(_query_page, lab, request, params, True)


MAX_SHOWN = 1000  # kb.record_judgment's bound on the passages shown with a question


def wants_json(request: Request) -> bool:
    return "application/json" in request.headers.get("accept", "")


def shown_passages(params: Any) -> list[str]:
    """The namespace/source of every passage the page shows, as lab.js sends them (a JSON list)."""
    try:
        shown = json.loads(str(params.get("shown") or "[]"))
    except ValueError:
        shown = None
    if not isinstance(shown, list) or len(shown) > MAX_SHOWN or not all(isinstance(s, str) for s in shown):
        raise HTTPException(400, f"shown must be a JSON list of at most {MAX_SHOWN} namespace/source names")
    return sorted(set(shown))


def judge_in_place(lab: LabContext, params: Any, page: str) -> Response:
    """Record a judgment posted by lab.js (no retrieval: the page already shows the passages); JSON of what
    was recorded, or of the error with the status the page would have had."""
    meta = form_meta(lab)
    choice = judge_choice(params)
    if choice is None:
        raise HTTPException(400, "no judgment was sent")
    side = f"{choice['side']}." if page == "compare" else ""
    form, problem = read_form(lab, compare_sides(params) if side else params, meta, side)
    try:
        if problem:
            raise FormError(problem)
        form.arguments()  # every field checked as the page would
        shown = shown_passages(params)
        recorded = lab.db.run(lambda conn: record_choice(conn, choice, form, shown))
    except (FormError, QueryFailed, NotPermitted) as exc:
        error = inline_error(exc)
        return JSONResponse({"error": error["message"], "hint": error["hint"]}, status_code=error["status"])
    return JSONResponse(recorded)


def _query_page(lab: LabContext, request: Request, params: Any, judging: bool = False) -> Response:
    meta = form_meta(lab)
    form, problem = read_form(lab, params, meta)
    context: dict[str, Any] = {
        "nav": "query",
        "form": form,
        "meta": meta,
        "rows": None,
        "explain": None,
        "group": params.get("group") == "1",
        "error": None,
        "judged": None,
        "judgments": {},
    }
    if problem:
        context["error"] = inline_error(FormError(problem))
    elif form.q:
        try:
            choice = judge_choice(params) if judging else None
            req = form.request()

            def work(conn):
                rows = queries.retrieve(conn, req)
                if choice:
                    context["judged"] = record_choice(conn, choice, form, shown_of(rows))
                # the reason of the answerability decision (probability, thresholds, signals) is in the
                # explain object (a second retrieval of the same request, in the same transaction)
                explained = queries.explain(conn, req)
                docs = queries.documents_by_id(conn, [r["document_id"] for r in rows], req.as_of)
                judged = queries.judgments_for(conn, form, sorted({r["namespace"] for r in rows}))
                context["as_of_used"] = queries.moment_used(conn, req.as_of)
                return rows, explained, docs, judged

            context["rows"], context["explain"], context["docs"], context["judgments"] = lab.db.run(
                work, settings=form.settings
            )
        except (FormError, QueryFailed, NotPermitted) as exc:
            context["error"] = inline_error(exc)
    if context["rows"] is not None:
        context["groups"] = render.group_by_document(context["rows"])
        context["answer"] = render.answer_summary(context["rows"], context["explain"])
        context["dense_label"] = render.dense_score_label(context["explain"])
    status = context["error"]["status"] if context["error"] else 200
    return lab.page(request, "query.html", context, status)


async def explain_page(lab: LabContext, request: Request) -> Response:
    params = await parameters(request)
    return await run_in_threadpool(_explain_page, lab, request, params)


def _explain_page(lab: LabContext, request: Request, params: Any) -> Response:
    meta = form_meta(lab)
    form, problem = read_form(lab, params, meta)
    context: dict[str, Any] = {
        "nav": "explain",
        "form": form,
        "meta": meta,
        "explain": None,
        "error": None,
        "hidden": [],
        "passage_docs": {},
    }
    if problem:
        context["error"] = inline_error(FormError(problem))
    elif form.q:
        try:
            req = form.request()
            context["explain"], context["hidden"], context["passage_docs"] = lab.db.run(
                lambda conn: _explained_with_hidden(conn, req), settings=form.settings
            )
        except (FormError, QueryFailed, NotPermitted) as exc:
            context["error"] = inline_error(exc)
    answer = context["explain"]
    if answer is not None:
        context["answer"] = render.answer_summary(None, answer)
        context["dense_label"] = render.dense_score_label(answer)
        context["segments"], context["total_ms"] = render.timing_segments(answer.get("timings_ms") or {})
        context["extra"] = render.explain_extra(answer)
    status = context["error"]["status"] if context["error"] else 200
    return lab.page(request, "explain.html", context, status)


def _explained_with_hidden(
    conn: psycopg.Connection, req: RetrievalRequest
) -> tuple[dict[str, Any], list[dict[str, Any]], dict[int, dict[str, Any]]]:
    """kb_retrieve_explain of a request, the passages the lifecycle rule hid from it, and the documents of both."""
    answer = queries.explain(conn, req)
    hidden = []
    filters = req.filters or {}
    # versions that the lifecycle rule hid: the same retrieval with history allowed, minus the documents
    # already returned (asked only when the filters do not already lift it)
    if "include_history" not in filters and "status" not in filters:
        history = dataclasses.replace(req, filters={**filters, "include_history": True})
        shown = {r["document_id"] for r in answer.get("results") or []}
        hidden = [r for r in queries.explain(conn, history).get("results") or [] if r["document_id"] not in shown]
    # every passage's document with its lifecycle at as_of (returned and hidden ones)
    ids = [r["document_id"] for r in (answer.get("results") or []) + hidden]
    docs = queries.documents_by_id(conn, ids, req.as_of)
    return answer, hidden, docs


async def compare_page(lab: LabContext, request: Request) -> Response:
    params = await parameters(request)
    refuse_judgment(params, "compare")
    return await run_in_threadpool(_compare_page, lab, request, params)


async def compare_judge(lab: LabContext, request: Request) -> Response:
    """POST /compare/judge: record the judgment (the question as the judged passage's side asked it), then the
    compare page of the same form (or JSON, asked by lab.js)."""
    params = await lab.checked_form(request)
    if wants_json(request):
        return await run_in_threadpool(judge_in_place, lab, params, "compare")
    return await run_in_threadpool(_compare_page, lab, request, params, True)


def _compare_page(lab: LabContext, request: Request, params: Any, judging: bool = False) -> Response:
    meta = form_meta(lab)
    sides, problem = {}, None
    for side in ("a", "b"):
        sides[side], side_problem = read_form(lab, compare_sides(params), meta, f"{side}.")
        problem = problem or side_problem
    context: dict[str, Any] = {
        "nav": "compare",
        "a": sides["a"],
        "b": sides["b"],
        "meta": meta,
        "rows_a": None,
        "rows_b": None,
        "error": None,
        "judged": None,
        "judgments": {},
    }
    if problem:
        context["error"] = inline_error(FormError(problem))
    elif sides["a"].q:
        try:
            choice = judge_choice(params) if judging else None
            for side in ("a", "b"):
                req = sides[side].request()

                def work(conn, req=req):
                    rows = queries.retrieve(conn, req)
                    ids = [r["document_id"] for r in rows]
                    return rows, queries.explain(conn, req), queries.documents_by_id(conn, ids, req.as_of)

                rows, explained, docs = lab.db.run(work, settings=sides[side].settings)
                context[f"rows_{side}"] = rows
                context[f"answer_{side}"] = render.answer_summary(rows, explained)
                context[f"dense_{side}"] = render.dense_score_label(explained)
                context.setdefault("docs", {}).update(docs)
            context["changes"] = render.rank_changes(context["rows_a"], context["rows_b"])
            shown = context["rows_a"] + context["rows_b"]
            namespaces = sorted({r["namespace"] for r in shown})

            def judgments(conn):
                if choice:  # the question as the judged passage's side asked it (its namespace, k, as of)
                    context["judged"] = record_choice(conn, choice, sides[choice["side"]], shown_of(shown))
                return [queries.judgments_for(conn, sides[side], namespaces) for side in ("a", "b")]

            context["judgments"], context["judgments_b"] = lab.db.run(judgments)
        except (FormError, QueryFailed, NotPermitted) as exc:
            context["error"] = inline_error(exc)
    status = context["error"]["status"] if context["error"] else 200
    return lab.page(request, "compare.html", context, status)


def compare_sides(params: Any) -> dict[str, str]:
    """The compare form's fields. An unprefixed mode, namespace, k or as of applies to each side that has none
    of its own; a query form sent to compare (no side's fields) also gives side A its settings, so
    "Compare…" starts from the question as asked."""
    values = {key: str(value) for key, value in params.items()}
    sided = any(key.startswith(("a.", "b.")) for key in values)
    for key, value in list(values.items()):
        if key in SIDE_ARGUMENTS:  # a side's own value wins
            values.setdefault(f"a.{key}", value)
            values.setdefault(f"b.{key}", value)
        elif key.startswith("set.") and not sided:
            values[f"a.{key}"] = value
    return values
