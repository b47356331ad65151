"""``/ui``: the web console's static shell (HTML, CSS and JavaScript modules, no data).

The files are package data under ``rest/console``. They are read once, when the router is built,
into an allow-list keyed by file name: a request names one of those keys or gets 404, so no path
from a URL ever reaches the file system. The shell is served without credentials (it holds
nothing of the worker's); every figure it shows comes from the REST API, called by the page with
the user's credentials. The Content-Security-Policy keeps the page to its own scripts and to
calls on this origin.
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

from sluice.rest.errors import ERROR_RESPONSES

router = APIRouter(tags=["console"], responses=ERROR_RESPONSES, include_in_schema=False)

_MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
}

#: No inline script or style, no other origin: a value that slipped into the page as markup could not run.
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def _load_assets() -> dict[str, tuple[bytes, str]]:
    """File name → (content, media type) of every console file with a known type."""
    folder = resources.files("sluice.rest").joinpath("console")
    assets: dict[str, tuple[bytes, str]] = {}
    for entry in folder.iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1] if "." in entry.name else ""
        if entry.is_file() and suffix in _MEDIA_TYPES:
            assets[entry.name] = (entry.read_bytes(), _MEDIA_TYPES[suffix])
    return assets


ASSETS = _load_assets()


def _serve(name: str) -> Response:
    found = ASSETS.get(name)
    if found is None:
        return Response(b"Not found", status_code=404, media_type="text/plain", headers=_HEADERS)
    content, media_type = found
    return Response(content, media_type=media_type, headers=_HEADERS)


@router.get("/ui", summary="The web console")
def console_root() -> RedirectResponse:
    # Relative module URLs in index.html resolve against /ui/, so the page must be there.
    return RedirectResponse("/ui/", status_code=307)


@router.get("/ui/", summary="The web console's page")
def console_page() -> Response:
    return _serve("index.html")


@router.get("/ui/{asset}", summary="A file of the web console")
def console_asset(asset: str) -> Response:
    return _serve(asset)
