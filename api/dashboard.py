"""The web dashboard, served from the API's origin: Vite's build (`index.html`, `assets/...`) in the folder
`NETSYNTH_DASHBOARD_DIR` names (default: `frontend/dist` beside the `api` package, which `make run` builds).

It answers the GET and HEAD requests no route matched, outside `/api/` (the routes, `/docs`, `/metrics` and the
OpenAPI document included, always come first):

* a file of the build: under `assets/` (content-hashed names) with a year-long immutable cache, any other (e.g. a
  favicon) with `no-cache`; a missing file under `assets/` is a 404 problem;
* any other path: `index.html` with `no-cache`, so that the single-page app routes it in the browser;
* gzipped when the browser accepts it;
* without a build (no `index.html`): a small page saying the dashboard is not built and that `make run` builds it,
  with status 503 (the API itself works).

Everything else no route matched, paths under `/api/` and other methods included, stays a 404 problem. None of it is
in the OpenAPI document: it is the router's fallback, not a route.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from starlette.middleware.gzip import GZipMiddleware
from starlette.responses import FileResponse, HTMLResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

DEFAULT_DIR = Path(__file__).resolve().parents[1] / "frontend" / "dist"
"""Where Vite builds the dashboard in a checkout of netsynth."""
INDEX = "index.html"
ASSETS = "assets"
IMMUTABLE = "public, max-age=31536000, immutable"
"""Cache-Control of the build's assets: their names change with their content."""
NO_CACHE = "no-cache"
"""Cache-Control of the page and the build's other files: revalidated each time, so a new build shows at once."""
GZIP_LEVEL = 6
"""Compression of the dashboard's files for a browser that accepts gzip (its script is a third of the bytes gzipped);
the API's own responses are left as they are."""
HEADERS = {"X-Content-Type-Options": "nosniff", "Content-Security-Policy": "frame-ancestors 'none'"}
"""Headers of every dashboard response: no content sniffing, and no framing by another page."""
NOT_BUILT = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>netsynth: the dashboard is not built</title></head>
<body><h1>The dashboard is not built</h1>
<p>netsynth serves its web dashboard from Vite's build of <code>frontend/</code> (or the folder
<code>NETSYNTH_DASHBOARD_DIR</code> names), and there is none yet. <code>make run</code> builds it (with Node.js
and npm) and starts the service.</p>
<p>The API works without it: its documentation is at <a href="/docs">/docs</a>.</p></body></html>
"""


def _is_api(path: str) -> bool:
    return path == "/api" or path.startswith("/api/")


def _file(root: Path, path: str) -> Path | None:
    """The file of the build at the request path `path`, or None (none there, or outside the build)."""
    relative = path.lstrip("/")
    if not relative:
        return None
    try:
        found = (root / relative).resolve()
        return found if found.is_relative_to(root) and found.is_file() else None
    except (OSError, ValueError):  # a name the file system refuses (too long, a NUL byte)
        return None


class Dashboard:
    """The router's fallback: the dashboard's files and page for GET and HEAD outside `/api/`, else `fallback`."""

    def __init__(self, directory: Path, fallback: ASGIApp) -> None:
        self.directory, self.fallback = directory, fallback

    def _response(self, path: str) -> Response | None:
        root = self.directory.resolve()
        found = _file(root, path)
        if found is not None:
            immutable = found.is_relative_to(root / ASSETS)
            return FileResponse(found, headers={**HEADERS, "Cache-Control": IMMUTABLE if immutable else NO_CACHE})
        if path.startswith(f"/{ASSETS}/"):
            return None
        index = root / INDEX
        if not index.is_file():
            return HTMLResponse(NOT_BUILT, status_code=503, headers={**HEADERS, "Cache-Control": NO_CACHE})
        return FileResponse(index, headers={**HEADERS, "Cache-Control": NO_CACHE})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = None
        if scope["type"] == "http" and scope["method"] in ("GET", "HEAD") and not _is_api(scope["path"]):
            response = self._response(scope["path"])
        if response is None:
            await self.fallback(scope, receive, send)
        else:
            await GZipMiddleware(response, compresslevel=GZIP_LEVEL)(scope, receive, send)


def install_dashboard(app: FastAPI, directory: Path | None) -> None:
    """Serve the dashboard built in `directory` (None: DEFAULT_DIR) for what no route of `app` matches."""
    app.router.default = Dashboard(directory or DEFAULT_DIR, app.router.default)
