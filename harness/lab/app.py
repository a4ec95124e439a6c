"""The lab's web application: Starlette routes rendering Jinja2 templates, one page per job.

| route | page |
| --- | --- |
| ``GET/POST /query`` | the question form, retrieval settings for this query, the answerability decision, results |
| ``GET/POST /explain`` | kb_retrieve_explain of the same form: analysis, stages, candidates, thresholds, timings |
| ``GET/POST /compare`` | one question under two modes/settings (``a.*``, ``b.*``) side by side, rank changes marked |
| ``GET /documents`` | documents with status, lifecycle, ingest state, chunks; filters |
| ``GET /documents/{id}`` | one document and its chunks (section path, tokens, vector of the active model) |
| ``POST /actions/retry-failed`` | embed the queued and failed chunks the role may see (roles that may run the queue) |
| ``POST /documents/{id}/reindex`` | re-index one document (only when the database offers kb.reindex_document) |
| ``GET /eval`` | runs, a trend line per configuration, latest run per configuration; the form that starts one |
| ``POST /eval/start``, ``GET /eval/jobs/{id}`` | an evaluation run in the background (pgkb_admin), its progress |
| ``GET /eval/{id}`` | one run: configuration, metrics, categories, cases with links that ask each case again exactly |
| ``GET /eval/compare?a=&b=`` | run against run: flipped cases, per-case deltas, overlap@k and rank-biased overlap |
| ``GET /judgments``, ``/judgments/cases.json`` | judged questions as golden cases; their export (cases.json format) |

Every database call runs as the lab's role (harness.lab.database). Errors the user can cause or meet
(database down, a role that cannot be used or lacks a privilege, a query the database refuses, an
empty knowledge base) are pages that say what happened and what to do, never a traceback. POST actions
(and judging a result) need the form token of this process, so another web site cannot make a browser trigger them. The
question forms are posted (a long question does not fit in a URL) and links with a short question use
GET; a POST whose Origin is another site is refused. Every response carries a content-security policy
(nothing from another host, no inline script, no framing) and the usual anti-sniffing headers.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from .. import evaluate, retrieval
from ..config import REPO_ROOT
from . import queries, render
from . import runs as lab_runs
from .database import LabDatabase, LabError, NotPermitted, QueryFailed, redacted
from .forms import FormError, QueryForm, query_form, settings_from
from .jobs import Jobs

HERE = Path(__file__).resolve().parent
PAGE_SIZE = 200
MAX_UPLOAD = 5_000_000  # bytes of an uploaded case file


SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
        b"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
]


class SecurityHeaders:
    """ASGI middleware adding SECURITY_HEADERS to every HTTP response (pages, errors, static files)."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                names = {name for name, _ in SECURITY_HEADERS}
                message["headers"] = [h for h in message.get("headers", []) if h[0] not in names] + SECURITY_HEADERS
            await send(message)

        await self.app(scope, receive, with_headers)


