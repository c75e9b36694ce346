"""The gateway's routes: checks 2 to 9 of the package docstring, then the operation.

:class:`Gateway` admits a call (key, rate, body, instance, denial, callback
fields, ownership) into a :class:`.intake.Call`, then runs the operation
(:mod:`.forwarding`). Checks and operations raise; whatever they raise
that has a row (a ``GatewayError``, Redis failing, ...: :mod:`.refusals`) is
turned into the answer in one place, :meth:`Gateway._answer`, for the direct
path, the HTTP routes and :meth:`Gateway.invoke` (the console) alike.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from receiver.gateway import codes as gateway_codes
from svcgw.digests import digest
from svcgw.errors import GatewayError

from ..headers import send_direct, send_server_error
from ..http import BodyTooLarge, client_address, presented_key
from .admission import MAX_KEY_LENGTH, Admission, Facts
from .body import DEVICE_CREATE, SET_CALLBACK_OPERATION, UPLOAD_OPERATIONS, check_callback_fields
from .forwarding import Forwarding
from .inflight import InflightBytes
from .intake import (
    EARLY_BODY_BYTES,
    Call,
    Pending,
    declares_small,
    direct_operation,
    first_chunk,
    read_limited,
    read_rest,
)
from .refusals import ROWS, refused

if TYPE_CHECKING:
    from ..services import Services

__all__ = ["API_PATH", "SET_CALLBACK_PATH", "Call", "Gateway", "direct_operation"]

API_PATH = "/svc/api/{module}/{action}"
SET_CALLBACK_PATH = "/svc/instances/set-callback"


class Gateway:
    def __init__(self, services: Services) -> None:
        settings = services.settings
        self.services = services
        self.settings = settings
        self.store = services.store
        self.limiter = services.limiter
        self.admission = Admission(services.text_redis, services.limiter)
        self.key_guard = services.key_guard
        self.inflight = InflightBytes(settings.account_inflight_bytes)
        self.forwarding = Forwarding(services)

    # --- endpoints ----------------------------------------------------------
    async def direct(self, scope: Scope, receive: Receive, send: Send, module: str, action: str) -> None:
        """``api`` as a plain ASGI call, for the app to run without its router and middleware.

        The hot path of the service: the app hands every call on a plain API
        path (:func:`direct_operation`) here. What the middleware would add, this
        does itself: ``nosniff`` on the answer, and, for an error no row answers (:mod:`.refusals`),
        the 500 that Starlette's ``ServerErrorMiddleware`` would send, the error raised on to the server.
        """
        try:
            request = Request(scope, receive)
            response = await self._answer(self._admit_request(request, module, action), module, action)
        except ClientDisconnect:
            return  # the caller left; its share was given back on the way out
        except Exception:
            await send_server_error(send)
            raise
        # Without building a wrapper of ``send`` for every call to add nosniff.
        await send_direct(send, response)

    async def api(self, request: Request) -> Response:
        module, action = request.path_params["module"], request.path_params["action"]
        return await self._answer(self._admit_request(request, module, action), module, action)

    async def set_callback(self, request: Request) -> Response:
        module, action = SET_CALLBACK_OPERATION.split("/")
        admitted = self._admit_request(request, module, action, sets_callback=True)
        return await self._answer(admitted, module, action)

    async def _answer(self, admitted: Awaitable[Call], module: str, action: str) -> Response:
        """The operation's answer once ``admitted`` gives the call; on the way, the row of what was raised.

        The gateway's one handler of errors (:mod:`.refusals`), for every way a call comes in.
        """
        try:
            call = await admitted
            return await self._run(call)
        except ROWS.classes as exc:
            return refused(exc, module, action)

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
        # The console names operations, not paths: its set-callback is the route's.
        sets_callback = f"{module}/{action}" == SET_CALLBACK_OPERATION
        admitted = self._admit_account(
            account, module, action, raw, inherits_address=inherits_address, sets_callback=sets_callback
        )
        return await self._answer(admitted, module, action)

    async def _admit_account(
        self, account: str, module: str, action: str, raw: bytes, *, inherits_address: bool, sets_callback: bool
    ) -> Call:
        """Checks 3 to 9 of a call for ``account``, whose body is ``raw``."""
        operation = f"{module}/{action}"
        pending = Pending(operation, sets_callback=sets_callback)
        await pending.load(raw)
        facts = await self.admission.admit(account=account, operation=operation, appid=pending.ask())
        assert facts is not None  # an account call has no key to refuse
        call = await self._judge(facts, pending, module, action, None)
        if inherits_address:
            call = dataclasses.replace(call, inherits_address=True)
        return call

    async def _run(self, call: Call) -> Response:
        try:
            return await self.forwarding.run(call)
        finally:
            call.share.release()

    # --- checks 2 to 9 ---------------------------------------------------------
    async def _admit_request(self, request: Request, module: str, action: str, *, sets_callback: bool = False) -> Call:
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
        key = presented_key(request)
        pending = Pending(operation, sets_callback=sets_callback)
        limit = self._limit(operation)
        if key and declares_small(request, min(limit, EARLY_BODY_BYTES)):
            # Usually the whole of a small body came with the headers; if not, what came is kept
            # and the rest is read once the account is known, its bytes held as they arrive.
            chunk, more = await first_chunk(request)
            if more:
                pending.partial = chunk
            else:
                await pending.load(chunk)
        facts = await self._admit_key(request, key, operation, pending.ask())
        if facts is None:
            raise GatewayError(gateway_codes.UNAUTHORIZED, headers={"WWW-Authenticate": "Bearer"})
        return await self._judge(facts, pending, module, action, request)

    async def _admit_key(self, request: Request, key: str | None, operation: str, appid: str | None) -> Facts | None:
        """What Redis said of a call with ``key``, its look-up guarded per client address; None: no valid key."""
        if not key or len(key) > MAX_KEY_LENGTH:
            return None  # no key this service issued: refused without a look-up
        admit = self.admission.admit
        return await self.key_guard.check(
            client_address(request), digest(key), lambda: admit(key=key, operation=operation, appid=appid)
        )

    def _limit(self, operation: str) -> int:
        if operation in UPLOAD_OPERATIONS:
            return self.settings.upload_max_body_bytes
        return self.settings.gateway_max_body_bytes

    async def _judge(self, facts: Facts, pending: Pending, module: str, action: str, request: Request | None) -> Call:
        """Checks 3 to 9 on what Redis said and the body; the body is read now if it was not yet."""
        operation = pending.operation
        account = facts.account
        if not facts.verdict.allowed:
            raise GatewayError(gateway_codes.RATE_LIMITED, headers={"Retry-After": str(facts.verdict.retry_after)})
        # The body is in memory from its first byte until the answer is sent.
        share = self.inflight.open_share(account)
        try:
            if pending.raw is None:
                assert request is not None
                limit = self._limit(operation)
                if pending.partial is not None:
                    await pending.load(await read_rest(request, pending.partial, limit, share))
                else:
                    await pending.load(await read_limited(request, limit, share))
            else:
                if len(pending.raw) > self._limit(operation):
                    raise BodyTooLarge(self._limit(operation))
                share.hold(len(pending.raw))
            document, members, appid = pending.result()
            if facts.denied:
                raise GatewayError(gateway_codes.OPERATION_DENIED, f"{operation} is not enabled for this account")
            check_callback_fields(members, operation, sets_callback=pending.sets_callback)
            if operation != DEVICE_CREATE:
                owner = facts.owner if pending.asked == appid else await self.store.owner(appid)
                if owner != account:
                    raise GatewayError(gateway_codes.NOT_FOUND)
            raw = pending.raw or b""
            return Call(
                account, module, action, raw, document, members, appid, share, sets_callback=pending.sets_callback
            )
        except BaseException:
            share.release()
            raise
