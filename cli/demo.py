"""``svcgw up --demo``: a demo account, API key and instance, ready to try.

Run once the HTTP server is up. It is idempotent: ``svcgw:demo`` remembers
the demo account, its key (sealed by the token vault, like every other
token at rest) and its instance, so every start prints the same ones. A
piece that is gone or unusable (a revoked key, a key sealed under another
encryption key) is made anew.

With the simulator as upstream, the instance is created through the
gateway (``device/create``), logged in on the simulator, started with
``long/start`` towards the simulator's demo sink (``/_sim/sink``), and
given a little traffic, so the signed callbacks can be watched arriving.

It prints (``cli.demotext``) a gateway call with the demo key, a dead
letter and its replay within a minute (an address of the simulator that
always fails, and the demo's short retry schedule), and how to walk through
onboarding in the browser (a new instance by QR login in the console, the
simulator playing the phone: its QR codes wait for ``/_sim/qr``), and turns
on rq-dashboard at ``/rq``, by
which the service is monitored, with credentials generated into the state
dir (owner-only) the first time, printed on the terminal and nowhere else.
"""

from __future__ import annotations

import asyncio
import secrets
import string
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import click
import httpx
from redis.asyncio import Redis as AsyncRedis
from redis.exceptions import RedisClusterException, RedisError

from svcgw.config.settings import Settings
from svcgw.errors import NotFound
from svcgw.registry.credentials import Credentials, LoginTaken
from svcgw.registry.invitations import Invitations
from svcgw.registry.store import Store
from svcgw.vault import TokenVault, VaultError

from .context import Admin
from .demoaccount import Demo
from .demotext import (
    INVITATION_SECONDS,
    render_dead_letter,
    render_demo,
    render_flow,
    render_onboarding,
    sample_event_body,
)
from .embedded import load_or_create_password
from .reachable import NotReady, local_base, wait_ready

__all__ = [
    "DASHBOARD_USER",
    "Demo",
    "DemoError",
    "demo_dashboard",
    "ensure_demo",
    "prepare_demo",
    "render_dead_letter",
    "render_demo",
    "render_flow",
    "render_onboarding",
    "sample_event_body",
    "start_flow",
    "wait_ready",
]

DEMO_ACCOUNT_NAME = "demo"
DEMO_LOGIN = "demo@example.com"
DASHBOARD_USER = "operator"
DEMO_DEVICES = 10
_APPID_ALPHABET = string.ascii_lowercase + string.digits


class DemoError(click.ClickException):
    """The demo could not be prepared (an operation or the simulator refused a step)."""


CreateInstance = Callable[[str], Awaitable[str]]


def demo_dashboard(env: dict[str, str], state_dir: Path) -> bool:
    """Turn rq-dashboard on for the demo: generated credentials in ``env``, unless the operator set any.

    The password is kept in ``state_dir/dashboard/password`` (owner-only), so a
    restart keeps it. Returns whether the credentials are the generated ones.
    """
    if env.get("SVCGW_DASHBOARD_USER") or env.get("SVCGW_DASHBOARD_PASSWORD"):
        return False
    directory = state_dir / "dashboard"
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    env["SVCGW_DASHBOARD_USER"] = DASHBOARD_USER
    env["SVCGW_DASHBOARD_PASSWORD"] = load_or_create_password(directory)
    return True


def prepare_demo(
    settings: Settings, *, dashboard_generated: bool = False, alive: Callable[[], bool] | None = None
) -> None:
    """Wait for the HTTP server, make sure the demo data exists, and print how to use it.

    A failing step is reported and the service keeps running.
    """
    try:
        wait_ready(settings, alive=alive)
        demo = ensure_demo(settings, create_instance=lambda key: _device_create(settings, key))
    except (DemoError, NotReady, httpx.HTTPError, RedisError, RedisClusterException, OSError, ValueError) as exc:
        print(f"svcgw demo: could not prepare the demo data: {_reason(exc)}", flush=True)
        return
    print(render_demo(demo, settings), flush=True)
    try:
        start_flow(settings, demo)
    except (DemoError, httpx.HTTPError, ValueError) as exc:
        print(f"svcgw demo: the simulator flow did not start: {_reason(exc)}", flush=True)
        return
    print(render_flow(demo, settings), flush=True)
    print(render_dead_letter(demo, settings), flush=True)
    print(render_onboarding(settings, dashboard_generated=dashboard_generated, demo=demo), flush=True)


def _reason(exc: Exception) -> str:
    return exc.format_message() if isinstance(exc, click.ClickException) else f"{type(exc).__name__}: {exc}"


def _checked(response: httpx.Response, what: str, *, started_ok: bool = False) -> dict[str, Any]:
    """The JSON answer of an operation through the gateway; a DemoError unless it succeeded."""
    try:
        answer = response.json()
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise DemoError(f"{what} answered HTTP {response.status_code} without a JSON object")
    message = str(answer.get("message", ""))
    if answer.get("code") == 0 or (started_ok and message.endswith("started")):
        return answer
    raise DemoError(f"{what} failed: code {answer.get('code')} {message!r} (HTTP {response.status_code})")


