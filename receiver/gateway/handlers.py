"""The gateway's routes: checks 2 to 11 of the package docstring, then forwarding.

:class:`Gateway` admits a call (key, rate, body, instance, denial, callback
fields, ownership) into a :class:`Call`, then runs the operation: most are
forwarded as received; ``device/create``, the callback operations and the
liveness-relevant ones have their own handling. Every refusal is a
``GatewayError`` from ``svcgw.errors``; a Redis failure anywhere is -50002.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from redis.asyncio import Redis
from redis.exceptions import RedisError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from svcgw import errors, liveness
from svcgw.addresses import AddressError, check_for_service
from svcgw.errors import GatewayError
from svcgw.ingest import PARSE_IN_THREAD_BYTES
from svcgw.jsonspan import Member, replace_member
from svcgw.receivers import receiver_url
from svcgw.store import NotFound
from svcgw.store import Scope as CallbackScope
from svcgw.threads import in_thread
from svcgw.upstream import Answer, Upstream, UpstreamError

from ..headers import NOSNIFF
from ..http import BodyTooLarge, ConflictingKeys, presented_key, read_body
from .admission import Admission, Facts
from .body import (
    CALLBACK_OPERATIONS,
    DEVICE_CREATE,
    LONG_START,
    SET_CALLBACK_OPERATION,
    UPDATE_CALLBACK,
    UPLOAD_OPERATIONS,
    check_callback_fields,
    instance_id,
    parse_body,
)
from .inflight import InflightBytes, Share
from .quota import DeviceQuota, Reservation
from .scrub import mentions, might_mention, scrub

if TYPE_CHECKING:
    from ..services import Services

__all__ = ["API_PATH", "SET_CALLBACK_PATH", "Call", "Gateway", "direct_operation"]

log = logging.getLogger("svcgw.gateway")

API_PATH = "/svc/api/{module}/{action}"
LONG_STOP = "long/stop"
SET_CALLBACK_PATH = "/svc/instances/set-callback"

# An API path that needs no judging: no escape, no dot, no empty segment. Anything else goes
# through the router and the path guard (check 1) as before.
_PLAIN_API_PATH = re.compile(rb"/svc/api/([^/%.?]+)/([^/%.?]+)")

# The proxy of the caller's login calls, kept for the prober's reconnects (same egress as at login).
PROXY_OPERATIONS = frozenset({"login/getQr", "login/checkQr", "login/submitQrCode", "login/reconnect"})


def _json(document: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(document), status_code=status, media_type="application/json")


def _pass_on(raw: bytes) -> Response:
    return Response(raw, status_code=200, media_type="application/json")


def _is_started(answer: Answer) -> bool:
    """``long/start`` on a running connection: reset, and still running."""
    message = answer.message.strip()
    return answer.code == -1 and (message == "started" or message.endswith("|started"))


# --- the gateway -----------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """A request that passed the common checks (1 to 9)."""

    account: str
    module: str
    action: str
    raw: bytes
    document: dict[str, Any]
    members: list[Member]
    appid: str
    share: Share  # the body's bytes, held until the answer is sent
    # long/start towards the account default for an instance that inherits it (the console's QR
    # login): the address is checked and given to nobody, and not recorded as the instance's own.
    inherits_address: bool = False

    @property
    def operation(self) -> str:
        return f"{self.module}/{self.action}"


async def _read_body(request: Request, limit: int, share: Share | None) -> bytes:
    try:
        return await read_body(request, limit, hold=share.hold if share is not None else None)
    except BodyTooLarge:
        raise GatewayError(errors.BODY_TOO_LARGE, f"the request body is larger than {limit} bytes") from None


async def _parse_body(raw: bytes) -> tuple[dict[str, Any], list[Member]]:
    """Check 4's parsing; a large body in a worker thread, so the event loop keeps answering."""
    if len(raw) <= PARSE_IN_THREAD_BYTES:
        return parse_body(raw)
    return await in_thread(parse_body, raw)


def direct_operation(scope: Scope) -> tuple[str, str] | None:
    """``(module, action)`` of a gateway call on a plain API path, which needs no routing; else None."""
    if scope["type"] != "http" or scope["method"] != "POST":
        return None
    raw = scope.get("raw_path") or scope["path"].encode("utf-8")
    if _PLAIN_API_PATH.fullmatch(raw) is None:
        return None
    _, _, _, module, action = scope["path"].split("/")
    return module, action


