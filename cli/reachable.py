"""Whether the service is reached at ``SVCGW_PUBLIC_URL``: checked once by ``svcgw up`` at start.

The capability layer posts every event to a receiver URL under
``SVCGW_PUBLIC_URL``, and every link ``svcgw up`` prints starts with it. A
public URL that does not lead to this server loses events without a word
from the receiver (it never sees them), so ``up`` says so on its terminal.

The check posts to a receiver URL that cannot exist: only the service's own
receiver answers that with its 404 and a ``{"code": <negative>, ...}`` body,
and the post costs it one Redis read and stores nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import click
import httpx

from svcgw.config.settings import Settings
from svcgw.intake.receivers import RECEIVER_PREFIX

__all__ = ["NotReady", "check_public_url", "local_base", "report_public_url", "wait_ready"]

PROBE_PATH = RECEIVER_PREFIX + "we_svcgwselfcheck/not-a-token"


class NotReady(click.ClickException):
    """The HTTP server did not become ready."""


def local_base(settings: Settings) -> str:
    """The HTTP server as reached from this machine (a wildcard bind address is reached on loopback)."""
    host = settings.host if settings.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{settings.port}"


def wait_ready(settings: Settings, timeout: float = 60.0, alive: Callable[[], bool] | None = None) -> None:
    """Until ``/readyz`` answers 200; NotReady at the deadline, or at once when ``alive()`` says the server is gone.

    A server that could not bind its port exits in its first second: ``up`` then says so and stops, rather than
    waiting out the deadline.
    """
    url = f"{local_base(settings)}/readyz"
    deadline = time.monotonic() + timeout
    while True:
        if alive is not None and not alive():
            raise NotReady(f"the HTTP server exited before it answered at {url}")
        try:
            if httpx.get(url, timeout=2, trust_env=False).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise NotReady(f"the HTTP server did not become ready at {url} within {timeout:.0f}s")
        time.sleep(0.2)


def check_public_url(settings: Settings, timeout: float = 5.0) -> str | None:
    """None when the service's own receiver answers at the public URL, else what was found there instead."""
    url = settings.public_url.rstrip("/") + PROBE_PATH
    try:
        answer = httpx.post(url, content=b"{}", timeout=timeout, trust_env=False, follow_redirects=False)
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    try:
        body = answer.json()
    except ValueError:
        body = None
    code = body.get("code") if isinstance(body, dict) else None
    if answer.status_code == 404 and isinstance(code, int) and code < 0:
        return None
    return f"HTTP {answer.status_code} from something else than this service's receiver"


def report_public_url(settings: Settings, alive: Callable[[], bool] | None = None) -> bool:
    """Wait for the HTTP server, check the public URL, and print the outcome plainly. True when reachable."""
    try:
        wait_ready(settings, alive=alive)
    except NotReady as exc:
        print(f"svcgw up: {exc.format_message()}", flush=True)
        return False
    problem = check_public_url(settings)
    if problem is None:
        print(f"svcgw up: the receiver answers at SVCGW_PUBLIC_URL {settings.public_url}", flush=True)
        return True
    print(
        "\n".join(
            [
                "",
                f"svcgw up: WARNING: the receiver does NOT answer at SVCGW_PUBLIC_URL {settings.public_url}",
                f"  ({problem}).",
                "  The capability layer posts every event to a receiver URL under it, so they would be lost,",
                f"  and the links below start with it. This server listens on {local_base(settings)}:",
                "  set SVCGW_PUBLIC_URL to the address it is reached at (or leave it unset: it is then derived",
                "  from SVCGW_HOST and SVCGW_PORT).",
                "",
            ]
        ),
        flush=True,
    )
    return False
