"""What every page of the lab shares: the database as the lab's role, the templates, this process's form token,
the evaluation jobs, and the checks a request passes before a page acts on it.

harness.lab.app builds one LabContext per app and binds it to each page's handlers (harness.lab.pages.*),
which take it as their first argument.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from .database import LabDatabase, LabError
from .jobs import Jobs

STALE_TOKEN = "the form token is missing or stale: reload the page and try again"


@dataclass
class LabContext:
    """One lab: its database and role, its templates, the form token of this process and its jobs."""

    db: LabDatabase
    templates: Jinja2Templates
    token: str
    jobs: Jobs

    def page(self, request: Request, name: str, context: dict[str, Any], status: int = 200) -> Response:
        return self.templates.TemplateResponse(request, name, context, status_code=status)

    def error_page(self, request: Request, exc: LabError) -> Response:
        return self.page(request, "error.html", {"error": exc, "nav": ""}, status=exc.status)

    def token_matches(self, sent: Any) -> bool:
        """Whether a form sent this process's token (what another web site cannot know)."""
        return secrets.compare_digest(str(sent), self.token)

    async def checked_form(self, request: Request) -> Any:
        """The posted form of an action (a route that writes: POST only); 403 unless it carries this
        process's form token and comes from the lab's own pages (``parameters``)."""
        if request.method != "POST":
            raise HTTPException(405, "this action changes data: it is sent by POST from the lab's own pages")
        form = await parameters(request)
        if not self.token_matches(form.get("token", "")):
            raise HTTPException(403, STALE_TOKEN)
        return form


async def parameters(request: Request) -> Any:
    """A question form's fields: the URL's (GET, links) or the posted form's (POST: long questions). A POST from
    another site (its Origin is not this lab) is refused."""
    if request.method != "POST":
        return request.query_params
    origin = request.headers.get("origin")
    if origin and origin != "null" and urlsplit(origin).netloc != request.headers.get("host"):
        raise HTTPException(403, f"a form posted from {origin} is refused: post it from the lab's own pages")
    if request.headers.get("sec-fetch-site") == "cross-site":
        raise HTTPException(403, "a form posted from another site is refused: post it from the lab's own pages")
    return await request.form()


def nonnegative_int(value: str | None, default: int) -> int:
    """A whole-number URL parameter (an offset, a run id, k): negatives become 0, anything else the default."""
    try:
        return max(int(value or default), 0)
    except ValueError:
        return default
