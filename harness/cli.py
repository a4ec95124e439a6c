"""The `pgkb` command line: a thin layer over harness modules."""

from __future__ import annotations

import argparse
import json
import sys

import psycopg

from . import cluster, glossary, loader, migrate, retrieval, shards, status, version
from .config import load_settings
from .db import connect, redacted

# Commands that read through Settings.read_dsn (PGKB_READ_DSN, a standby); the others use Settings.dsn.
READ_COMMANDS = frozenset({"query"})


def _progress(args) -> bool:
    """Progress bars only for a person at a terminal: never with --quiet or --json, nor into a log or pipe."""
    return not getattr(args, "quiet", False) and not getattr(args, "json", False) and sys.stderr.isatty()


def _print_json(data) -> None:
    print(json.dumps(data, ensure_ascii=False, indent=2, default=str))


def cmd_up(args) -> int:
    settings = load_settings()
    if settings.dsn_override:
        print(
            "PGKB_DSN is set: not starting the embedded cluster; migrating the configured database",
            file=sys.stderr,
        )
    else:
        created = cluster.init(settings)
        started = cluster.start(settings)
        cluster.ensure_database(settings)
        print(
            f"cluster {'created' if created else 'exists'} at {settings.data_dir}, "
            f"{'started' if started else 'already running'} on port {settings.port}",
            file=sys.stderr,
        )
    result = migrate.migrate(settings.dsn, settings)
    print(
        f"migrated: {len(result.applied)} applied, {len(result.already_applied)} already applied",
        file=sys.stderr,
    )
    if _refuse_on_failed_health(settings.dsn):
        return 2
    print(settings.dsn)
    return 0


def _refuse_on_failed_health(dsn: str) -> bool:
    """After up/migrate: print every failed health check to stderr; True when there is one."""
    failed = [c for c in status.health(dsn) if c["state"] == "failed"]
    for line in status.health_lines(failed):
        print(f"pgkb: health check failed: {line}", file=sys.stderr)
    return bool(failed)


def cmd_doctor(args) -> int:
    checks = status.health(load_settings().dsn)
    if args.json:
        _print_json(checks)
    else:
        print("\n".join(status.health_lines(checks)))
    return status.health_exit_code(checks)


def cmd_down(args) -> int:
    settings = load_settings()
    stopped = cluster.stop(settings)
    print("stopped" if stopped else "not running", file=sys.stderr)
    return 0


def cmd_dsn(args) -> int:
    print(load_settings().dsn)
    return 0


def cmd_migrate(args) -> int:
    settings = load_settings()
    result = migrate.migrate(args.dsn or settings.dsn, settings)
    _print_json(
        {
            "applied": result.applied,
            "already_applied": result.already_applied,
            "sql": result.sql_files,
            "dictionary": result.dictionary,
            "terms_rebuilt": result.terms_rebuilt,
        }
    )
    return 2 if _refuse_on_failed_health(args.dsn or settings.dsn) else 0


def cmd_status(args) -> int:
    data = status.collect(load_settings().dsn)
    if not data["migrations"]:
        if args.json:
            _print_json(data)
        print(
            f"pgkb status: the database{_where(args)} is not migrated (no kb schema): run `pgkb migrate`",
            file=sys.stderr,
        )
        return 2
    if args.json:
        _print_json(data)
        return status.health_exit_code(data.get("health", []))
    print(f"PostgreSQL {data['server_version']}")
    print("extensions: " + ", ".join(f"{k} {v}" for k, v in data["extensions"].items()))
    print(f"migrations applied: {len(data['migrations'])}")
    for m in data.get("models", []):
        flag = "*" if m["active"] else " "
        print(
            f" {flag} {m['model']:<20} {m['provider']:<8} {m['dimensions']:>5}d  embedded {m['embedded']}  "
            f"pending {m['pending']}  failed {m['failed']}  stale {m['stale']}"
        )
    for ns in data.get("namespaces", []):
        print(
            f"   {ns['namespace']:<20} documents {ns['documents']}  indexed {ns['indexed']}  pending {ns['pending']}"
            f"  failed {ns['failed']}  removed {ns['removed']}"
        )
    checks = data.get("health", [])
    for line in status.health_lines([c for c in checks if c["state"] != "ok"]):
        print(f"health: {line}")
    return status.health_exit_code(checks)