class _Pending:
    """A call's body and what checks 4 to 6 made of it, kept until they are answered in order."""

    __slots__ = ("appid", "asked", "document", "error", "members", "operation", "partial", "raw")

    def __init__(self, operation: str) -> None:
        self.operation = operation
        self.raw: bytes | None = None
        self.partial: bytes | None = None  # the first part of a body still arriving
        self.document: dict[str, Any] = {}
        self.members: list[Member] = []
        self.appid = ""
        self.error: GatewayError | None = None
        self.asked: str | None = None  # the appid whose owner the admission script read

    def ask(self) -> str | None:
        """The appid to read the owner of along with the other checks (None: not known yet)."""
        self.asked = self.owner_appid
        return self.asked

    async def load(self, raw: bytes) -> None:
        self.raw = raw
        try:
            self.document, self.members = await _parse_body(raw)
            self.appid = instance_id(
                self.document, self.members, configuring=self.operation in CALLBACK_OPERATIONS
            )
        except GatewayError as exc:
            self.error = exc

    @property
    def owner_appid(self) -> str | None:
        """The instance whose owner check 9 will need, once the body is known to name one."""
        if self.raw is None or self.error is not None or self.operation == DEVICE_CREATE:
            return None
        return self.appid

    def result(self) -> tuple[dict[str, Any], list[Member], str]:
        if self.error is not None:
            raise self.error
        return self.document, self.members, self.appid


async def _first_chunk(request: Request) -> tuple[bytes, bool]:
    """The body's first part as the server has it, and whether more is to come."""
    message = await request.receive()
    if message["type"] == "http.disconnect":
        raise ClientDisconnect()
    return message.get("body", b""), bool(message.get("more_body", False))


async def _read_rest(request: Request, first: bytes, limit: int, share: Share) -> bytes:
    """The rest of a body declared small whose first part came in alone (``read_body``'s rules)."""
    declared = int(request.headers["content-length"])
    if declared > 0:
        share.hold(declared)
    chunks, size = [first], len(first)
    while True:
        if size > limit:
            raise GatewayError(errors.BODY_TOO_LARGE, f"the request body is larger than {limit} bytes")
        if size > declared:
            share.hold(size)
        message = await request.receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if not message.get("more_body", False):
            break
    if size > limit:
        raise GatewayError(errors.BODY_TOO_LARGE, f"the request body is larger than {limit} bytes")
    if size > declared:
        share.hold(size)
    return b"".join(chunks)


def _small(request: Request, limit: int) -> bool:
    """The request declares a body of at most ``limit`` bytes."""
    declared = request.headers.get("content-length")
    return declared is not None and declared.isdigit() and int(declared) <= limit


def _api_key(request: Request) -> str | None:
    try:
        return presented_key(request)
    except ConflictingKeys:
        return None


RECEIVER_TOKENS_KEPT = 10_000
# A body declared this small is read before the key is looked up, so one Redis round trip serves
# every check (see Gateway._admit_request); its bytes are what the HTTP server buffers anyway.
EARLY_BODY_BYTES = PARSE_IN_THREAD_BYTES


