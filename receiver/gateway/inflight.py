"""In-flight body bytes per account: how much of a server's memory one account's calls may hold.

A gateway call holds its body in memory from the first byte read until its
answer is sent: while it is read, parsed and forwarded. :class:`InflightBytes`
counts those bytes per account, and a call whose body would take its account
past ``SVCGW_ACCOUNT_INFLIGHT_BYTES`` is refused at once, before the rest of
it is read: -42900 (429) with ``Retry-After``, since the same call goes
through once the account's other calls are done. A call gives its share back
when it ends, whatever the outcome (answered, refused, failed, or abandoned
by the client).

The count is kept in the server process, not in Redis: what it protects is
that process's memory. With ``SVCGW_HTTP_WORKERS`` processes, each has its
own count.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from receiver.gateway import codes as gateway_codes
from svcgw.errors import GatewayError

__all__ = ["RETRY_AFTER_SECONDS", "InflightBytes", "Share"]

# Other calls' bodies are read and forwarded within seconds; a second is an
# honest first guess, and a client that retries early is refused again at no cost.
RETRY_AFTER_SECONDS = 1


class Share:
    """The bytes one call holds; grows as its body arrives, never shrinks before the end."""

    def __init__(self, ledger: InflightBytes, account: str) -> None:
        self.ledger = ledger
        self.account = account
        self.held = 0

    def release(self) -> None:
        """Give every byte held back to the account; a second call gives nothing."""
        self.ledger._give(self.account, self.held)
        self.held = 0

    def hold(self, size: int) -> None:
        """Hold at least ``size`` bytes in all, or raise -42900 and hold nothing more."""
        if size > self.held:
            self.ledger._take(self.account, size - self.held)
            self.held = size


class InflightBytes:
    """Body bytes held per account, at most ``limit`` each; single event loop, so no lock."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held: dict[str, int] = {}

    def held(self, account: str) -> int:
        return self._held.get(account, 0)

    @contextlib.contextmanager
    def share(self, account: str) -> Iterator[Share]:
        """A share of the account's bytes for one call, given back when the block ends."""
        share = Share(self, account)
        try:
            yield share
        finally:
            share.release()

    def open_share(self, account: str) -> Share:
        """A share whose owner calls :meth:`Share.release` when the call ends, whatever happened."""
        return Share(self, account)

    def _take(self, account: str, size: int) -> None:
        held = self._held.get(account, 0)
        if held + size > self.limit:
            raise GatewayError(
                gateway_codes.RATE_LIMITED,
                f"the account's calls in progress already hold {held} body bytes, and at most "
                f"{self.limit} may be held at once; retry after the time in Retry-After",
                headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
            )
        self._held[account] = held + size

    def _give(self, account: str, size: int) -> None:
        left = self._held.get(account, 0) - size
        if left > 0:
            self._held[account] = left
        else:
            self._held.pop(account, None)
