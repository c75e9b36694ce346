"""Sending one prepared attempt: signed and POSTed, every failure an :class:`~svcgw.delivery.attempt.Attempt`.

``send`` signs and POSTs the exact body bytes and never raises: every failure
(no address, blocked address, timeout, connection error, 3xx, 4xx, 5xx, and
any exception the client raises) becomes an ``Attempt`` with ``ok=False``.
Only a 2xx counts as delivered; redirects are not followed. What an attempt
is, how it is prepared and what comes after it are the delivery's own
(:mod:`svcgw.delivery.attempt`); this is the worker's HTTP side of it.
"""

from __future__ import annotations

import functools
import time
from urllib.parse import urlsplit, urlunsplit

from svcgw.callbacks.outbound import Refused, Sender, SendError, TimedOut
from svcgw.callbacks.signing import signed_headers
from svcgw.delivery.attempt import Attempt, Prepared, removed_error, unexpected

__all__ = ["build_headers", "redacted", "send"]


# Every attempt's record names its address; a worker sees few distinct ones.
@functools.lru_cache(maxsize=4096)
def redacted(url: str) -> str:
    """The address without credentials or query string, for records and logs."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def build_headers(prepared: Prepared, secret: str, timestamp: int) -> dict[str, str]:
    return signed_headers(
        secret,
        prepared.body,
        timestamp,
        event_type=prepared.event_type,
        token=prepared.token,
        delivery_id=prepared.delivery_id,
        attempt=prepared.attempts + 1,
        destination=prepared.destination_id or None,
    )


async def send(client: Sender, prepared: Prepared) -> Attempt:
    """Sign and POST the delivery; never raises (a failure is an ``Attempt`` with ``ok=False``)."""
    started = time.time()
    clock = time.perf_counter()

    address = redacted(prepared.destination.url) if prepared.destination else None

    def failed(error: str, status: int | None = None, response: str = "", *, timed_out: bool = False) -> Attempt:
        return Attempt(
            ok=False,
            at=started,
            duration=time.perf_counter() - clock,
            status=status,
            error=error,
            response=response,
            destination=address,
            timed_out=timed_out,
            dst=prepared.destination_id or None,
        )

    if prepared.destination is None:
        if prepared.destination_id:
            return failed(removed_error(prepared.destination_id))
        return failed("no callback address configured")
    if prepared.token == "":
        return failed("the Bearer token cannot be decrypted with the configured keys")
    if prepared.secret_unreadable:
        return failed("the signing secret cannot be decrypted with the configured keys")
    try:
        headers = build_headers(prepared, prepared.destination.secret, int(started))
        answer = await client.post(prepared.destination.url, prepared.body, headers)
    except Refused as exc:
        return failed(f"destination refused: {exc}")
    except TimedOut:
        return failed(f"timed out after {client.timeout}s", timed_out=True)
    except SendError as exc:
        return failed(str(exc))
    except Exception as exc:
        # A request the client cannot even make (a header it refuses, say)
        # is a failed attempt like any other: retried, then a dead letter.
        return failed(unexpected(exc))
    status = answer.status
    if 200 <= status < 300:
        return Attempt(
            ok=True,
            at=started,
            duration=time.perf_counter() - clock,
            status=status,
            response=answer.snippet,
            destination=address,
            dst=prepared.destination_id or None,
        )
    reason = f"HTTP {status}"
    if 300 <= status < 400:
        reason += " (redirects are not followed)"
    return failed(reason, status, answer.snippet)