async def _device_create(settings: Settings, key: str) -> str:
    """A new instance, created through the gateway and so registered under the key's account."""
    async with httpx.AsyncClient(timeout=30, trust_env=False) as client:
        response = await client.post(
            f"{local_base(settings)}/svc/api/device/create",
            headers={"Svc-Key": key},
            json={"appid": "", "type": "iPad", "name": "demo", "version": 0},
        )
    data = _checked(response, "device/create").get("data")
    appid = data.get("appid") if isinstance(data, dict) else None
    if not isinstance(appid, str) or not appid:
        raise DemoError("device/create answered without an appid")
    return appid


def start_flow(settings: Settings, demo: Demo) -> None:
    """Log the instance in on the simulator, long/start it towards the sink, start some traffic."""
    sim = (settings.upstream_url or "").rstrip("/")
    if not sim:
        raise DemoError("SVCGW_UPSTREAM_URL is not set")
    with httpx.Client(timeout=30, trust_env=False) as client:
        # QR codes wait for the phone (/_sim/qr), so onboarding in the console can be walked step by step.
        configured = client.post(f"{sim}/_sim/config", json={"qr_auto": False})
        if configured.status_code != 200:
            raise DemoError(f"the simulator did not take its configuration: HTTP {configured.status_code}")
        state = client.get(f"{sim}/_sim/instances/{demo.appid}")
        if state.status_code == 404 or not state.json().get("loggedIn"):
            # Logged in, long connection closed: what long/start expects.
            seeded = client.post(f"{sim}/_sim/instances", json={"appid": demo.appid, "connected": False})
            if seeded.status_code != 201:
                raise DemoError(f"the simulator did not take the instance: HTTP {seeded.status_code} {seeded.text}")
        started = client.post(
            f"{local_base(settings)}/svc/api/long/start",
            headers={"Svc-Key": demo.key},
            json={"appid": demo.appid, "callbackUrl": f"{sim}/_sim/sink", "pushHistory": False},
        )
        _checked(started, "long/start", started_ok=True)
        run = client.post(f"{sim}/_sim/traffic", json={"appid": demo.appid, "rate": 1, "count": 3})
        if run.status_code != 202:
            raise DemoError(f"the simulator did not start traffic: HTTP {run.status_code} {run.text}")


def ensure_demo(settings: Settings, create_instance: CreateInstance | None = None) -> Demo:
    """The demo account, key and instance, created the first time and reused afterwards.

    ``create_instance(key)`` makes a new instance (through the gateway) and answers its
    appid; without it the instance is registered in the store directly.
    """
    if not settings.redis_configured:
        raise DemoError("SVCGW_REDIS_URL (or SVCGW_REDIS_SENTINELS, or SVCGW_REDIS_SHARDS) is not set")
    vault = TokenVault.from_settings(settings)

    async def run() -> Demo:
        # Shard 0's client and names (on a Cluster, its tag's), and a store that writes the copies
        # an instance's shard reads, as the administration commands have them.
        admin = Admin(settings)
        try:
            return await _ensure(admin.text, admin.store(sealing=True), vault, create_instance)
        finally:
            await admin.aclose()

    return asyncio.run(run())


async def _ensure(
    redis: AsyncRedis, store: Store, vault: TokenVault, create_instance: CreateInstance | None = None
) -> Demo:
    saved = cast(dict[str, str], await redis.hgetall(store.keys.demo))

    account_id = saved.get("account")
    if account_id:
        try:
            await store.get_account(account_id)
        except NotFound:
            account_id = None
    if not account_id:
        account_id = (await store.create_account(DEMO_ACCOUNT_NAME, devices=DEMO_DEVICES)).id
    login = (await store.get_account(account_id)).login
    if login is None:
        try:
            login = (await store.set_login(account_id, DEMO_LOGIN)).login
        except LoginTaken:
            login = None  # another account took it: the demo signs in with its key
    invitation = None
    if login is not None and not await Credentials(redis, store.keys).has_password(account_id):
        invitation = (await Invitations(redis, store.keys).issue(account_id, INVITATION_SECONDS)).token

    key_id, clear = saved.get("key_id"), None
    if key_id and saved.get("key"):
        try:
            api_key = await store.get_key(key_id)
            if api_key.revoked_at is None and api_key.account == account_id:
                clear = vault.open(saved["key"])
        except (NotFound, VaultError):
            clear = None
    if clear is None:
        api_key, clear = await store.create_key(account_id)
        key_id = api_key.id
    assert key_id is not None

    appid = saved.get("appid")
    token = None
    if appid and await store.owner(appid) == account_id:
        try:
            token = await store.receiver_token(appid)
        except (NotFound, VaultError):
            token = None
    if token is None and create_instance is not None:
        appid = await create_instance(clear)
        token = await store.receiver_token(appid)
    elif not appid or token is None:
        appid = appid if appid and await store.owner(appid) in (None, account_id) else None
        appid = appid or "we_" + "".join(secrets.choice(_APPID_ALPHABET) for _ in range(15))
        token = await store.register_instance(appid, account_id)

    await redis.hset(
        store.keys.demo,
        mapping={"account": account_id, "key_id": key_id, "key": vault.seal(clear), "appid": appid},
    )
    return Demo(
        account=account_id,
        key_id=key_id,
        key=clear,
        appid=appid,
        receiver_token=token,
        login=login,
        invitation=invitation,
    )