def cmd_ingest(args) -> int:
    summary = loader.ingest(
        load_settings().dsn, args.paths, namespace=args.namespace, progress=_progress(args), workers=args.workers
    )
    for warning in summary.warnings:
        if warning["kind"] == "nothing_to_load":  # said even with --quiet: an empty folder is usually a mistake
            print(f"pgkb ingest: warning: {warning['file']}: {warning['message']}", file=sys.stderr)
    if not args.quiet:
        for line in loader.report_lines(summary):
            print(line, file=sys.stderr)
    _print_json(summary.as_dict())
    return 1 if any(not f.get("stored") for f in summary.failed) else 0


def cmd_backfill(args) -> int:
    from . import backfill

    outcome = backfill.run(load_settings().dsn, model=args.model, batch_size=args.batch_size, progress=_progress(args))
    _print_json(outcome)
    return 0 if outcome["error"] is None else 1


def cmd_reindex_hnsw(args) -> int:
    from . import reindex

    _print_json(reindex.run(load_settings().dsn, model=args.model, rebuild_all=args.all, quiet=args.quiet))
    return 0


def cmd_query(args) -> int:
    # reads go where harness.config.Settings.read_dsn says (PGKB_READ_DSN: a standby)
    with connect(load_settings().read_dsn) as conn:
        arguments = {name: getattr(args, name) for name in retrieval.OPTIONAL_ARGUMENTS}
        if args.explain:
            _print_json(retrieval.explain(conn, retrieval.RetrievalRequest(args.text, **arguments)))
            return 0
        rows = retrieval.retrieve(conn, args.text, **arguments)
        if args.json:
            _print_json(rows)
            return 0
        if not rows:
            print("no evidence found (no rows)")
            return 0
        print(f"{rows[0]['answerability']} (evidence {rows[0]['evidence']:.2f})")
        for r in rows:
            print(
                f"{r['rank']:>2}. {r['score']:.3f}  {r['source']}  [relevance {r['relevance']:.2f}; {r['match_type']}; "
                f"dense #{r['dense_rank'] or '-'} lexical #{r['lexical_rank'] or '-'}]"
            )
            if r["section_path"]:
                print(f"    § {r['section_path']}")
            provenance = r["provenance"]
            where = " · ".join(x for x in (retrieval.pages(provenance), retrieval.parser_name(provenance)) if x)
            if where:
                print(f"    {where}")
            print(f"    {r['snippet']}")
    return 0


def cmd_worker(args) -> int:
    import logging

    from . import worker

    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO, format="%(asctime)s %(message)s")
    opts = worker.Options(
        dsn=load_settings().dsn,
        model=args.model,
        concurrency=args.concurrency,
        batch_size=args.batch_size,
        poll_interval=args.poll_interval,
        once=args.once,
        include_exhausted=args.include_exhausted,
    )
    try:
        outcome = worker.run_until_signalled(opts)
    except ValueError as exc:
        print(f"pgkb worker: {exc}", file=sys.stderr)
        return 2
    _print_json(outcome)
    return 1 if outcome["stopped_by"] == "error" else 0


def cmd_check(args) -> int:
    from pathlib import Path

    from . import check

    try:
        report = check.check(Path(args.path), namespace=args.namespace)
    except FileNotFoundError as exc:
        print(f"pgkb check: {exc}", file=sys.stderr)
        return 2
    _print_json(report)
    return 1 if report["findings"] else 0


def cmd_eval(args) -> int:
    from . import evaluate

    return evaluate.main(args)


