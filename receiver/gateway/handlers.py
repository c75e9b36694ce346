"""The gateway's routes: checks 2 to 11 of the package docstring, then forwarding.

:class:`Gateway` admits a call (key, rate, body, instance, denial, callback
fields, ownership) into a :class:`Call`, then runs the operation: most are
forwarded as received; ``device/create``, the callback operations and the
liveness-relevant ones have their own handling. Every refusal is a
``GatewayError`` from ``svcgw.errors``; a Redis failure anywhere is -50002.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from redis.asyncio import Redis
from redis.exceptions import RedisError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from svcgw import errors, liveness
from svcgw.addresses import AddressError, check_for_service
from svcgw.errors import GatewayError
from svcgw.ingest import PARSE_IN_THREAD_BYTES
from svcgw.jsonspan import Member, replace_member
from svcgw.receivers import receiver_url
from svcgw.store import NotFound
from svcgw.store import Scope as CallbackScope
from svcgw.upstream import Answer, Upstream, UpstreamError

from ..http import BodyTooLarge, ConflictingKeys, presented_key, read_body
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
from .scrub import mentions, scrub

if TYPE_CHECKING:
    from ..services import Services

__all__ = ["API_PATH", "SET_CALLBACK_PATH", "Call", "Gateway"]

log = logging.getLogger("svcgw.gateway")

API_PATH = "/svc/api/{module}/{action}"
LONG_STOP = "long/stop"
SET_CALLBACK_PATH = "/svc/instances/set-callback"

PROXY_OPERATIONS = frozenset({"login/getQr", "login/checkQr", "login/reconnect"})


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

    @property
    def operation(self) -> str:
        return f"{self.module}/{self.action}"


async def _read_body(request: Request, limit: int, share: Share) -> bytes:
    try:
        return await read_body(request, limit, hold=share.hold)
    except BodyTooLarge:
        raise GatewayError(errors.BODY_TOO_LARGE, f"the request body is larger than {limit} bytes") from None


async def _parse_body(raw: bytes) -> tuple[dict[str, Any], list[Member]]:
    """Check 4's parsing; a large body in a worker thread, so the event loop keeps answering."""
    if len(raw) <= PARSE_IN_THREAD_BYTES:
        return parse_body(raw)
    return await asyncio.to_thread(parse_body, raw)


def _api_key(request: Request) -> str | None:
    try:
        return presented_key(request)
    except ConflictingKeys:
        return None


RECEIVER_TOKENS_KEPT = 10_000


class Gateway:
    def __init__(self, services: Services) -> None:
        settings = services.settings
        self.services = services
        self.settings = settings
        self.store = services.store
        self.redis: Redis = services.text_redis
        self.limiter = services.limiter
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
            account = await self._authenticate(request)
            # The body is in memory from its first byte until the answer is sent.
            with self.inflight.share(account) as share:
                call = await self._admit(request, account, module, action, share)
                return await handler(call)
        except GatewayError as exc:
            return exc.response()
        except RedisError as exc:
            log.warning("gateway storage error on %s/%s: %s", module, action, type(exc).__name__)
            return GatewayError(errors.UNAVAILABLE).response()

    # --- checks 2 to 9 ---------------------------------------------------------
    async def _authenticate(self, request: Request) -> str:
        """Checks 2 and 3: the account of the call's key, within its rate limit."""
        key = _api_key(request)
        account = await self.store.authenticate(key) if key else None
        if account is None:
            raise GatewayError(errors.UNAUTHORIZED, headers={"WWW-Authenticate": "Bearer"})
        verdict = await self.limiter.hit(account)
        if not verdict.allowed:
            raise GatewayError(errors.RATE_LIMITED, headers={"Retry-After": str(verdict.retry_after)})
        return account

    async def _admit(self, request: Request, account: str, module: str, action: str, share: Share) -> Call:
        operation = f"{module}/{action}"
        uploading = operation in UPLOAD_OPERATIONS
        limit = self.settings.upload_max_body_bytes if uploading else self.settings.gateway_max_body_bytes
        raw = await _read_body(request, limit, share)
        document, members = await _parse_body(raw)
        appid = instance_id(document, members, configuring=operation in CALLBACK_OPERATIONS)
        denied = {name.lower() for name in await self.store.refused(account)}
        if operation.lower() in denied:
            raise GatewayError(errors.OPERATION_DENIED, f"{operation} is not enabled for this account")
        check_callback_fields(members, operation)
        if operation != DEVICE_CREATE and await self.store.owner(appid) != account:
            raise GatewayError(errors.NOT_FOUND)
        return Call(account, module, action, raw, document, members, appid)

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
            receiver_url, token = await self._receiver_url(call.appid)
        except NotFound:
            return answer.raw  # no instance (removed meanwhile): no token to leak
        if not mentions(answer.envelope, token):
            return answer.raw
        config = await self.store.get_callback(CallbackScope(appid=call.appid))
        return scrub(answer, receiver_url, token, config.url or "")

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
            checked = await run_in_threadpool(check_for_service, value, self.settings)
        except AddressError as exc:
            raise GatewayError(errors.address_kind(exc), exc.message) from None
        return checked.url

    async def _receiver_url(self, appid: str) -> tuple[str, str]:
        token = self._tokens.get(appid)
        if token is None:
            token = await self.store.receiver_token(appid)
            if len(self._tokens) >= RECEIVER_TOKENS_KEPT:
                del self._tokens[next(iter(self._tokens))]  # the oldest
            self._tokens[appid] = token
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
