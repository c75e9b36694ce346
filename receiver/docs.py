"""``GET /docs``: an interactive reference of ``/openapi.json`` (Swagger UI), served by the service itself.

The UI is Swagger UI 5 (OpenAPI 3.1), as packaged in the pinned
``swagger-ui-py`` wheel, whose static files alone are used: nothing
is fetched from elsewhere, by the server or by the browser. The page keeps
a strict Content-Security-Policy: scripts and styles from this origin only,
no inline script (the UI is started by ``/docs/start.js``, a file of its
own), calls to this origin only (``connect-src 'self'``: "Try it out" sends
to the service, with the API key typed under Authorize). Swagger UI's
online validator is turned off, which would otherwise fetch a badge.
"""

from __future__ import annotations

import functools
import importlib.util
import os

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from receiver import plaincodes as plain_codes
from svcgw.errors import PlainRefusal

__all__ = ["docs_routes"]

PREFIX = "/docs"

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = {"Content-Security-Policy": CONTENT_SECURITY_POLICY, "X-Frame-Options": "DENY"}
# The files of the bundle the page uses; nothing else of the package is served.
ASSETS = {
    "swagger-ui.css": "text/css; charset=utf-8",
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "favicon-32x32.png": "image/png",
}

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>svcgw API reference</title>
<link rel="stylesheet" href="/docs/swagger-ui.css">
<link rel="icon" type="image/png" href="/docs/favicon-32x32.png">
</head>
<body>
<div id="swagger-ui"></div>
<script src="/docs/swagger-ui-bundle.js"></script>
<script src="/docs/start.js"></script>
</body>
</html>
"""

START = """"use strict";
window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#swagger-ui",
    deepLinking: true,
    validatorUrl: null,
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout"
  });
});
"""


@functools.cache
def _bundle_dir() -> str:
    # Found without importing the package, whose own code (handlers for other frameworks) is not used.
    spec = importlib.util.find_spec("swagger_ui")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the swagger-ui-py package is not installed")
    return os.path.join(next(iter(spec.submodule_search_locations)), "static")


async def page(request: Request) -> Response:
    return HTMLResponse(PAGE, headers=HEADERS)


async def start(request: Request) -> Response:
    return PlainTextResponse(START, media_type="text/javascript; charset=utf-8", headers=HEADERS)


async def asset(request: Request) -> Response:
    name = request.path_params["name"]
    media_type = ASSETS.get(name)
    if media_type is None:
        raise PlainRefusal(plain_codes.DOCS_NOT_FOUND)
    # An hour: a new version of the pinned bundle reaches browsers soon after an upgrade.
    headers = {**HEADERS, "Cache-Control": "public, max-age=3600"}
    return FileResponse(f"{_bundle_dir()}/{name}", media_type=media_type, headers=headers)


def docs_routes() -> list[BaseRoute]:
    return [
        Route(PREFIX, page, methods=["GET"], name="docs"),
        Route(PREFIX + "/start.js", start, methods=["GET"]),
        Route(PREFIX + "/{name}", asset, methods=["GET"]),
    ]