def cmd_fit_answerability(args) -> int:
    from . import answerability

    dsn = load_settings().dsn
    if args.undo:
        print(answerability.undo(dsn))
        return 0
    modes = [m.strip() for m in args.mode.split(",")]
    unknown = [m for m in modes if m not in answerability.MODES]
    if unknown:
        raise RuntimeError(f"unknown mode {unknown[0]!r}; modes: {', '.join(answerability.MODES)}")
    result = answerability.fit_answerability(
        dsn, cases_files=args.cases, judged=args.judged, modes=modes, k=args.k, write=not args.dry_run
    )
    if args.json:
        _print_json(result)
    else:
        print(answerability.format_validation(result))
        print(
            f"written as model {result['written']} (replaced: {result['replaced']}; "
            "undo: pgkb fit-answerability --undo)"
            if result["written"]
            else "not written (--dry-run)"
        )
    return 0


def cmd_mcp(args) -> int:
    from . import mcp_server

    return mcp_server.serve(namespace_tools=args.namespace_tools, http=args.http, host=args.host, port=args.port)


def cmd_lab(args) -> int:
    from . import lab

    return lab.serve(host=args.host, port=args.port, allow_superuser=args.allow_superuser)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pgkb",
        description="Retrieval for RAG inside PostgreSQL. Connects to PGKB_DSN, else the embedded cluster "
        "(PGKB_HOME, PGKB_PORT); reads of `pgkb query` go to PGKB_READ_DSN when set.",
        epilog="e.g. pgkb up && pgkb ingest examples/corpus && pgkb query '退款期限是几天？' --k 3",
    )
    parser.add_argument("--version", action="version", version=f"pgkb {version()}")
    sub = parser.add_subparsers(dest="command", required=True, help="`pgkb COMMAND --help` for its options")
    # the order of the calls is the order `pgkb --help` lists the commands in
    _add_cluster_commands(sub)
    _add_loading_commands(sub)
    _add_reading_commands(sub)
    _add_evaluation_commands(sub)
    _add_client_commands(sub)
    return parser


JSON_HELP = "print JSON instead of lines for people"
QUIET_HELP = "no progress bar and no table of what was not loaded (progress is drawn only at a terminal anyway)"


def _add_cluster_commands(sub) -> None:
    """up, down, dsn, migrate, doctor, status."""
    sub.add_parser("up", help="create/start the embedded cluster and migrate (idempotent)").set_defaults(func=cmd_up)
    sub.add_parser("down", help="stop the embedded cluster").set_defaults(func=cmd_down)
    sub.add_parser("dsn", help="print the connection string").set_defaults(func=cmd_dsn)
    p = sub.add_parser("migrate", help="apply migrations and re-create SQL objects")
    p.add_argument(
        "--dsn",
        help="the database to migrate (default PGKB_DSN, else the embedded cluster), e.g. postgresql://postgres@db.internal/pgkb",
    )
    p.set_defaults(func=cmd_migrate)
    p = sub.add_parser("doctor", help="health checks, one line each with the fix; exit 1 degraded, 2 failed")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    p.set_defaults(func=cmd_doctor)
    p = sub.add_parser(
        "status", help="server, extensions, migrations, models, ingest state; exit 2 unmigrated, 1 degraded"
    )
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    p.set_defaults(func=cmd_status)


