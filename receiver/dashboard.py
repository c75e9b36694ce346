"""rq-dashboard for operators, mounted at ``/rq`` behind its own credentials.

The dashboard is a Flask app (``rq_dashboard.cli.make_flask_app``) run
through a2wsgi's ``WSGIMiddleware``, configured with the service's Redis and
RQ's JSON serializer (the deliveries are JSON-serialized jobs:
``svcgw.storage.rqformat.SERIALIZER``). It is
mounted only when both ``SVCGW_DASHBOARD_USER`` and
``SVCGW_DASHBOARD_PASSWORD`` are set; otherwise ``/rq`` answers 404. It is
given every shard's URL and switches between them (``/rq/<shard>/view``;
:func:`dashboard_urls`): a ``redis://`` shard's own, and for a Sentinel
group the ``redis+sentinel://`` URL rq-dashboard reads itself
(``redis_sentinel_url``), so that each request asks the sentinels for the
current primary and a failover needs no restart.

:class:`DashboardGuard` stands in front of Flask, so no request reaches it
unchecked:

1. HTTP Basic credentials, compared in constant time; anything else gets 401
   with ``WWW-Authenticate``;
2. read-only: only ``GET`` / ``HEAD`` of the pages, their JSON data and
   static files. The dashboard's mutating endpoints (requeue, delete, empty,
   compact; ``/requeue/<queue>`` even answers GET) are refused with 403:
   dead letters are replayed with ``svcgw dlq replay`` or the console, which
   keep the service's own bookkeeping right;
3. only what rq-dashboard can answer: its views fail with a 500 (and a
   traceback in the log) on parameters it does not check, such as a path of
   another shape (``/0/data/jobs/svcgw/registries/queued/8/1.json`` reads
   ``queued`` as the number per page), a registry it does not know, 0 jobs
   per page, or a shard number past the last. Those are refused with 404
   (:func:`unanswerable`), as are a job that does not exist (an error
   handler of the Flask app), and a Redis that does not answer is 503 with
   ``Retry-After: 1``;
4. every answer carries a Content-Security-Policy, ``X-Frame-Options: DENY``
   and ``X-Content-Type-Options: nosniff``. The dashboard's pages run one
   inline script of their own, the last tag of its layout (``base.html``,
   right after the bootstrap bundle), so each HTML page gets a fresh nonce
   written into that one tag, matched exactly, and allowed by the policy:
   markup that reaches a page from job data (an event handler attribute, a
   script tag of any shape) gets no nonce and does not run.

Its refusals are rows of ``svcgw.errors`` (``DASHBOARD_*``), one line of
text: the guard's are rendered by ``receiver.http.plain_answer`` (through
the guard's ``send``, so they carry the headers above too); Flask's error
handlers, which must answer in Flask's terms, render the same rows.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
import re
import secrets
from typing import Any
from urllib.parse import urlencode

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from svcgw import errors
from svcgw.config.settings import Settings
from svcgw.config.shards import Deployment
from svcgw.errors import ErrorKind, PlainRefusal
from svcgw.shards.connections import SENTINEL_TIMEOUT
from svcgw.storage.rqformat import SERIALIZER

from .http import plain_answer

__all__ = ["DashboardGuard", "dashboard_urls", "make_dashboard", "sentinel_url"]

log = logging.getLogger("svcgw.dashboard")

REALM = "svcgw operations"

# Paths (below the mount) that only read: the pages, their JSON data, static files.
_READ_ONLY = re.compile(
    r"^/(?:"
    r"|favicon\.ico"
    r"|static/[A-Za-z0-9._/-]+"
    r"|[0-9]+/(?:view(?:/[A-Za-z0-9._:/-]*)?)?"
    r"|[0-9]+/data/[A-Za-z0-9._:/-]+\.json"
    r")$"
)


# The registries rq-dashboard lists (its jobs page's choice); any other name fails inside it.
REGISTRIES = frozenset(("queued", "scheduled", "deferred", "started", "finished", "failed", "canceled"))
MAX_PER_PAGE = 1000  # its page offers up to 200; more reads every job of the page one by one
_MAX_NUMBER_DIGITS = 9
_SHARD = re.compile(r"^/([0-9]+)/")
_JOBS = re.compile(
    r"^/[0-9]+/(?P<kind>view|data)/jobs/[^/]+/(?P<registry>[^/]+)/(?P<per_page>[^/]+)/(?P<order>[^/]+)/(?P<page>[^/]+)$"
)


def unanswerable(path: str, shards: int) -> str | None:
    """Why rq-dashboard cannot answer the read-only ``path`` (below the mount) of ``shards`` shards; None if it can."""
    shard = _SHARD.match(path)
    if shard and _number(shard.group(1)) not in range(shards):
        return f"no shard {shard.group(1)[:_MAX_NUMBER_DIGITS]}: the shards are 0 to {shards - 1}"
    jobs = _JOBS.match(path)
    if jobs is None:
        return None
    page = jobs["page"]
    if jobs["kind"] == "data":
        if not page.endswith(".json"):
            return "no such page"
        page = page.removesuffix(".json")
    if jobs["registry"] not in REGISTRIES:
        return "no such registry: the registries are " + ", ".join(sorted(REGISTRIES))
    if _number(jobs["per_page"]) not in range(1, MAX_PER_PAGE + 1):
        return f"jobs per page: 1 to {MAX_PER_PAGE}"
    if jobs["order"] not in ("asc", "dsc"):
        return "the order is asc or dsc"
    if _number(page) < 1:
        return "pages count from 1"
    return None


def _number(text: str) -> int:
    """A short run of ASCII digits as its value; -1 for anything else (a long run included)."""
    if not (0 < len(text) <= _MAX_NUMBER_DIGITS and text.isascii() and text.isdigit()):
        return -1
    return int(text)


# The dashboard's own inline script, exactly as its layout writes it: after the bootstrap bundle.
_OWN_SCRIPT = re.compile(
    rb'(<script src="[^"<>]*/js/bootstrap\.bundle\.min\.js" type="text/javascript"></script>\s*)'
    rb'<script type="text/javascript">'
)


def security_headers(nonce: str) -> list[tuple[bytes, bytes]]:
    # 'unsafe-eval': the dashboard builds every table from underscore templates (``_.template``), which
    # compile with ``new Function``; without it each table stays at "Loading...". It lets the page's own
    # scripts compile strings; it lets no script in: markup from job data still runs only with the nonce.
    policy = (
        "default-src 'self'; "
        f"script-src 'self' 'nonce-{nonce}' 'unsafe-eval'; "
        "style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; "
        "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )
    return [
        (b"content-security-policy", policy.encode()),
        (b"x-frame-options", b"DENY"),
        (b"x-content-type-options", b"nosniff"),
        (b"referrer-policy", b"no-referrer"),
    ]


def add_nonce(html: bytes, nonce: str) -> bytes:
    """``html`` with ``nonce`` on the dashboard's own inline script, and on no other tag.

    Only the last match counts: job data is rendered in the page's content,
    before the layout's closing scripts, so it can come nowhere after them.
    """
    matches = list(_OWN_SCRIPT.finditer(html))
    if not matches:
        return html
    found = matches[-1]
    tag = f'<script nonce="{nonce}" type="text/javascript">'.encode()
    return html[: found.end(1)] + tag + html[found.end() :]


def _credentials(scope: Scope) -> tuple[bytes, bytes] | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, encoded = value.partition(b" ")
            if scheme.lower() != b"basic":
                return None
            try:
                decoded = base64.b64decode(encoded.strip(), validate=True)
            except (binascii.Error, ValueError):
                return None
            user, sep, password = decoded.partition(b":")
            return (user, password) if sep else None
    return None


class DashboardGuard:
    """Basic auth, then a read-only allow-list, then only what the wrapped app can answer."""

    def __init__(self, app: ASGIApp, user: str, password: str, shards: int = 1) -> None:
        self.app = app
        self._user = user.encode("utf-8")
        self._password = password.encode("utf-8")
        self._shards = shards

    def authorized(self, scope: Scope) -> bool:
        presented = _credentials(scope)
        if presented is None:
            return False
        # Both compared, always, so the answer time does not tell which one was wrong.
        user_ok = hmac.compare_digest(presented[0], self._user)
        password_ok = hmac.compare_digest(presented[1], self._password)
        return user_ok and password_ok

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":
            return
        await self._guarded(scope, receive, _Hardened(send))

    async def _guarded(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = self._refusal(scope)
        if refusal is not None:
            await plain_answer(refusal)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope) -> PlainRefusal | None:
        """Why the request does not reach the dashboard, or None when it does."""
        if not self.authorized(scope):
            return PlainRefusal(errors.DASHBOARD_SIGN_IN, headers={"WWW-Authenticate": f'Basic realm="{REALM}"'})
        root, path = scope.get("root_path", ""), scope["path"]
        if root and path.startswith(root):
            path = path[len(root) :]
        if scope["method"] not in ("GET", "HEAD") or not _READ_ONLY.match(path or "/"):
            return PlainRefusal(errors.DASHBOARD_READ_ONLY)
        why = unanswerable(path or "/", self._shards)
        if why is not None:
            return PlainRefusal(errors.DASHBOARD_NOT_FOUND, f"{errors.DASHBOARD_NOT_FOUND.message}: {why}")
        return None


class _Hardened:
    """A ``send`` that adds :func:`security_headers` to the answer and the nonce to an HTML body.

    An HTML body is collected whole (dashboard pages are small) so that its
    length can be set again after the nonce is written in.
    """

    def __init__(self, send: Send) -> None:
        self._send = send
        self._nonce = secrets.token_urlsafe(16)
        self._start: Message | None = None
        self._body: list[bytes] = []

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [(k, v) for k, v in message.get("headers", []) if k.lower() not in _REPLACED]
            headers += security_headers(self._nonce)
            message = {**message, "headers": headers}
            if any(k.lower() == b"content-type" and v.startswith(b"text/html") for k, v in headers):
                self._start = message
                return
            await self._send(message)
            return
        if message["type"] == "http.response.body" and self._start is not None:
            self._body.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            body = add_nonce(b"".join(self._body), self._nonce)
            headers = [(k, v) for k, v in self._start["headers"] if k.lower() != b"content-length"]
            headers.append((b"content-length", str(len(body)).encode()))
            await self._send({**self._start, "headers": headers})
            await self._send({"type": "http.response.body", "body": body})
            return
        await self._send(message)


_REPLACED = frozenset(name for name, _ in security_headers("x"))


def dashboard_urls(settings: Settings) -> tuple[str, ...]:
    """The Redis URLs the dashboard switches between, shard 0's first (its instance number is the shard's index).

    rq-dashboard takes a list of URLs: a ``redis://`` shard's own, a Sentinel
    group's as :func:`sentinel_url` writes it. A Cluster is none it can take,
    nor a Sentinel group that URL cannot name; then there is no dashboard
    (``svcgw shards`` and ``svcgw dlq`` read every shard).
    """
    urls: list[str] = []
    for deployment in settings.shard_layout.deployments:
        url = deployment.url if deployment.kind == "redis" else sentinel_url(deployment)
        if not url:
            return ()
        urls.append(url)
    return tuple(urls)


# rq-dashboard's Sentinel URLs (redis_sentinel_url) take the password as written, up to the
# first "@", with no percent-decoding, and a sentinel as host:port split at the first colon.
_NOT_IN_URL = frozenset("@/?#[]\t\r\n")


def sentinel_url(deployment: Deployment) -> str | None:
    """The ``redis+sentinel://`` URL of a Sentinel group for rq-dashboard; None for one it cannot name.

    Its sentinels are asked under the service's own deadline
    (:data:`svcgw.shards.connections.SENTINEL_TIMEOUT`) and with its sentinels'
    password (``RQ_DASHBOARD_REDIS_SENTINEL_PASSWORD``, see :func:`make_dashboard`).
    It cannot carry a user name, an IPv6 sentinel, or a password or master
    name with a character of :data:`_NOT_IN_URL`.
    """
    if deployment.kind != "sentinel" or deployment.username:
        return None
    password = deployment.password or ""
    if _NOT_IN_URL & set(password + deployment.master) or any(":" in host for host, _ in deployment.addresses):
        return None
    auth = f":{password}@" if password else ""
    hosts = ",".join(f"{host}:{port}" for host, port in deployment.addresses)
    deadline = urlencode({"sentinel_socket_timeout": SENTINEL_TIMEOUT,
                          "sentinel_socket_connect_timeout": SENTINEL_TIMEOUT})  # fmt: skip
    return f"redis+sentinel://{auth}{hosts}/{deployment.master}/{deployment.db}?{deadline}"


def make_dashboard(settings: Settings) -> DashboardGuard | None:
    """The guarded dashboard, or None when its credentials (or Redis URLs) are not configured."""
    if not (settings.dashboard_user and settings.dashboard_password):
        return None
    urls = dashboard_urls(settings)
    if not urls:
        if settings.shard_layout.deployments:
            log.warning("rq-dashboard is not mounted at /rq: a shard is one it cannot be given as a URL "
                        "(a Redis Cluster, or a Sentinel group named with a user name, an IPv6 sentinel, "
                        "or one of @/?#[] in its password or master name)")  # fmt: skip
        return None
    from a2wsgi import WSGIMiddleware
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError
    from rq.exceptions import NoSuchJobError
    from rq_dashboard import web as dashboard_web
    from rq_dashboard.cli import make_flask_app

    # Credentials are checked by DashboardGuard, not by Flask.
    flask_app: Any = make_flask_app(None, None, None, "")
    flask_app.config["RQ_DASHBOARD_REDIS_URL"] = urls
    # The sentinels' own password, every group's (SVCGW_REDIS_SENTINEL_PASSWORD); a primary's is in its URL.
    flask_app.config["RQ_DASHBOARD_REDIS_SENTINEL_PASSWORD"] = settings.redis_sentinel_password
    flask_app.config["RQ_DASHBOARD_DISABLE_DELETE"] = True
    flask_app.config["RQ_DASHBOARD_POLL_INTERVAL"] = 5000
    # The dashboard keeps its serializer in a module-level setting.
    dashboard_web.config.serializer = SERIALIZER
    dashboard_web.setup_rq_connection(flask_app)
    # Its job views fetch the job unchecked; a job that is gone (delivered, expired) is no server error.
    flask_app.register_error_handler(NoSuchJobError, lambda _: _plain(errors.DASHBOARD_NO_JOB))
    # Nor is a Redis that does not answer: the page is there again once it does. (Its text never
    # reaches the operator: it may name the host.)
    for unreachable in (RedisConnectionError, RedisTimeoutError):
        flask_app.register_error_handler(unreachable, _unavailable)
    # One request at a time: rq-dashboard keeps the Redis of the request's shard on the app itself
    # (``current_app.redis_conn``, set before each request), so requests for two shards at once could
    # each read the other's.
    wsgi: Any = WSGIMiddleware(flask_app, workers=1)
    return DashboardGuard(wsgi, settings.dashboard_user, settings.dashboard_password, shards=len(urls))


def _plain(kind: ErrorKind, **headers: str) -> tuple[str, int, dict[str, str]]:
    """A row as Flask's answer: what ``receiver.http.plain_answer`` sends, and ``no-store``."""
    plain = {"Content-Type": "text/plain; charset=utf-8", "Cache-Control": "no-store", **headers}
    return kind.message + "\n", kind.status, plain


def _unavailable(exc: Exception) -> tuple[str, int, dict[str, str]]:
    log.warning("rq-dashboard: Redis did not answer (%s)", type(exc).__name__)
    return _plain(errors.DASHBOARD_UNAVAILABLE, **{"Retry-After": "1"})
