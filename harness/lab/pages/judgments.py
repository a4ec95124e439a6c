"""The judgments page: every judged question the role may read as its golden case, and their export in the
cases.json format (`pgkb eval` and the evaluation page read it)."""

from __future__ import annotations

import json

from starlette.requests import Request
from starlette.responses import Response

from .. import queries
from ..context import LabContext


def judgments_page(lab: LabContext, request: Request) -> Response:
    namespace = request.query_params.get("namespace") or None
    cases = lab.db.run(lambda conn: queries.judged_cases(conn, namespace))
    return lab.page(
        request,
        "judgments.html",
        {"nav": "judgments", "cases": cases, "namespace": namespace, "export": "/judgments/cases.json"},
    )


def judgments_export(lab: LabContext, request: Request) -> Response:
    namespace = request.query_params.get("namespace") or None
    cases = lab.db.run(lambda conn: queries.judged_cases(conn, namespace))
    body = json.dumps([c["golden_case"] for c in cases], ensure_ascii=False, indent=2) + "\n"
    safe = "".join(ch for ch in namespace or "" if ch.isascii() and (ch.isalnum() or ch in "._-"))
    name = f"judged-cases{'-' + safe if safe else ''}.json"
    return Response(
        body,
        media_type="application/json",
        headers={"content-disposition": f'attachment; filename="{name}"'},
    )
