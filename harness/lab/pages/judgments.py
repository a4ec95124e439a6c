"""The judgments page: the golden cases the accepted judgments make (ready, disputed, incomplete), the
judgments themselves with their raters and review state, filtered, and the actions on one judgment
(accept, reject, delete, restore: ``POST /judgments/action``), and the export of the ready cases in the
cases.json format (`pgkb eval` and the evaluation page read it). The rules are the database's
(sql/096_judgments/); this page shows them and calls its doors."""

from __future__ import annotations

import json
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from .. import queries
from ..context import LabContext, nonnegative_int

CASE_STATES = ("ready", "disputed", "incomplete")
QUEUE_SHOWN = 20


def question_link(question: dict) -> str:
    """The query page asking a question of the judging queue as it is to be judged."""
    fields = {
        "q": question["query"],
        "namespace": question["namespace"],
        "as_of": question["as_of"].isoformat() if question["as_of"] else "",
        "context": "\n".join(question["context"] or []),
    }
    return "/query?" + urlencode({k: v for k, v in fields.items() if v})


def next_question(lab: LabContext, request: Request) -> Response:
    """GET /judgments/next: the query page of the first question of the judging queue other than the one
    given (``skip``: the question just judged, ``skip_ns`` its namespace); the judgments page when none waits."""
    skip = (request.query_params.get("skip") or "", request.query_params.get("skip_ns") or "")
    waiting = lab.db.run(lambda conn: queries.judging_queue(conn, QUEUE_SHOWN))
    for question in waiting:
        if (question["query"], question["namespace"]) != skip:
            return RedirectResponse(question_link(question), status_code=303)
    return RedirectResponse("/judgments?done=queue-empty", status_code=303)


def _filters(params) -> dict[str, str | None]:
    state = params.get("state") or None
    return {
        "namespace": (params.get("namespace") or "").strip() or None,
        "state": state if state in queries.JUDGMENT_STATES else None,
        "text": (params.get("text") or "").strip()[:200] or None,
        "case_state": params.get("case_state") if params.get("case_state") in CASE_STATES else None,
    }


def judgments_page(lab: LabContext, request: Request) -> Response:
    chosen = _filters(request.query_params)

    def work(conn):
        return (
            queries.judged_cases(conn, chosen["namespace"], chosen["case_state"]),
            queries.judgments(conn, chosen["namespace"], chosen["state"], chosen["text"]),
            conn.execute("SELECT kb.judges_as_admin() AS admin").fetchone()["admin"],
            queries.judging_queue(conn, QUEUE_SHOWN),
        )

    cases, judgments, admin, waiting = lab.db.run(work)
    return lab.page(
        request,
        "judgments.html",
        {
            "nav": "judgments",
            "cases": cases,
            "judgments": judgments,
            "waiting": [{**q, "link": question_link(q)} for q in waiting],
            "admin": admin,
            "filters": chosen,
            "states": queries.JUDGMENT_STATES,
            "case_states": CASE_STATES,
            "here": "/judgments?" + urlencode({k: v for k, v in chosen.items() if v}),
            "export": "/judgments/cases.json",
            "done": request.query_params.get("done"),
        },
    )


async def judgment_action(lab: LabContext, request: Request) -> Response:
    """POST /judgments/action: accept, reject, retire (delete) or restore one judgment, or retire every live
    judgment of a case the role may change (``retire-case``), then the page again."""
    form = await lab.checked_form(request)
    action = str(form.get("action") or "")
    if action == "retire-case":
        namespace, case_id = str(form.get("namespace") or ""), str(form.get("case") or "")
        await run_in_threadpool(lambda: lab.db.run(lambda conn: queries.retire_case(conn, namespace, case_id)))
    elif action in queries.JUDGMENT_ACTIONS:
        judgment_id = nonnegative_int(form.get("id"), 0)
        await run_in_threadpool(lambda: lab.db.run(lambda conn: queries.judgment_action(conn, action, judgment_id)))
    else:
        raise HTTPException(400, f"action must be one of {', '.join([*queries.JUDGMENT_ACTIONS, 'retire-case'])}")
    back = str(form.get("back") or "/judgments")
    back = back if back.startswith("/judgments") else "/judgments"
    separator = "&" if "?" in back else "?"
    return RedirectResponse(f"{back}{separator}done={action}", status_code=303)


def judgments_export(lab: LabContext, request: Request) -> Response:
    """The ready cases (never disputed or incomplete ones) as a cases.json download."""
    namespace = _filters(request.query_params)["namespace"]
    cases = lab.db.run(lambda conn: queries.judged_cases(conn, namespace, "ready"))
    body = json.dumps([c["golden_case"] for c in cases], ensure_ascii=False, indent=2) + "\n"
    safe = "".join(ch for ch in namespace or "" if ch.isascii() and (ch.isalnum() or ch in "._-"))
    name = f"judged-cases{'-' + safe if safe else ''}.json"
    return Response(
        body,
        media_type="application/json",
        headers={"content-disposition": f'attachment; filename="{name}"'},
    )