class Gateway:
    def __init__(self, services: Services) -> None:
        settings = services.settings
        self.services = services
        self.settings = settings
        self.store = services.store
        self.redis: Redis = services.text_redis
        self.limiter = services.limiter
        self.admission = Admission(services.text_redis, services.limiter)
        self.quota = DeviceQuota(services.text_redis)
        self.inflight = InflightBytes(settings.account_inflight_bytes)
        # appid -> receiver token. A token never changes for its appid, and every forwarded answer
        # is searched for it: one look-up and one decryption per instance and process, not per call.
        self._tokens: dict[str, str] = {}

    def routes(self) -> list[BaseRoute]:
        return [
            Route(API_PATH, self.api, methods=["POST"], name="gateway"),
            Route(SET_CALLBACK_PATH, self.set_callback, methods=["POST"], name="set-callback"),
        ]

    # --- endpoints ----------------------------------------------------------
    async def direct(self, scope: Scope, receive: Receive, send: Send, module: str, action: str) -> None:
        """``api`` as a plain ASGI call, for the app to run without its router and middleware.

        The hot path of the service: the app hands every call on a plain API
        path (:func:`direct_operation`) here. What the middleware would add, this
        does itself: ``nosniff`` on the answer, and a 500 for an unexpected error.
        """
        try:
            response = await self._answer(Request(scope, receive), module, action, self._operation)
        except ClientDisconnect:
            return  # the caller left; its share was given back on the way out
        except Exception:
            response = PlainTextResponse("Internal Server Error", status_code=500)
            await send({"type": "http.response.start", "status": 500, "headers": [*response.raw_headers, NOSNIFF]})
            await send({"type": "http.response.body", "body": response.body})
            raise
        # What ``await response(scope, receive, send)`` sends (a gateway answer has no background
        # task), without building a wrapper of ``send`` for every call to add nosniff.
        headers = [*response.raw_headers, NOSNIFF]
        await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
        await send({"type": "http.response.body", "body": response.body})

    async def api(self, request: Request) -> Response:
        module, action = request.path_params["module"], request.path_params["action"]
        return await self._answer(request, module, action, self._operation)

    async def set_callback(self, request: Request) -> Response:
        module, action = SET_CALLBACK_OPERATION.split("/")
        return await self._answer(request, module, action, self._set_callback)

    async def _answer(
        self, request: Request, module: str, action: str, handler: Callable[[Call], Awaitable[Response]]
    ) -> Response:
        try:
            call = await self._admit_request(request, module, action)
            return await self._run(call, handler)
        except GatewayError as exc:
            return exc.response()
        except RedisError as exc:
            log.warning("gateway storage error on %s/%s: %s", module, action, type(exc).__name__)
            return GatewayError(errors.UNAVAILABLE).response()

    async def invoke(
        self, account: str, module: str, action: str, raw: bytes, *, inherits_address: bool = False
    ) -> Response:
        """A call for ``account`` (signed in elsewhere, the console), as if made with one of its keys.

        Every check after the key's runs, in the same order and with the same
        answers: rate limit, body, denial, callback fields, ownership, then the
        operation with its own behaviour (``instances/set-callback`` included).
        ``inherits_address``: a ``long/start`` whose ``callbackUrl`` is the
        account default leaves the instance inheriting it (address, secret and
        token) instead of recording it as the instance's own.
        """
        operation = f"{module}/{action}"
        handler = self._set_callback if operation == SET_CALLBACK_OPERATION else self._operation
        try:
            pending = _Pending(operation)
            await pending.load(raw)
            facts = await self.admission.admit(account=account, operation=operation, appid=pending.ask())
            assert facts is not None  # an account call has no key to refuse
            call = await self._judge(facts, pending, module, action, None)
            if inherits_address:
                call = dataclasses.replace(call, inherits_address=True)
            return await self._run(call, handler)
        except GatewayError as exc:
            return exc.response()
        except RedisError as exc:
            log.warning("gateway storage error on %s/%s: %s", module, action, type(exc).__name__)
            return GatewayError(errors.UNAVAILABLE).response()

    async def _run(self, call: Call, handler: Callable[[Call], Awaitable[Response]]) -> Response:
        try:
            return await handler(call)
        finally:
            call.share.release()

    # --- checks 2 to 9 ---------------------------------------------------------
    async def _admit_request(self, request: Request, module: str, action: str) -> Call:
        """Checks 2 to 9 of an HTTP call; Redis is read once for all of them when the body is small.

        A body that declares a length of at most ``EARLY_BODY_BYTES`` (and within
        the operation's limit) is read before the key is looked up, so that the
        one script of :mod:`.admission` can read the instance's owner too. Its
        checks are still answered in the documented order: a bad key is 401 and
        a call over the rate limit 429 whatever the body. A larger body, or one
        without a length, is read after the key and the rate limit as before,
        and the owner is then read on its own (a second round trip).
        """
        operation = f"{module}/{action}"
        key = _api_key(request)
        pending = _Pending(operation)
        limit = self._limit(operation)
        if key and _small(request, min(limit, EARLY_BODY_BYTES)):
            # Usually the whole of a small body came with the headers; if not, what came is kept
            # and the rest is read once the account is known, its bytes held as they arrive.
            chunk, more = await _first_chunk(request)
            if more:
                pending.partial = chunk
            else:
                await pending.load(chunk)
        facts = await self.admission.admit(key=key, operation=operation, appid=pending.ask())
        if facts is None:
            raise GatewayError(errors.UNAUTHORIZED, headers={"WWW-Authenticate": "Bearer"})
        return await self._judge(facts, pending, module, action, request)

    def _limit(self, operation: str) -> int:
        if operation in UPLOAD_OPERATIONS:
            return self.settings.upload_max_body_bytes
        return self.settings.gateway_max_body_bytes

    async def _judge(
        self, facts: Facts, pending: _Pending, module: str, action: str, request: Request | None
    ) -> Call:
        """Checks 3 to 9 on what Redis said and the body; the body is read now if it was not yet."""
        operation = pending.operation
        account = facts.account
        if not facts.verdict.allowed:
            raise GatewayError(errors.RATE_LIMITED, headers={"Retry-After": str(facts.verdict.retry_after)})
        # The body is in memory from its first byte until the answer is sent.
        share = self.inflight.open_share(account)
        try:
            if pending.raw is None:
                assert request is not None
                limit = self._limit(operation)
                if pending.partial is not None:
                    await pending.load(await _read_rest(request, pending.partial, limit, share))
                else:
                    await pending.load(await _read_body(request, limit, share))
            else:
                if len(pending.raw) > self._limit(operation):
                    raise GatewayError(
                        errors.BODY_TOO_LARGE, f"the request body is larger than {self._limit(operation)} bytes"
                    )
                share.hold(len(pending.raw))
            document, members, appid = pending.result()
            if facts.denied:
                raise GatewayError(errors.OPERATION_DENIED, f"{operation} is not enabled for this account")
            check_callback_fields(members, operation)
            if operation != DEVICE_CREATE:
                owner = facts.owner if pending.asked == appid else await self.store.owner(appid)
                if owner != account:
                    raise GatewayError(errors.NOT_FOUND)
            return Call(account, module, action, pending.raw or b"", document, members, appid, share)
        except BaseException:
            share.release()
            raise

    # --- operations -----------------------------------------------------------
    def _upstream(self) -> Upstream:
        upstream = self.services.upstream
        if upstream is None:
            raise GatewayError(errors.UNAVAILABLE, "the capability layer is not configured")
        return upstream

    async def _forward(self, call: Call, body: bytes) -> Answer:
        try:
            return await self._upstream().call(call.module, call.action, body)
        except UpstreamError as exc:
            log.warning("upstream %s failed: %s", call.operation, exc)
            raise GatewayError(errors.UNAVAILABLE) from exc

    async def _operation(self, call: Call) -> Response:
        if call.operation == DEVICE_CREATE:
            return await self._device_create(call)
        if call.operation in (LONG_START, UPDATE_CALLBACK):
            return await self._configure_callback(call)
        if call.operation == LONG_STOP:
            return await self._long_stop(call)
        answer = await self._forward(call, call.raw)
        if answer.ok:
            await self._after(call)
        return _pass_on(await self._scrub_other(call, answer))

    async def _long_stop(self, call: Call) -> Response:
        """``long/stop`` ends the service's maintenance of the instance, whatever the layer answers.

        The caller asked that the connection stay down, and the spec says the
        probe does not restart it after a stop: so maintenance ends on code 0,
        on "long connection closed" (it was down already), on any other
        refusal, and when the layer fails or cannot be reached (-50002: the
        connection may still be up, but the prober must not bring it back
        against the caller's wish). The answer is passed on unchanged; the
        next ``long/start`` resumes maintenance.
        """
        try:
            answer = await self._forward(call, call.raw)
        except GatewayError:
            await liveness.mark_stopped(self.redis, call.appid)
            raise
        await liveness.mark_stopped(self.redis, call.appid)
        return _pass_on(await self._scrub_other(call, answer))

    async def _after(self, call: Call) -> None:
        """Liveness bookkeeping once the capability layer accepted the operation."""
        if call.operation == "login/logout":
            await liveness.mark_logged_out(self.redis, call.appid)
        elif call.operation in PROXY_OPERATIONS:
            proxy = call.document.get("proxy")
            if isinstance(proxy, str):
                await liveness.record_proxy(self.redis, call.appid, proxy)

    async def _scrub_other(self, call: Call, answer: Answer) -> bytes:
        """The answer without the instance's receiver token, looked for in every answer (see .scrub)."""
        try:
            token = await self._receiver_token(call.appid)
        except NotFound:
            return answer.raw  # no instance (removed meanwhile): no token to leak
        if not might_mention(answer.raw, token) or not mentions(answer.envelope, token):
            return answer.raw
        config = await self.store.get_callback(CallbackScope(appid=call.appid))
        return scrub(answer, receiver_url(self.settings, call.appid, token), token, config.url or "")

    async def _device_create(self, call: Call) -> Response:
        try:
            account = await self.store.get_account(call.account)
        except NotFound:
            raise GatewayError(errors.UNAUTHORIZED) from None
        if account.expired():
            raise GatewayError(errors.ENTITLEMENT_EXPIRED)
        reservation: Reservation | None = None
        if account.devices is not None:
            reservation = await self.quota.reserve(account.id, account.devices)
            if reservation is None:
                raise GatewayError(errors.QUOTA_FULL, f"the account's device quota ({account.devices}) is full")
        try:
            answer = await self._forward(call, call.raw)
            data = answer.data
            appid = data.get("appid") if answer.ok and isinstance(data, dict) else None
            if isinstance(appid, str) and appid:
                if reservation is not None:
                    await self.quota.hold(reservation, appid)
                await self._register(account.id, appid)
        finally:
            if reservation is not None:
                await self.quota.release(reservation)
        return _pass_on(answer.raw)

    async def _register(self, account_id: str, appid: str) -> None:
        owner = await self.store.owner(appid)
        if owner is None:
            await self.store.register_instance(appid, account_id)
        elif owner != account_id:
            log.error("device/create returned an appid registered to another account")
            raise GatewayError(errors.UNAVAILABLE)

    async def _check_url(self, value: object) -> str:
        try:
            checked = await in_thread(check_for_service, value, self.settings, abandon_on_cancel=False)
        except AddressError as exc:
            raise GatewayError(errors.address_kind(exc), exc.message) from None
        return checked.url

    async def _receiver_token(self, appid: str) -> str:
        token = self._tokens.get(appid)
        if token is None:
            token = await self.store.receiver_token(appid)
            if len(self._tokens) >= RECEIVER_TOKENS_KEPT:
                del self._tokens[next(iter(self._tokens))]  # the oldest
            self._tokens[appid] = token
        return token

    async def _receiver_url(self, appid: str) -> tuple[str, str]:
        token = await self._receiver_token(appid)
        return receiver_url(self.settings, appid, token), token

    async def _configure_callback(self, call: Call) -> Response:
        url = await self._check_url(call.document.get("callbackUrl"))
        try:
            receiver_url, token = await self._receiver_url(call.appid)
        except NotFound:
            raise GatewayError(errors.NOT_FOUND) from None
        body = replace_member(call.raw, call.members, "callbackUrl", receiver_url)
        try:
            answer = await self._upstream().call(call.module, call.action, body)
        except UpstreamError as exc:
            log.warning("upstream %s failed: %s", call.operation, exc)
            raise GatewayError(errors.REGISTRATION_FAILED) from exc
        if answer.ok or (call.operation == LONG_START and _is_started(answer)):
            try:
                if not call.inherits_address:
                    await self.store.set_callback(CallbackScope(appid=call.appid), url)
                if call.operation == LONG_START:
                    await liveness.mark_started(self.redis, call.appid, self.settings.probe_interval)
            except RedisError as exc:
                log.warning("storing the callback address of an instance failed: %s", type(exc).__name__)
                raise GatewayError(errors.REGISTRATION_FAILED) from exc
        return _pass_on(scrub(answer, receiver_url, token, url))

    async def _set_callback(self, call: Call) -> Response:
        url = await self._check_url(call.document.get("callbackUrl"))
        try:
            config = await self.store.set_callback(CallbackScope(appid=call.appid), url)
        except NotFound:
            raise GatewayError(errors.NOT_FOUND) from None
        except RedisError as exc:
            raise GatewayError(errors.REGISTRATION_FAILED) from exc
        return _json(
            {
                "code": 0,
                "message": "ok",
                "time": time.strftime("%Y-%m-%d %H:%M:%S"),
                "data": {"appid": call.appid, "callbackUrl": config.url},
            }
        )