def _add_loading_commands(sub) -> None:
    """ingest, backfill, worker, reindex-hnsw: what stores, embeds and indexes."""
    p = sub.add_parser(
        "ingest",
        help="load folders or files: Markdown, text, HTML, PDF (scans read by OCR in the database), DOCX, XLSX, "
        "PPTX; a file gone from a folder is marked removed",
    )
    p.add_argument("paths", nargs="+", help="folders or files, e.g. examples/corpus")
    p.add_argument(
        "--namespace", help="the namespace of every document (default: front matter's, else 'default'), e.g. policies"
    )
    p.add_argument(
        "--workers",
        type=int,
        help="bulk load: N connections store the files (deferred embedding), then N embed the queue, e.g. 2",
    )
    p.add_argument("--quiet", action="store_true", help=QUIET_HELP)
    p.set_defaults(func=cmd_ingest)
    p = sub.add_parser("backfill", help="embed queued chunks (pending or failed) of a model")
    p.add_argument("--model", help="model name (default: the active model)")
    p.add_argument("--batch-size", type=int, default=32, help="chunks per batch (default %(default)s), e.g. 64")
    p.add_argument("--quiet", action="store_true", help=QUIET_HELP)
    p.set_defaults(func=cmd_backfill)
    p = sub.add_parser(
        "worker",
        help="embed queued chunks against the primary (PGKB_DSN) with N connections until SIGTERM, or --once",
    )
    p.add_argument("--model", help="model name (default: the active model)")
    p.add_argument("--concurrency", type=int, default=1, help="connections embedding at once (default 1)")
    p.add_argument(
        "--batch-size", type=int, default=32, help="chunks per batch, one transaction each (default 32), e.g. 64"
    )
    p.add_argument(
        "--poll-interval", type=float, default=2.0, help="seconds to wait when the queue is empty (default 2), e.g. 0.5"
    )
    p.add_argument("--once", action="store_true", help="drain the queue and exit (stop at the first failing batch)")
    p.add_argument(
        "--include-exhausted", action="store_true", help="also retry chunks past embed_max_attempts failures"
    )
    p.add_argument("--quiet", action="store_true", help="log warnings only")
    p.set_defaults(func=cmd_worker)
    p = sub.add_parser(
        "reindex-hnsw",
        help="rebuild (CONCURRENTLY) the HNSW indexes whose m / ef_construction differ from the settings",
    )
    p.add_argument("--model", help="only this model's indexes (default: every model's)")
    p.add_argument("--all", action="store_true", help="rebuild even the indexes built with the settings' options")
    p.add_argument("--quiet", action="store_true", help=QUIET_HELP)
    p.set_defaults(func=cmd_reindex_hnsw)


# `pgkb query` prints a table for a terminal: 5 passages unless asked for more, and the mode named.
QUERY_OPTION_DEFAULTS = {"k": {"default": 5}, "mode": {"default": "auto", "choices": retrieval.MODES}}
# An example of each query option whose type alone does not show what it takes.
QUERY_OPTION_EXAMPLES = {"context": "--context 'Who approves refunds?'"}


def _json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc.msg} (column {exc.colno})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError('not a JSON object, e.g. {"doc_type": "policy"}')
    return value


def _add_query_option(p: argparse.ArgumentParser, argument) -> None:
    """`pgkb query --<name>` for an optional field of harness.retrieval.RetrievalRequest, read by its SQL
    type: an array is a repeatable option, a boolean --name / --no-name, jsonb a JSON object."""
    sql_type = argument.metadata["sql_type"]
    options: dict = {"dest": argument.name, "help": argument.metadata["description"]}
    if sql_type == "integer":
        options["type"] = int
    elif sql_type == "boolean":
        options["action"] = argparse.BooleanOptionalAction
    elif sql_type == "jsonb":
        options["type"] = _json_object
        options["metavar"] = "JSON"
    elif sql_type.endswith("[]"):
        options["action"] = "append"
        options["help"] += " Repeatable: one value each."
    options.update(QUERY_OPTION_DEFAULTS.get(argument.name, {}))
    if argument.name in QUERY_OPTION_EXAMPLES:
        options["help"] += f" E.g. {QUERY_OPTION_EXAMPLES[argument.name]}"
    if options.get("default") is not None:
        options["help"] += " (default here: %(default)s)"
    p.add_argument("--" + argument.name.replace("_", "-"), **options)


def _add_reading_commands(sub) -> None:
    """query (kb_retrieve as a table) and check (a folder, offline, before it is ingested)."""
    p = sub.add_parser("query", help="ask kb_retrieve and print a table")
    p.add_argument("text", help=retrieval.description("query") + " E.g. 'How many days do refunds take?'")
    for argument in retrieval.OPTIONAL_FIELDS:
        _add_query_option(p, argument)
    p.add_argument("--json", action="store_true", help="print kb_retrieve's rows as JSON")
    p.add_argument(
        "--explain", action="store_true", help="print kb_retrieve_explain's object (stages, candidates, the decision)"
    )
    p.set_defaults(func=cmd_query)
    p = sub.add_parser(
        "check",
        help="broken relative links, unknown supersedes, missing effective_from in a folder (offline); "
        "JSON report, exit 1 with findings",
    )
    p.add_argument("path", help="a folder (or file) as given to pgkb ingest, e.g. examples/corpus")
    p.add_argument("--namespace", help="the namespace pgkb ingest --namespace would give every document, e.g. policies")
    p.set_defaults(func=cmd_check)