def create_app(dsn: str, role: str | None, allowed_hosts: list[str] | None = None) -> Starlette:
    """The lab for one database and role. allowed_hosts: the Host headers accepted (None: any), which
    keeps pages of a loopback-bound lab from being read through DNS rebinding."""
    db = LabDatabase(dsn, role)
    jobs = Jobs()
    token = secrets.token_urlsafe(24)
    templates = Jinja2Templates(
        directory=str(HERE / "templates"),
        context_processors=[lambda request: {"role": db.role_label, "bypass_rls": db.bypasses_rls}],
    )
    env = templates.env
    env.filters["markdown"] = render.markdown
    env.filters["snippet"] = render.snippet
    env.filters["number"] = _number
    env.globals.update(
        modes=retrieval.MODES,
        lifecycles=queries.LIFECYCLES,
        statuses=queries.STATUSES,
        ingest_states=queries.INGEST_STATES,
        database=redacted(dsn),
        token=token,
    )

    def page(request: Request, name: str, context: dict[str, Any], status: int = 200) -> Response:
        return templates.TemplateResponse(request, name, context, status_code=status)

    def error_page(request: Request, exc: LabError) -> Response:
        return page(request, "error.html", {"error": exc, "nav": ""}, status=exc.status)

    # -- query, explain, compare ------------------------------------------------------------

    def form_meta() -> dict[str, Any]:
        def work(conn):
            return {"namespaces": queries.namespaces(conn), "settings": queries.query_settings(conn)}

        return db.run(work)

    async def parameters(request: Request) -> Any:
        """The form's fields: the URL's (GET, links) or the posted form's (POST: long questions). A POST from
        another site (its Origin is not this lab) is refused."""
        if request.method != "POST":
            return request.query_params
        origin = request.headers.get("origin")
        if origin and origin != "null" and urlsplit(origin).netloc != request.headers.get("host"):
            raise HTTPException(403, f"a form posted from {origin} is refused: post it from the lab's own pages")
        if request.headers.get("sec-fetch-site") == "cross-site":
            raise HTTPException(403, "a form posted from another site is refused: post it from the lab's own pages")
        return await request.form()

    def read_form(params: Any, meta: dict[str, Any], side: str = "") -> tuple[QueryForm, str | None]:
        allowed = {s["key"]: s for s in meta["settings"]}
        try:
            form = query_form(params, set(allowed), side)
        except FormError as exc:
            return query_form(params, None, side), str(exc)
        known = {n["namespace"] for n in meta["namespaces"]}
        if form.namespace.strip() and form.namespace.strip() not in known:
            seen = ", ".join(sorted(known)) or "none"
            return form, (
                f"unknown namespace {form.namespace.strip()!r}: the role {db.role_label} sees no document in it "
                f"(namespaces it sees: {seen})"
            )
        return form, None

    def inline_error(exc: Exception) -> dict[str, Any]:
        if isinstance(exc, LabError):
            return {"title": exc.title, "message": exc.message, "hint": exc.hint, "status": exc.status}
        return {"title": "The form has a mistake", "message": str(exc), "hint": None, "status": 400}

    def judge(params: Any, form: QueryForm) -> dict[str, Any] | None:
        """Record the judgment a result card's button sent with the form (``judge``: JSON of judgment,
        namespace and source), as the lab's role through kb.record_judgment; None when none was sent.
        A judgment writes, so it needs this process's form token."""
        raw = params.get("judge") if hasattr(params, "get") else None
        if not raw:
            return None
        if not secrets.compare_digest(str(params.get("token", "")), token):
            raise HTTPException(403, "the form token is missing or stale: reload the page and try again")
        try:
            choice = json.loads(str(raw))
            judgment, namespace, source = str(choice["j"]), str(choice["ns"]), str(choice["src"])
        except (ValueError, KeyError, TypeError):
            raise HTTPException(400, "the judgment is not one a result card sends") from None
        turns = form.arguments().get("context")
        db.run(
            lambda conn: queries.record_judgment(
                conn,
                namespace=namespace,
                query=form.q,
                source=source,
                judgment=judgment,
                context=turns,
                as_of=form.as_of.strip() or None,
            )
        )
        return {"judgment": judgment, "namespace": namespace, "source": source}

    async def query_page(request: Request) -> Response:
        params = await parameters(request)
        return await run_in_threadpool(_query_page, request, params)

    def _query_page(request: Request, params: Any) -> Response:
        meta = form_meta()
        form, problem = read_form(params, meta)
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
                context["judged"] = judge(params, form)
                req = form.request()

                def work(conn):
                    rows = queries.retrieve(conn, req)
                    # the reason of the answerability decision (probability, thresholds, signals) is in the
                    # explain object (a second retrieval of the same request, in the same transaction)
                    explained = queries.explain(conn, req)
                    docs = queries.documents_by_id(
                        conn, [r["document_id"] for r in rows], req["arguments"].get("as_of")
                    )
                    judged = queries.judgments_for(conn, sorted({(r["namespace"], form.q) for r in rows}))
                    return rows, explained, docs, judged

                context["rows"], context["explain"], context["docs"], context["judgments"] = db.run(
                    work, settings=form.settings
                )
            except (FormError, QueryFailed, NotPermitted) as exc:
                context["error"] = inline_error(exc)
        if context["rows"] is not None:
            context["groups"] = render.group_by_document(context["rows"])
            context["answer"] = render.answer_summary(context["rows"], context["explain"])
            context["dense_label"] = render.dense_score_label(context["explain"])
        status = context["error"]["status"] if context["error"] else 200
        return page(request, "query.html", context, status)

    async def explain_page(request: Request) -> Response:
        params = await parameters(request)
        return await run_in_threadpool(_explain_page, request, params)

    def _explain_page(request: Request, params: Any) -> Response:
        meta = form_meta()
        form, problem = read_form(params, meta)
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

                def work(conn):
                    answer = queries.explain(conn, req)
                    hidden, docs = [], {}
                    filters = req["arguments"].get("filters") or {}
                    # versions that the lifecycle rule hid: the same retrieval with history allowed, minus
                    # the documents already returned (asked only when the filters do not already lift it)
                    if "include_history" not in filters and "status" not in filters:
                        history = {
                            **req,
                            "arguments": {**req["arguments"], "filters": {**filters, "include_history": True}},
                        }
                        shown = {r["document_id"] for r in answer.get("results") or []}
                        hidden = [
                            r
                            for r in queries.explain(conn, history).get("results") or []
                            if r["document_id"] not in shown
                        ]
                    # every passage's document with its lifecycle at as_of (returned and hidden ones)
                    ids = [r["document_id"] for r in (answer.get("results") or []) + hidden]
                    docs = queries.documents_by_id(conn, ids, req["arguments"].get("as_of"))
                    return answer, hidden, docs

                context["explain"], context["hidden"], context["passage_docs"] = db.run(work, settings=form.settings)
            except (FormError, QueryFailed, NotPermitted) as exc:
                context["error"] = inline_error(exc)
        answer = context["explain"]
        if answer is not None:
            context["answer"] = render.answer_summary(None, answer)
            context["dense_label"] = render.dense_score_label(answer)
            context["segments"], context["total_ms"] = render.timing_segments(answer.get("timings_ms") or {})
            context["extra"] = render.explain_extra(answer)
        status = context["error"]["status"] if context["error"] else 200
        return page(request, "explain.html", context, status)

    async def compare_page(request: Request) -> Response:
        params = await parameters(request)
        return await run_in_threadpool(_compare_page, request, params)

    def _compare_page(request: Request, params: Any) -> Response:
        meta = form_meta()
        sides, problem = {}, None
        for side in ("a", "b"):
            sides[side], side_problem = read_form(compare_sides(params), meta, f"{side}.")
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
                context["judged"] = judge(params, sides["a"])
                for side in ("a", "b"):
                    req = sides[side].request()

                    def work(conn, req=req):
                        rows = queries.retrieve(conn, req)
                        ids = [r["document_id"] for r in rows]
                        return rows, queries.documents_by_id(conn, ids, req["arguments"].get("as_of"))

                    context[f"rows_{side}"], docs = db.run(work, settings=sides[side].settings)
                    context.setdefault("docs", {}).update(docs)
                context["changes"] = render.rank_changes(context["rows_a"], context["rows_b"])
                pairs = sorted({(r["namespace"], sides["a"].q) for r in context["rows_a"] + context["rows_b"]})
                context["judgments"] = db.run(lambda conn: queries.judgments_for(conn, pairs))
                context["answer_a"] = render.answer_summary(context["rows_a"], None)
                context["answer_b"] = render.answer_summary(context["rows_b"], None)
            except (FormError, QueryFailed, NotPermitted) as exc:
                context["error"] = inline_error(exc)
        status = context["error"]["status"] if context["error"] else 200
        return page(request, "compare.html", context, status)

    # -- documents --------------------------------------------------------------------------

    def documents_page(request: Request) -> Response:
        p = request.query_params
        filters = {
            name: p.get(name) or None
            for name in ("namespace", "status", "lifecycle", "ingest_status", "doc_type", "text", "as_of")
        }
        offset = _int(p.get("offset"), 0)

        def work(conn):
            rows, total = queries.documents(conn, **filters, limit=PAGE_SIZE, offset=offset)
            permitted = queries.permissions(conn)
            return {
                "rows": rows,
                "total": total,
                "namespaces": queries.namespaces(conn),
                "permissions": permitted,
                "failures": queries.failures(conn, filters["namespace"]) if permitted["failures"] else [],
            }

        data = db.run(work)
        more = urlencode({**{k: v for k, v in filters.items() if v}, "offset": offset + PAGE_SIZE})
        return page(
            request,
            "documents.html",
            {
                "nav": "documents",
                "filters": filters,
                "offset": offset,
                "page_size": PAGE_SIZE,
                "more": more,
                "done": p.get("done"),
                **data,
            },
        )

    def document_page(request: Request) -> Response:
        document_id = request.path_params["id"]
        as_of = request.query_params.get("as_of") or None

        def work(conn):
            doc = queries.document(conn, document_id, as_of)
            if doc is None:
                return None
            return {
                "doc": doc,
                "chunks": queries.chunks(conn, document_id),
                "model": queries.active_model(conn),
                "permissions": queries.permissions(conn),
            }

        data = db.run(work)
        if data is None:
            raise HTTPException(404, f"no document {document_id} that the role {db.role_label} can see")
        return page(request, "document.html", {"nav": "documents", "done": request.query_params.get("done"), **data})

    async def checked_form(request: Request) -> Any:
        form = await request.form()
        if not secrets.compare_digest(str(form.get("token", "")), token):
            raise HTTPException(403, "the form token is missing or stale: reload the page and try again")
        return form

    async def retry_failed(request: Request) -> Response:
        form = await checked_form(request)
        permitted = await run_in_threadpool(lambda: db.run(queries.permissions))
        if not permitted["retry"]:
            raise NotPermitted(
                f"the role {db.role_label} may not run the embedding queue",
                "grant pgkb_writer or pgkb_admin to the lab's role",
            )
        await run_in_threadpool(lambda: db.run(queries.retry_failed, transaction=False))
        back = str(form.get("back") or "/documents")
        back = back if back.startswith("/") and not back.startswith("//") else "/documents"
        separator = "&" if "?" in back else "?"
        return RedirectResponse(f"{back}{separator}done=retried", status_code=303)

    async def reindex(request: Request) -> Response:
        await checked_form(request)
        document_id = request.path_params["id"]
        permitted = await run_in_threadpool(lambda: db.run(queries.permissions))
        if not permitted["reindex"]:
            raise NotPermitted(
                f"the role {db.role_label} may not re-index documents here",
                "needs EXECUTE on kb.reindex_document(bigint), which this database may not have",
            )
        await run_in_threadpool(lambda: db.run(lambda conn: queries.reindex(conn, document_id)))
        return RedirectResponse(f"/documents/{document_id}?done=reindexed", status_code=303)

    # -- evaluation -------------------------------------------------------------------------

    def denied_eval(request: Request) -> Response:
        return page(request, "eval.html", {"nav": "eval", "denied": True, "runs": []}, status=403)

    def eval_page(request: Request) -> Response:
        p = request.query_params

        def work(conn):
            if not queries.permissions(conn)["eval"]:
                return None
            return {
                "runs": queries.eval_runs(conn),
                "may_run": queries.may_run_eval(conn),
                "namespaces": queries.namespaces(conn),
                "settings": queries.query_settings(conn),
            }

        data = db.run(work)
        if data is None:
            return denied_eval(request)
        runs = data["runs"]
        datasets = sorted({r["dataset"] for r in runs})
        dataset = p.get("dataset") or (runs[0]["dataset"] if runs else None)
        selected = [r for r in runs if r["dataset"] == dataset]
        metric_names = render.numeric_metrics(selected)
        metric = p.get("metric") or (metric_names[0] if metric_names else "ndcg@10")
        configs = lab_runs.configurations(selected)
        return page(
            request,
            "eval.html",
            {
                "nav": "eval",
                "denied": False,
                "runs": selected,
                "all_runs": runs,
                "datasets": datasets,
                "dataset": dataset,
                "metric": metric,
                "metric_names": metric_names,
                "configs": configs,
                "chart": render.trend_svg(selected, metric, series=configs),
                "may_run": data["may_run"],
                "meta": {"namespaces": data["namespaces"], "settings": data["settings"]},
                "case_files": case_files(),
                "jobs": jobs.recent(),
                "modes_all": retrieval.MODES,
            },
        )

    async def eval_start(request: Request) -> Response:
        form = await checked_form(request)
        upload = form.get("upload")
        uploaded = await upload.read(MAX_UPLOAD + 1) if upload is not None and hasattr(upload, "read") else b""
        return await run_in_threadpool(_eval_start, request, form, uploaded)

    def _eval_start(request: Request, form: Any, uploaded: bytes) -> Response:
        def check(conn):
            return {
                "may_run": queries.may_run_eval(conn),
                "settings": queries.query_settings(conn),
                "namespaces": queries.namespaces(conn),
            }

        meta = db.run(check)
        if not meta["may_run"]:
            raise NotPermitted(
                f"the role {db.role_label} may not run evaluations: running one stores it in kb.eval_runs",
                "grant pgkb_admin to the lab's role",
            )
        try:
            cases, dataset = chosen_cases(form, uploaded)
            settings = settings_from(form, "set.", {s["key"] for s in meta["settings"]})
            modes = [m for m in form.getlist("modes") if m in retrieval.MODES] or ["auto"]
            k = int(form.get("k") or 100)
            if not 1 <= k <= 1000:
                raise FormError(f"k must be between 1 and 1000, not {k}")
        except (FormError, ValueError, RuntimeError) as exc:
            raise HTTPException(400, f"cannot start the evaluation: {exc}") from exc
        namespace = str(form.get("namespace") or "").strip() or None
        if namespace and namespace not in {n["namespace"] for n in meta["namespaces"]}:
            raise HTTPException(
                400, f"unknown namespace {namespace!r}: the role {db.role_label} sees no document in it"
            )
        db.run(lambda conn: None, settings=settings)  # each setting checked by kb.setting before the job starts
        job = jobs.start(
            dsn, db.role, cases=cases, dataset=dataset, modes=modes, k=k, namespace=namespace, settings=settings
        )
        return RedirectResponse(f"/eval/jobs/{job.id}", status_code=303)

    def chosen_cases(form: Any, uploaded: bytes) -> tuple[list[evaluate.Case], str]:
        source = str(form.get("source") or "")
        if uploaded:
            if len(uploaded) > MAX_UPLOAD:
                raise FormError(f"the case file is larger than {MAX_UPLOAD // 1_000_000} MB")
            name = getattr(form.get("upload"), "filename", None) or "upload.json"
            try:
                data = json.loads(uploaded.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise FormError(f"{name} is not a JSON list of cases: {exc}") from None
            return evaluate.cases_from(data, name), f"cases:{Path(name).name}"
        if source == "judged":
            rows = db.run(queries.judged_cases)
            if not rows:
                raise FormError("there are no judged cases yet: judge results on the query page first")
            return evaluate.cases_from([r["golden_case"] for r in rows], "kb.judged_cases"), "judged:kb.judged_cases"
        files = {f.name: f for f in case_files()}
        if source.startswith("file:") and source[5:] in files:
            path = files[source[5:]]
            return evaluate.load_cases(str(path)), f"cases:{path.name}"
        raise FormError("choose a case file, the judged cases, or upload a JSON list of cases")

    def job_page(request: Request) -> Response:
        job = jobs.get(request.path_params["id"])
        if job is None:
            raise HTTPException(404, f"no evaluation job {request.path_params['id']} in this lab process")
        return page(request, "eval_job.html", {"nav": "eval", "job": job})

    def eval_run_page(request: Request) -> Response:
        run_id = request.path_params["id"]
        only_failures = request.query_params.get("only") == "failures"

        def work(conn):
            if not queries.permissions(conn)["eval"]:
                return "denied"
            run = queries.eval_run(conn, run_id)
            if run is None:
                return None
            return {
                "run": run,
                "results": queries.eval_results(conn, run_id),
                "dataset_runs": queries.eval_runs(conn, run["dataset"]),
                "in_force": {s["key"]: s["value"] for s in queries.query_settings(conn)},
            }

        data = db.run(work)
        if data == "denied":
            return denied_eval(request)
        if data is None:
            raise HTTPException(404, f"no evaluation run {run_id} that the role {db.role_label} can see")
        run = data["run"]
        results = data["results"]
        if only_failures:
            results = [r for r in results if not lab_runs.passed(r)]
        links = {r["case_id"]: case_link(r, run, data["in_force"]) for r in results}
        failed_cases = {r["case_id"] for r in data["results"] if not lab_runs.passed(r)}
        metric = request.query_params.get("metric") or "ndcg@10"
        configs = lab_runs.configurations(data["dataset_runs"])
        others = [r for r in data["dataset_runs"] if r["id"] != run["id"]]
        return page(
            request,
            "eval_run.html",
            {
                "nav": "eval",
                "run": run,
                "results": results,
                "links": links,
                "only_failures": only_failures,
                "metric": metric,
                "failed": failed_cases,
                "config": next((c for c in configs if c["key"] == run["configuration_key"]), None),
                "others": others,
                "chart": render.trend_svg(data["dataset_runs"], metric, run["id"], series=configs),
            },
        )

    def run_against_run_page(request: Request) -> Response:
        p = request.query_params
        left_id, right_id = _int(p.get("a"), 0), _int(p.get("b"), 0)

        def work(conn):
            if not queries.permissions(conn)["eval"]:
                return "denied"
            left, right = queries.eval_run(conn, left_id), queries.eval_run(conn, right_id)
            if left is None or right is None:
                return None
            return {
                "left": left,
                "right": right,
                "left_results": queries.eval_results(conn, left_id),
                "right_results": queries.eval_results(conn, right_id),
                "dataset_runs": queries.eval_runs(conn, left["dataset"]),
                "in_force": {s["key"]: s["value"] for s in queries.query_settings(conn)},
            }

        data = db.run(work)
        if data == "denied":
            return denied_eval(request)
        if data is None:
            raise HTTPException(
                404, f"no evaluation runs {left_id} and {right_id} that the role {db.role_label} can see"
            )
        k = min(_int(p.get("k"), 10) or 10, 20)
        comparison = lab_runs.run_against_run(data["left_results"], data["right_results"], k=k)
        configs = {c["key"]: c for c in lab_runs.configurations([data["left"], data["right"]])}
        links = {
            c["case_id"]: (
                case_link(c["left"], data["left"], data["in_force"]),
                case_link(c["right"], data["right"], data["in_force"]),
            )
            for c in comparison["cases"]
        }
        return page(
            request,
            "eval_compare.html",
            {
                "nav": "eval",
                "left": data["left"],
                "right": data["right"],
                "left_config": configs.get(data["left"]["configuration_key"]),
                "right_config": configs.get(data["right"]["configuration_key"]),
                "cmp": comparison,
                "links": links,
                "dataset_runs": data["dataset_runs"],
            },
        )

    # -- judgments --------------------------------------------------------------------------

    def judgments_page(request: Request) -> Response:
        namespace = request.query_params.get("namespace") or None
        cases = db.run(lambda conn: queries.judged_cases(conn, namespace))
        return page(
            request,
            "judgments.html",
            {"nav": "judgments", "cases": cases, "namespace": namespace, "export": "/judgments/cases.json"},
        )

    def judgments_export(request: Request) -> Response:
        namespace = request.query_params.get("namespace") or None
        cases = db.run(lambda conn: queries.judged_cases(conn, namespace))
        body = json.dumps([c["golden_case"] for c in cases], ensure_ascii=False, indent=2) + "\n"
        safe = "".join(ch for ch in namespace or "" if ch.isascii() and (ch.isalnum() or ch in "._-"))
        name = f"judged-cases{'-' + safe if safe else ''}.json"
        return Response(
            body,
            media_type="application/json",
            headers={"content-disposition": f'attachment; filename="{name}"'},
        )

    def home(request: Request) -> Response:
        return RedirectResponse("/query", status_code=307)

    def highlight_css(request: Request) -> Response:
        return Response(render.PYGMENTS_CSS, media_type="text/css")

    async def lab_error(request: Request, exc: Exception) -> Response:
        return error_page(request, exc)  # type: ignore[arg-type]

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        titles = {404: "Not found", 403: "Refused", 405: "Method not allowed"}
        error = LabError(str(exc.detail))
        error.status, error.title = exc.status_code, titles.get(exc.status_code, "Error")
        return error_page(request, error)

    routes = [
        Route("/", home),
        Route("/query", query_page, methods=["GET", "POST"]),
        Route("/explain", explain_page, methods=["GET", "POST"]),
        Route("/compare", compare_page, methods=["GET", "POST"]),
        Route("/documents", documents_page),
        Route("/documents/{id:int}", document_page),
        Route("/documents/{id:int}/reindex", reindex, methods=["POST"]),
        Route("/actions/retry-failed", retry_failed, methods=["POST"]),
        Route("/eval", eval_page),
        Route("/eval/start", eval_start, methods=["POST"]),
        Route("/eval/jobs/{id:int}", job_page),
        Route("/eval/compare", run_against_run_page),
        Route("/eval/{id:int}", eval_run_page),
        Route("/judgments", judgments_page),
        Route("/judgments/cases.json", judgments_export),
        Route("/static/highlight.css", highlight_css),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts)] if allowed_hosts else []
    middleware.insert(0, Middleware(SecurityHeaders))
    app = Starlette(
        routes=routes, middleware=middleware, exception_handlers={LabError: lab_error, HTTPException: http_error}
    )
    app.state.database = db
    app.state.token = token
    app.state.jobs = jobs
    return app


