"""The web console: `GET /` and its static files (gateway/console/), under a strict CSP."""

from __future__ import annotations

import re
from pathlib import Path

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Route

CONSOLE_DIR = Path(__file__).with_name("console")
# Stated here, not left to the platform's mimetypes table: a module script whose type is
# not JavaScript does not run at all.
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
_ASSET_NAME = re.compile(r"^[a-z][a-z0-9_-]*\.(js|css|svg)$")
# The page runs only its own files and talks only to this origin: model text that reached
# the DOM as HTML despite the renderer could still neither run a script nor send anything out.
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    )
)
HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",  # an upgraded gateway serves its own console at once
}


def _file(path: Path) -> Response:
    return FileResponse(path, media_type=MEDIA_TYPES[path.suffix], headers=HEADERS)


async def index(request: Request) -> Response:
    """The page itself: static, the same for everyone, no key needed and none revealed."""
    return _file(CONSOLE_DIR / "index.html")


async def asset(request: Request) -> Response:
    """One of the console's own files by plain name (no folders, so no path escapes)."""
    name = request.path_params["name"]
    path = CONSOLE_DIR / name
    if not _ASSET_NAME.match(name) or not path.is_file():
        raise HTTPException(404)
    return _file(path)


def console_routes() -> list[BaseRoute]:
    return [
        Route("/", index, methods=["GET"]),
        Route("/console/{name}", asset, methods=["GET"]),
    ]