def _add_evaluation_commands(sub) -> None:
    """eval and fit-answerability."""
    p = sub.add_parser("eval", help="evaluate retrieval on golden cases or a BEIR folder")
    _add_eval_arguments(p)
    p.set_defaults(func=cmd_eval)
    p = sub.add_parser(
        "fit-answerability",
        help="fit the answerability model to this knowledge base's golden cases and judgments; "
        "shows before/after on cross-validation folds; --undo goes back",
    )
    p.add_argument(
        "cases", nargs="*", help="golden case files (JSON, the format of pgkb eval), e.g. examples/eval/cases.json"
    )
    p.add_argument("--judged", action="store_true", help="also the golden cases the judgments make (kb.judged_cases)")
    p.add_argument("--mode", default="lexical,dense,hybrid", help="modes to fit (default all three)")
    p.add_argument("--k", type=int, default=10, help="passages asked per case (default %(default)s)")
    p.add_argument("--dry-run", action="store_true", help="fit and validate, write nothing")
    p.add_argument("--undo", action="store_true", help="deactivate the model in force and go back to the one before")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    p.set_defaults(func=cmd_fit_answerability)


def _add_eval_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("cases", nargs="?", help="a golden case file (JSON), e.g. examples/eval/cases.json")
    p.add_argument("--beir", metavar="DIR", help="a BEIR folder instead, e.g. ../shared/datasets/scifact")
    p.add_argument("--queries", help="BEIR: the queries file in DIR (default queries.jsonl), e.g. queries-train.jsonl")
    p.add_argument("--qrels", help="BEIR: the relevance file in DIR (default qrels/test.tsv), e.g. qrels-train.tsv")
    p.add_argument(
        "--mode", default="all", help="modes, comma-separated: hybrid, dense, lexical, auto or all (default all)"
    )
    p.add_argument("--k", type=int, default=100, help="passages asked per case (default %(default)s)")
    p.add_argument("--limit", type=int, help="evaluate only the first N queries (a fixed sample), e.g. 200")
    p.add_argument(
        "--corpus-sample",
        type=int,
        help="BEIR: load only the documents relevant to the selected queries plus the first N others, e.g. 2000",
    )
    p.add_argument(
        "--unanswerable",
        type=int,
        metavar="N",
        help="BEIR: leave out the relevant documents of N queries (a fixed sample) and expect no evidence for them, "
        "e.g. 50",
    )
    p.add_argument(
        "--decoys",
        metavar="DIR[:N]",
        help="BEIR: also ask the first N (100) queries of another BEIR folder, expecting no evidence, "
        "e.g. ../shared/datasets/scifact:50",
    )
    p.add_argument(
        "--category-key",
        default="kind",
        help="BEIR: the query metadata key whose value is the case's category (default kind; '' for none)",
    )
    p.add_argument("--namespace", help="ask every case in this namespace (BEIR: load the corpus into it), e.g. scifact")
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="a retrieval setting for this run, e.g. fusion=rrf or weight_dense=0.5 (repeatable)",
    )
    p.add_argument("--json", action="store_true", help=JSON_HELP + " (no progress bar)")
    p.add_argument("--plot", metavar="PNG", help="draw the metrics per mode into this image, e.g. eval.png")