def compare_sides(params: Any) -> dict[str, str]:
    """The compare form's fields; a query form sent to compare (its mode and set.* unprefixed) becomes both
    sides with that mode and side A with its settings, so "Compare…" starts from the question as asked."""
    values = {key: str(value) for key, value in params.items()}
    if not any(key.startswith(("a.", "b.")) for key in values):
        for key, value in list(values.items()):
            if key == "mode":
                values["a.mode"] = values["b.mode"] = value
            elif key.startswith("set."):
                values[f"a.{key}"] = value
    return values


def _int(value: str | None, default: int) -> int:
    try:
        return max(int(value or default), 0)
    except ValueError:
        return default


def _number(value: Any, digits: int = 3) -> str:
    """A score or metric for a table cell: None as a dash, floats with `digits` significant digits."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def case_files() -> list[Path]:
    """The case files a run may be started from without an upload: examples/eval/*.json of this checkout."""
    folder = REPO_ROOT / "examples" / "eval"
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def _setting_text(value: Any) -> str:
    """A setting's jsonb value as the text of a session setting (what set_config takes)."""
    return value if isinstance(value, str) else json.dumps(value)


def case_link(result: dict[str, Any], run: dict[str, Any], in_force: dict[str, Any]) -> str:
    """The query page asking a stored case exactly as the run asked it: its question, namespace, follow-up
    context, as_of and k, the run's mode, and every setting of the run's configuration whose value differs
    from the one in force now (for runs stored before configurations were complete: their overrides)."""
    params = run.get("params") or {}
    config = run.get("configuration") or {}
    items = [("q", result["query"])]
    namespace = result.get("namespace") if "namespace" in result else params.get("namespace")
    if namespace or params.get("namespace"):
        items.append(("namespace", namespace or params.get("namespace")))
    items.append(("mode", run["mode"]))
    items.append(("k", str(result.get("k") or params.get("k") or 10)))
    if result.get("as_of"):
        items.append(("as_of", result["as_of"]))
    if result.get("context"):
        items.append(("context", "\n".join(result["context"])))
    if config.get("complete"):
        chosen = {key: value for key, value in (config.get("settings") or {}).items() if in_force.get(key) != value}
    else:
        chosen = dict(params.get("settings") or {})
    items += [(f"set.{key}", _setting_text(value)) for key, value in sorted(chosen.items()) if key in in_force]
    return "/query?" + urlencode(items)
