"""The document pages: the documents the role sees (status, lifecycle, ingest state, chunks; filters), one
document with its chunks, and the admin action that embeds the queued and failed chunks."""

from __future__ import annotations

from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from .. import queries
from ..context import LabContext, nonnegative_int
from ..database import NotPermitted

PAGE_SIZE = 200


def documents_page(lab: LabContext, request: Request) -> Response:
    p = request.query_params
    filters = {
        name: p.get(name) or None
        for name in ("namespace", "status", "lifecycle", "ingest_status", "doc_type", "text", "as_of")
    }
    offset = nonnegative_int(p.get("offset"), 0)

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

    data = lab.db.run(work)
    more = urlencode({**{k: v for k, v in filters.items() if v}, "offset": offset + PAGE_SIZE})
    return lab.page(
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


def document_page(lab: LabContext, request: Request) -> Response:
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

    data = lab.db.run(work)
    if data is None:
        raise HTTPException(404, f"no document {document_id} that the role {lab.db.role_label} can see")
    return lab.page(request, "document.html", {"nav": "documents", "done": request.query_params.get("done"), **data})


async def retry_failed(lab: LabContext, request: Request) -> Response:
    form = await lab.checked_form(request)
    permitted = await run_in_threadpool(lambda: lab.db.run(queries.permissions))
    if not permitted["retry"]:
        raise NotPermitted(
            f"the role {lab.db.role_label} may not run the embedding queue",
            "grant pgkb_writer or pgkb_admin to the lab's role",
        )
    await run_in_threadpool(lambda: lab.db.run(queries.retry_failed, transaction=False))
    back = str(form.get("back") or "/documents")
    back = back if back.startswith("/") and not back.startswith("//") else "/documents"
    separator = "&" if "?" in back else "?"
    return RedirectResponse(f"{back}{separator}done=retried", status_code=303)