def _add_client_commands(sub) -> None:
    """mcp, glossary, shards, lab: what assistants, teams and coordinators use."""
    p = sub.add_parser(
        "mcp",
        help="serve kb_retrieve, kb_explain, kb_status and the documents to AI assistants (MCP over stdio, or "
        "Streamable HTTP with --http)",
    )
    p.add_argument(
        "--namespace-tools",
        action="store_true",
        help="also one retrieval tool per namespace described in kb.namespace_descriptions "
        "(or PGKB_MCP_NAMESPACE_TOOLS=1)",
    )
    p.add_argument(
        "--http",
        action="store_true",
        help="serve Streamable HTTP at http://HOST:PORT/mcp instead of stdio; clients send "
        "Authorization: Bearer $PGKB_MCP_TOKEN (one is made and logged when unset)",
    )
    p.add_argument("--host", default="127.0.0.1", help="with --http: address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8766, help="with --http: port (default %(default)s)")
    p.set_defaults(func=cmd_mcp)
    p = sub.add_parser("glossary", help="load or list the team glossary (kb.glossary)")
    glossary.add_arguments(p)
    p.set_defaults(func=glossary.main)
    p = sub.add_parser("shards", help="a shard coordinator: shards, namespace map, routed ingest (PL/Proxy)")
    shards.add_arguments(p)
    p.set_defaults(func=shards.main)
    p = sub.add_parser("lab", help="a local web page to query, explain, compare, browse documents and evaluations")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8765, help="port to listen on (default %(default)s)")
    p.add_argument(
        "--allow-superuser",
        action="store_true",
        help="run as a superuser (or BYPASSRLS role) although row-level security then does not apply",
    )
    p.set_defaults(func=cmd_lab)


def _database(args) -> tuple[str, str]:
    """The database a command used and where its DSN came from: --dsn, PGKB_READ_DSN (reads of READ_COMMANDS),
    PGKB_DSN, or the embedded cluster."""
    settings = load_settings()
    if getattr(args, "dsn", None):
        return args.dsn, "--dsn"
    if args.command in READ_COMMANDS:
        return settings.read_dsn, settings.read_dsn_source
    return settings.dsn, settings.dsn_source


def _where(args) -> str:
    """' at <dsn> (from <where it came from>)' for the database a command used."""
    dsn, source = _database(args)
    return f" at {redacted(dsn)} (from {source})"


def _next_step_to_connect() -> str:
    if load_settings().dsn_override:
        return (
            "check that the server of PGKB_DSN runs and the string is right, or unset PGKB_DSN for the embedded cluster"
        )
    return "start the embedded cluster with `pgkb up` (or set PGKB_DSN to a running server)"


def _not_migrated(args) -> bool:
    """Whether the command's database has no kb schema (a missing function or schema then means: migrate)."""
    try:
        with connect(_database(args)[0]) as conn:
            return conn.execute("SELECT to_regclass('kb.schema_migrations') IS NULL AS missing").fetchone()["missing"]
    except psycopg.Error:
        return False


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (migrate.MigrationError, RuntimeError, FileNotFoundError) as exc:
        print(f"pgkb {args.command}: {exc}", file=sys.stderr)
        return 2
    except psycopg.OperationalError as exc:
        # a failed connection has no SQLSTATE; a deadlock or a cancelled statement is an
        # OperationalError too, and says what it is
        if exc.sqlstate is None:
            reason = str(exc).strip().splitlines()[0]
            print(f"pgkb {args.command}: cannot connect to the database{_where(args)}: {reason}", file=sys.stderr)
            print(f"next: {_next_step_to_connect()}", file=sys.stderr)
        else:
            print(f"pgkb {args.command}: {exc.sqlstate}: {exc}", file=sys.stderr)
        return 2
    except psycopg.Error as exc:
        message = exc.diag.message_primary or str(exc)
        if isinstance(
            exc, psycopg.errors.UndefinedFunction | psycopg.errors.InvalidSchemaName | psycopg.errors.UndefinedTable
        ) and _not_migrated(args):
            print(
                f"pgkb {args.command}: the database{_where(args)} is not migrated: run `pgkb migrate`", file=sys.stderr
            )
            print(f"(PostgreSQL said: {message})", file=sys.stderr)
            return 2
        print(f"pgkb {args.command}: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
