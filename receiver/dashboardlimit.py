"""Wrong passwords at ``/rq`` counted per client address, as the console's sign-in counts them.

The dashboard's Basic credentials (``receiver.dashboard.DashboardGuard``) are
checked on every request. Without a limit, a password could be guessed as fast
as requests arrive. :class:`SignInLimit` stands in front of the guard and
checks the credentials through a ``receiver.credentialguard.CredentialGuard``
of their own, the API keys' and receiver tokens' guard, with the console
sign-in's per-address limit (``SVCGW_SIGNIN_FAILURES_PER_ADDRESS``):

* wrong credentials count a failure against the client address
  (``receiver.http.client_address``); the request goes on to the guard, which
  answers 401 as before. A request without an ``Authorization`` header (a
  browser's first) is no guess: it goes to the guard uncounted;
* while an address's window is full, requests from it with credentials not
  found right lately are refused before any comparison: 429 with
  ``Retry-After`` (``errors.DASHBOARD_LIMITED``);
* the right credentials pass, from any other address at any time, and from
  a limited address once they were found right in this process lately.

The windows are this process's (in memory), as the credential guard's are.
"""

from __future__ import annotations

from limits.storage import MemoryStorage
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from svcgw import errors
from svcgw.digests import digest
from svcgw.errors import PlainRefusal

from .credentialguard import PER_ADDRESS, CheckRoom, CredentialGuard, Throttled
from .dashboard import DashboardGuard
from .http import client_address

__all__ = ["CHECKS_AT_ONCE", "SignInLimit"]

# Comparisons in constant time take no I/O: the room only keeps a flood's checks in line.
CHECKS_AT_ONCE = 64
ROOM_WAIT_SECONDS = 1.0


class SignInLimit:
    """The dashboard ``guard``, behind a limit of wrong credentials per client address (``failures``)."""

    def __init__(self, guard: DashboardGuard, failures: str) -> None:
        self.guard = guard
        room = CheckRoom(CHECKS_AT_ONCE, PER_ADDRESS, ROOM_WAIT_SECONDS)
        self._credentials = CredentialGuard("dashboard password", failures, room, MemoryStorage())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.guard(scope, receive, send)
            return
        presented = next((value for name, value in scope.get("headers", []) if name == b"authorization"), None)
        if presented is None:
            # No credentials is no guess: a browser asks so first, and the guard answers 401 to ask for them.
            await self.guard(scope, receive, send)
            return

        async def verify() -> bool | None:
            return True if self.guard.authorized(scope) else None

        try:
            await self._credentials.check(client_address(Request(scope)), digest(presented.decode("latin-1")), verify)
        except Throttled as exc:
            # Answered by the app's handler of PlainRefusal, as /metrics and /docs refusals are.
            raise PlainRefusal(errors.DASHBOARD_LIMITED, headers={"Retry-After": str(exc.retry_after)}) from None
        await self.guard(scope, receive, send)
