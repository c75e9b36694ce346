"""What an admitted call does, once it passed checks 1 to 9 (see the package docstring): its forwarding.

Most are forwarded as received; ``device/create`` (the quota, check 10),
the callback operations (check 11: the address is checked and the
receiver's own given to the capability layer) and the liveness-relevant
ones have their own handling. Every answer from the capability layer has
the instance's receiver token scrubbed out (:mod:`.scrub`). What they
raise is answered by its row (:mod:`.refusals`): an upstream failure is
-50002, except in a callback registration, which converts it (and a storage
failure) to -50000 here (``raise GatewayError(...) from exc``).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import orjson
from redis.asyncio import Redis
from starlette.responses import Response

from receiver.gateway import codes as gateway_codes
from svcgw.callbacks.addresses import check_for_service
from svcgw.errors import STORAGE_ERRORS, GatewayError, NotFound
from svcgw.intake.receivers import receiver_shard, receiver_url
from svcgw.liveness import transitions
from svcgw.registry.copies import ShardUnavailable
from svcgw.registry.store import Scope as CallbackScope
from svcgw.shards.clients import ShardRedis
from svcgw.shards.placement import placement_order
from svcgw.threads import in_thread
from svcgw.upstream import Answer, Upstream, UpstreamError

from .body import DEVICE_CREATE, LONG_START, UPDATE_CALLBACK, outbound_body
from .intake import Call
from .quota import DeviceQuota, Reservation
from .scrub import mentions, might_mention, scrub

if TYPE_CHECKING:
    from ..services import Services

__all__ = ["LONG_STOP", "PROXY_OPERATIONS", "Forwarding"]

log = logging.getLogger("svcgw.gateway")

LONG_STOP = "long/stop"

# The proxy of the caller's login calls, kept for the prober's reconnects (same egress as at login).
PROXY_OPERATIONS = frozenset({"login/getQr", "login/checkQr", "login/submitQrCode", "login/reconnect"})

RECEIVER_TOKENS_KEPT = 10_000


def _json(document: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(document), status_code=status, media_type="application/json")


def _pass_on(raw: bytes) -> Response:
    return Response(raw, status_code=200, media_type="application/json")


def _is_started(answer: Answer) -> bool:
    """``long/start`` on a running connection: reset, and still running."""
    message = answer.message.strip()
    return answer.code == -1 and (message == "started" or message.endswith("|started"))


class Forwarding:
    """What the gateway does with an admitted call (:meth:`run`), by whatever route it came."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.settings = services.settings
        self.store = services.store
        self.redis: Redis = services.text_redis
        self.quota = DeviceQuota(services.text_redis, services.keys)
        self.shards = self.settings.shard_layout.shards
        # appid -> receiver token. A token never changes for its appid, and every forwarded answer
        # is searched for it: one look-up and one decryption per instance and process, not per call.
        self._tokens: dict[str, str] = {}

    def _upstream(self) -> Upstream:
        upstream = self.services.upstream
        if upstream is None:
            raise GatewayError(gateway_codes.UNAVAILABLE, "the capability layer is not configured")
        return upstream

    async def _forward(self, call: Call, receiver_url: str | None = None) -> Answer:
        """The capability layer's answer; ``UpstreamError`` when it fails (-50002, :mod:`.refusals`).

        The one way a body goes upstream: as sent, but with any ``callbackUrl``
        made ``receiver_url``, or refused (-40403) when there is none to make it
        (:func:`.body.outbound_body`).
        """
        body = outbound_body(call.raw, call.members, call.operation, receiver_url)
        return await self._upstream().call(call.module, call.action, body)

    async def run(self, call: Call) -> Response:
        if call.sets_callback:
            return await self._set_callback(call)
        if call.operation == DEVICE_CREATE:
            return await self._device_create(call)
        if call.operation in (LONG_START, UPDATE_CALLBACK):
            return await self._configure_callback(call)
        if call.operation == LONG_STOP:
            return await self._long_stop(call)
        answer = await self._forward(call)
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
            answer = await self._forward(call)
        except (GatewayError, UpstreamError):
            # Not answered here (its row is, on the way out): the stop is recorded all the same.
            await transitions.mark_stopped(*await self._liveness_redis(call.appid), call.appid)
            raise
        await transitions.mark_stopped(*await self._liveness_redis(call.appid), call.appid)
        return _pass_on(await self._scrub_other(call, answer))

    async def _after(self, call: Call) -> None:
        """Liveness bookkeeping once the capability layer accepted the operation."""
        if call.operation == "login/logout":
            await transitions.mark_logged_out(*await self._liveness_redis(call.appid), call.appid)
        elif call.operation in PROXY_OPERATIONS:
            proxy = call.document.get("proxy")
            if isinstance(proxy, str):
                await transitions.record_proxy(*await self._liveness_redis(call.appid), call.appid, proxy)

    async def _scrub_other(self, call: Call, answer: Answer) -> bytes:
        """The answer without the instance's receiver token, looked for in every answer (see .scrub)."""
        try:
            token = await self._receiver_token(call.appid)
        except NotFound:
            return answer.raw  # no instance (removed meanwhile): no token to leak, and the answer stands
        if not might_mention(answer.raw, token) or not mentions(answer.envelope, token):
            return answer.raw
        config = await self.store.get_callback(CallbackScope(appid=call.appid))
        return scrub(answer, receiver_url(self.settings, call.appid, token), token, config.url or "")

    async def _device_create(self, call: Call) -> Response:
        account = await self.store.get_account(call.account)  # gone since its key was checked: 401
        if account.expired():
            raise GatewayError(gateway_codes.ENTITLEMENT_EXPIRED)
        reservation: Reservation | None = None
        if account.devices is not None:
            reservation = await self.quota.reserve(account.id, account.devices)
            if reservation is None:
                raise GatewayError(gateway_codes.QUOTA_FULL, f"the account's device quota ({account.devices}) is full")
        try:
            answer = await self._forward(call)
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
        """Register a new appid on the best open shard that answers; a known one stays where it is.

        Shards are tried in placement's order (svcgw.shards.placement.placement_order).
        The instance's copies are the first write to its shard, so a shard
        that is down costs the call nothing until it is the one chosen; then
        the next is tried. When no open shard takes it, the last one's
        ``ShardUnavailable`` (a RedisError) is answered -50002.
        """
        owner, counts = await self.store.owner_and_counts(appid, self.shards)
        if owner is not None:
            if owner != account_id:
                log.error("device/create returned an appid registered to another account")
                raise GatewayError(gateway_codes.UNAVAILABLE)
            return
        *others, last = placement_order(self.shards, counts)
        for shard in others:
            try:
                await self.store.register_instance(appid, account_id, shard.index)
                return
            except ShardUnavailable as exc:
                # Not an answer: the next shard is tried (the last one's is -50002).
                log.warning("%s; placing the instance on the next open shard", exc)
        await self.store.register_instance(appid, account_id, last.index)

    async def _check_url(self, value: object) -> str:
        """The address, checked against the address rules (``AddressError``: its row, -40011 to -40013)."""
        checked = await in_thread(check_for_service, value, self.settings, abandon_on_cancel=False)
        return checked.url

    async def _receiver_token(self, appid: str) -> str:
        token = self._tokens.get(appid)
        if token is None:
            token = await self.store.receiver_token(appid)
            if len(self._tokens) >= RECEIVER_TOKENS_KEPT:
                del self._tokens[next(iter(self._tokens))]  # the oldest
            self._tokens[appid] = token
        return token

    async def _liveness_redis(self, appid: str) -> ShardRedis:
        """The client of the instance's shard, where its liveness and probe schedule live.

        The shard is read from the receiver token, which this process keeps
        once it has looked it up: no round trip of its own after the first.
        """
        if len(self.services.shard_text) <= 1:
            return self.services.shard_text_of(0)
        try:
            token = await self._receiver_token(appid)
        except NotFound:
            return self.services.shard_text_of(0)  # no instance: nothing of it on any shard to keep
        return self.services.shard_text_of(receiver_shard(token))

    async def _receiver_url(self, appid: str) -> tuple[str, str]:
        token = await self._receiver_token(appid)
        return receiver_url(self.settings, appid, token), token

    async def _configure_callback(self, call: Call) -> Response:
        url = await self._check_url(call.document.get("callbackUrl"))
        receiver_url, token = await self._receiver_url(call.appid)
        try:
            answer = await self._forward(call, receiver_url)
        except UpstreamError as exc:
            # This step's row, not the table's -50002: the registration is what failed.
            log.warning("upstream %s failed: %s", call.operation, exc)
            raise GatewayError(gateway_codes.REGISTRATION_FAILED) from exc
        if answer.ok or (call.operation == LONG_START and _is_started(answer)):
            try:
                if not call.inherits_address:
                    await self.store.set_callback(CallbackScope(appid=call.appid), url)
                if call.operation == LONG_START:
                    redis, keys = self.services.shard_text_of(receiver_shard(token))
                    await transitions.mark_started(redis, keys, call.appid, self.settings.probe_interval)
            except STORAGE_ERRORS as exc:
                # This step's row: the layer has the address, the service could not keep it.
                log.warning("storing the callback address of an instance failed: %s", type(exc).__name__)
                raise GatewayError(gateway_codes.REGISTRATION_FAILED) from exc
        return _pass_on(scrub(answer, receiver_url, token, url))

    async def _set_callback(self, call: Call) -> Response:
        """Stores the address; nothing goes upstream."""
        url = await self._check_url(call.document.get("callbackUrl"))
        try:
            config = await self.store.set_callback(CallbackScope(appid=call.appid), url)
        except STORAGE_ERRORS as exc:
            raise GatewayError(gateway_codes.REGISTRATION_FAILED) from exc  # this step's row, as in long/start
        return _json(
            {
                "code": 0,
                "message": "ok",
                "time": time.strftime("%Y-%m-%d %H:%M:%S"),
                "data": {"appid": call.appid, "callbackUrl": config.url},
            }
        )
