"""The lab's web application: Starlette routes rendering Jinja2 templates, one page per job.

| route | page |
| --- | --- |
| ``GET/POST /query`` | the question form, retrieval settings for this query, the answerability decision, results |
| ``GET/POST /explain`` | kb_retrieve_explain of the same form: analysis, stages, candidates, thresholds, timings |
| ``GET/POST /compare`` | one question under two modes/settings (``a.*``, ``b.*``) side by side, rank changes marked |
| ``POST /query/judge``, ``POST /compare/judge`` | a result card's judgment (kb.record_judgment), then the page again |
| ``GET /documents`` | documents with status, lifecycle, ingest state, chunks; filters |
| ``GET /documents/{id}`` | one document and its chunks (section path, tokens, vector of the active model) |
| ``POST /actions/retry-failed`` | embed the queued and failed chunks the role may see (roles that may run the queue) |
| ``GET /eval`` | runs, a trend line per configuration, latest run per configuration; the form that starts one |
| ``POST /eval/start``, ``GET /eval/jobs/{id}`` | an evaluation run in the background (pgkb_admin), its progress |
| ``POST /eval/jobs/{id}/cancel`` | cancel a queued or running evaluation |
| ``POST /eval/{id}/again`` | the run's cases, mode, k, namespace and configuration asked again as a new job |
| ``GET /eval/{id}`` | one run: configuration, metrics, categories, cases with links that ask each case again exactly |
| ``GET /eval/compare?a=&b=`` | run against run: flipped cases, per-case deltas, overlap@k and rank-biased overlap |
| ``GET /judgments``, ``/judgments/cases.json`` | cases and judgments, filtered; the ready cases as cases.json |
| ``GET /judgments/next`` | the query page of the next question waiting for a judgment (kb.judging_queue) |
| ``POST /judgments/action`` | accept or reject (admins), delete or restore a judgment |

Each page's handlers live in harness.lab.pages (query, documents, evaluation, judgments) and take the
LabContext (harness.lab.context) that create_app builds: the database as the lab's role, the templates,
the form token of this process and the evaluation jobs.

Every database call runs as the lab's role (harness.lab.database). Errors the user can cause or meet
(database down, a role that cannot be used or lacks a privilege, a query the database refuses, an
empty knowledge base) are pages that say what happened and what to do, never a traceback. A route that
changes data (an action: retry, starting an evaluation, judging a result) accepts only POST (a GET gives
405 and writes nothing, so no link in a browser's history writes) and needs the form token of this
process, so another web site cannot make a browser trigger it (tests/test_lab_post_only.py walks the
routes). The question forms are posted (a long question does not fit in a URL) and links with a short
question use GET; they only read. A POST whose Origin is another site is refused. Every response carries
a content-security policy (nothing from another host, no inline script, no framing) and the usual
anti-sniffing headers.
"""

from __future__ import annotations

import secrets
from functools import partial
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from .. import retrieval
from . import queries, render
from .context import LabContext
from .database import LabDatabase, LabError, redacted
from .jobs import Jobs
from .pages import documents, evaluation, judgments, query

HERE = Path(__file__).resolve().parent


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
    token = secrets.token_urlsafe(24)
    lab = LabContext(db=db, templates=lab_templates(db, token), token=token, jobs=Jobs())
    routes = [
        Route("/", home),
        Route("/query", partial(query.query_page, lab), methods=["GET", "POST"]),
        Route("/explain", partial(query.explain_page, lab), methods=["GET", "POST"]),
        Route("/compare", partial(query.compare_page, lab), methods=["GET", "POST"]),
        Route("/query/judge", partial(query.query_judge, lab), methods=["POST"]),
        Route("/compare/judge", partial(query.compare_judge, lab), methods=["POST"]),
        Route("/documents", partial(documents.documents_page, lab)),
        Route("/documents/{id:int}", partial(documents.document_page, lab)),
        Route("/actions/retry-failed", partial(documents.retry_failed, lab), methods=["POST"]),
        Route("/eval", partial(evaluation.eval_page, lab)),
        Route("/eval/start", partial(evaluation.eval_start, lab), methods=["POST"]),
        Route("/eval/jobs/{id:int}", partial(evaluation.job_page, lab)),
        Route("/eval/jobs/{id:int}/cancel", partial(evaluation.job_cancel, lab), methods=["POST"]),
        Route("/eval/compare", partial(evaluation.run_against_run_page, lab)),
        Route("/eval/{id:int}", partial(evaluation.eval_run_page, lab)),
        Route("/eval/{id:int}/again", partial(evaluation.run_again, lab), methods=["POST"]),
        Route("/judgments", partial(judgments.judgments_page, lab)),
        Route("/judgments/next", partial(judgments.next_question, lab)),
        Route("/judgments/cases.json", partial(judgments.judgments_export, lab)),
        Route("/judgments/action", partial(judgments.judgment_action, lab), methods=["POST"]),
        Route("/static/highlight.css", highlight_css),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts)] if allowed_hosts else []
    middleware.insert(0, Middleware(SecurityHeaders))
    app = Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={LabError: partial(lab_error, lab), HTTPException: partial(http_error, lab)},
    )
    app.state.database = db
    app.state.token = token
    app.state.jobs = lab.jobs
    return app


def lab_templates(db: LabDatabase, token: str) -> Jinja2Templates:
    """The pages' templates, with the filters and globals every page uses (the footer's role and database,
    the form token, the choices of the forms)."""
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
        database=redacted(db.dsn),
        token=token,
        judge_actions=query.JUDGE_ACTIONS,
    )
    return templates


def home(request: Request) -> Response:
    return RedirectResponse("/query", status_code=307)


def highlight_css(request: Request) -> Response:
    return Response(render.PYGMENTS_CSS, media_type="text/css")


async def lab_error(lab: LabContext, request: Request, exc: Exception) -> Response:
    return lab.error_page(request, exc)  # type: ignore[arg-type]


async def http_error(lab: LabContext, request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    titles = {404: "Not found", 403: "Refused", 405: "Method not allowed"}
    error = LabError(str(exc.detail))
    error.status, error.title = exc.status_code, titles.get(exc.status_code, "Error")
    return lab.error_page(request, error)


def _number(value: Any, digits: int = 3) -> str:
    """A score or metric for a table cell: None as a dash, floats with `digits` significant digits."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)
