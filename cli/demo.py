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

It also prints how to walk through onboarding in the browser (a new
instance by QR login in the console, the simulator playing the phone: its
QR codes wait for ``/_sim/qr``), and turns on rq-dashboard at ``/rq``, by
which the service is monitored, with credentials generated into the state
dir (owner-only) the first time, printed on the terminal and nowhere else.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import shlex
import string
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast
from urllib.parse import unquote, urlsplit

import click
import httpx
from redis.asyncio import Redis as AsyncRedis
from redis.exceptions import RedisError

from receiver.console.account import invitation_path
from svcgw import keys
from svcgw.credentials import Credentials, LoginTaken
from svcgw.invitations import Invitations
from svcgw.settings import Settings
from svcgw.store import NotFound, Store
from svcgw.vault import TokenVault, VaultError

from .context import safe_redis_url
from .embedded import load_or_create_password

__all__ = [
    "DASHBOARD_USER",
    "Demo",
    "DemoError",
    "demo_dashboard",
    "ensure_demo",
    "prepare_demo",
    "render_demo",
    "render_flow",
    "render_onboarding",
    "start_flow",
    "wait_ready",
]

DEMO_ACCOUNT_NAME = "demo"
DEMO_LOGIN = "demo@example.com"
INVITATION_SECONDS = 24 * 3600
DASHBOARD_USER = "operator"
DEMO_DEVICES = 10
_APPID_ALPHABET = string.ascii_lowercase + string.digits


class DemoError(click.ClickException):
    """The demo could not be prepared (the HTTP server never became ready)."""


@dataclass(frozen=True)
class Demo:
    account: str
    key_id: str
    key: str = field(repr=False)
    appid: str
    receiver_token: str = field(repr=False)
    login: str | None = None
    # A one-time link to choose the console password, while the account has none.
    invitation: str | None = field(default=None, repr=False)


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


def prepare_demo(settings: Settings, *, dashboard_generated: bool = False) -> None:
    """Wait for the HTTP server, make sure the demo data exists, and print how to use it.

    A failing step is reported and the service keeps running.
    """
    try:
        wait_ready(settings)
        demo = ensure_demo(settings, create_instance=lambda key: _device_create(settings, key))
    except (DemoError, httpx.HTTPError, RedisError, OSError, ValueError) as exc:
        print(f"svcgw demo: could not prepare the demo data: {_reason(exc)}", flush=True)
        return
    print(render_demo(demo, settings), flush=True)
    try:
        start_flow(settings, demo)
    except (DemoError, httpx.HTTPError, ValueError) as exc:
        print(f"svcgw demo: the simulator flow did not start: {_reason(exc)}", flush=True)
        return
    print(render_flow(demo, settings), flush=True)
    print(render_onboarding(settings, dashboard_generated=dashboard_generated, demo=demo), flush=True)


def _reason(exc: Exception) -> str:
    return exc.format_message() if isinstance(exc, click.ClickException) else f"{type(exc).__name__}: {exc}"


def _api_base(settings: Settings) -> str:
    """The HTTP server as reached from this machine."""
    host = settings.host if settings.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{settings.port}"


def _sim_base(settings: Settings) -> str:
    return (settings.upstream_url or "").rstrip("/")


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
            f"{_api_base(settings)}/svc/api/device/create",
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
    sim = _sim_base(settings)
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
            f"{_api_base(settings)}/svc/api/long/start",
            headers={"Svc-Key": demo.key},
            json={"appid": demo.appid, "callbackUrl": f"{sim}/_sim/sink", "pushHistory": False},
        )
        _checked(started, "long/start", started_ok=True)
        run = client.post(f"{sim}/_sim/traffic", json={"appid": demo.appid, "rate": 1, "count": 3})
        if run.status_code != 202:
            raise DemoError(f"the simulator did not start traffic: HTTP {run.status_code} {run.text}")


def render_flow(demo: Demo, settings: Settings) -> str:
    sim = _sim_base(settings)
    more = json.dumps({"appid": demo.appid, "rate": 2, "count": 10}, separators=(",", ":"))
    lines = [
        f"Simulator flow for {demo.appid}:",
        f"  long/start registered {sim}/_sim/sink as the forward address;",
        "  the simulator is sending a few Msg events. Watch the signed callbacks arrive:",
        f"  curl -s {sim}/_sim/sink",
        "Signing secret (X-Svc-Signature is HMAC-SHA256 over timestamp + '.' + body):",
        f"  svcgw callback show --appid {demo.appid}",
        "Make the simulator send more:",
        f"  curl -s -X POST {sim}/_sim/traffic -d {shlex.quote(more)}",
        "",
    ]
    return "\n".join(lines)


def _sign_in_step(base: str, demo: Demo | None) -> list[str]:
    if demo is not None and demo.invitation is not None:
        return [
            f"  1. Open the invitation link (it works once, for {INVITATION_SECONDS // 3600} h), choose a password",
            f"     for the login {demo.login}, and you are signed in:",
            f"       {base}{invitation_path(demo.invitation)}",
            "     Under API keys, create a key of your own for your scripts.",
        ]
    if demo is not None and demo.login is not None:
        return [f"  1. Open {base}/console/ and sign in as {demo.login} with your password (or the API key above)."]
    return [f"  1. Open {base}/console/ and sign in with the API key above."]


def render_onboarding(settings: Settings, *, dashboard_generated: bool, demo: Demo | None = None) -> str:
    """How to walk through onboarding in the browser, and where the service is monitored."""
    base, sim = settings.public_url.rstrip("/"), _sim_base(settings)

    def phone(action: str, **extra: str) -> str:
        body = json.dumps({"appid": "APPID", "action": action, **extra}, separators=(",", ":"))
        return f"curl -s -X POST {sim}/_sim/qr -d {shlex.quote(body)}"

    def faults(**values: bool) -> str:
        body = json.dumps({"appid": "APPID", **values}, separators=(",", ":"))
        return f"curl -s -X POST {sim}/_sim/faults -d {shlex.quote(body)}"

    traffic = json.dumps({"appid": "APPID", "count": 1, "kinds": ["text"]}, separators=(",", ":"))
    lines = [
        "Onboarding in the browser (a new instance by QR login; the simulator plays the phone):",
        *_sign_in_step(base, demo),
        "  2. Instances > New instance. Callback address: the simulator's sink,",
        f"     {sim}/_sim/sink (leave the proxy empty), then Create.",
        "  3. The QR code is shown with the new instance's appid (APPID below). Play the phone:",
        f"       {phone('scan')}",
        "         (scanned: 1; then either confirm the login...)",
        f"       {phone('confirm')}",
        "         (...or ask for a six-digit code first, 10, and type it on the page)",
        f"       {phone('code', code='123456')}",
        "     The page follows by itself (it reloads every 2 seconds); a cancel offers a new code:",
        f"       {phone('cancel')}",
        "  4. The instance is online. Send it a message and watch it arrive signed at the sink:",
        f"       curl -s -X POST {sim}/_sim/traffic -d {shlex.quote(traffic)}; curl -s {sim}/_sim/sink",
        "  5. Lose the connection; within a probe interval (SVCGW_PROBE_INTERVAL) the instance is",
        "     offline and needs a re-login. Heal the phone's side, then press Re-login in the console:",
        f"       {faults(drop=True, reconnect_fails=True)}",
        f"       {faults(reconnect_fails=False)}",
        "",
    ]
    if settings.dashboard_user and settings.dashboard_password:
        lines.append(f"Monitoring: rq-dashboard at {base}/rq/ (HTTP Basic, read-only)")
        if dashboard_generated:
            # The one place these credentials are shown; they are kept owner-only in the state dir.
            lines += [
                f"  user           {settings.dashboard_user}",
                f"  password       {settings.dashboard_password}",
                f"  (kept in {(settings.state_dir / 'dashboard' / 'password').resolve()}, owner-only)",
            ]
        else:
            lines.append("  with your SVCGW_DASHBOARD_USER and SVCGW_DASHBOARD_PASSWORD")
        lines.append("")
    return "\n".join(lines)


def wait_ready(settings: Settings, timeout: float = 60.0) -> None:
    url = f"{_api_base(settings)}/readyz"
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise DemoError(f"the HTTP server did not become ready at {url} within {timeout:.0f}s")
        time.sleep(0.2)


def ensure_demo(settings: Settings, create_instance: CreateInstance | None = None) -> Demo:
    """The demo account, key and instance, created the first time and reused afterwards.

    ``create_instance(key)`` makes a new instance (through the gateway) and answers its
    appid; without it the instance is registered in the store directly.
    """
    if not settings.redis_url:
        raise DemoError("SVCGW_REDIS_URL is not set")
    redis_url = settings.redis_url
    vault = TokenVault.from_settings(settings)

    async def run() -> Demo:
        client = AsyncRedis.from_url(redis_url, decode_responses=True)
        try:
            return await _ensure(client, Store(client, vault), vault, create_instance)
        finally:
            await client.aclose()

    return asyncio.run(run())


async def _ensure(
    redis: AsyncRedis, store: Store, vault: TokenVault, create_instance: CreateInstance | None = None
) -> Demo:
    saved = cast(dict[str, str], await redis.hgetall(keys.DEMO))

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
    if login is not None and not await Credentials(redis).has_password(account_id):
        invitation = (await Invitations(redis).issue(account_id, INVITATION_SECONDS)).token

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
        keys.DEMO,
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


def sample_event_body() -> str:
    """A Msg post as the capability layer sends it; its 19-digit id stays exact end to end."""
    event_id = 7_000_000_000_000_000_000 + time.time_ns() // 1000
    now = int(time.time())
    return (
        '{"event_type":"Msg","events":[{"id":' + str(event_id) + ',"messageType":0,"contentType":0,'
        '"fromUserId":1688850000000001,"toUserId":1688850000000002,"sendTime":' + str(now) + ","
        '"content":[{"type":0,"text":"hello from the svcgw demo"}]}]}'
    )


def _embedded_password(redis_url: str, password_file: Path) -> bool:
    """Whether ``redis_url`` carries the password ``svcgw up`` generated into ``password_file``."""
    try:
        stored = password_file.read_text(encoding="utf-8").strip()
    except OSError:
        return False
    return bool(stored) and unquote(urlsplit(redis_url).password or "") == stored


def render_demo(demo: Demo, settings: Settings) -> str:
    base = settings.public_url.rstrip("/")
    receiver = f"{base}/svc/receiver/{demo.appid}/{demo.receiver_token}"
    exports: list[str] = []
    password_file = (settings.state_dir / "redis" / "password").resolve()
    if settings.redis_url and safe_redis_url(settings.redis_url) == settings.redis_url.split("?")[0]:
        exports.append(f"export SVCGW_REDIS_URL={shlex.quote(settings.redis_url)}")
    elif settings.redis_url and _embedded_password(settings.redis_url, password_file):
        # The embedded Redis's password stays in its file: the line reads it rather than showing it.
        parts = urlsplit(settings.redis_url)
        read_password = f"$(cat {shlex.quote(str(password_file))})"
        exports.append(f'export SVCGW_REDIS_URL="redis://:{read_password}@{parts.hostname}:{parts.port}/0"')
    else:
        exports.append("export SVCGW_REDIS_URL=...   # the Redis URL the service uses")
    if not settings.encryption_keys:
        # The admin command must seal a Bearer token with the same key file.
        exports.append(f"export SVCGW_STATE_DIR={shlex.quote(str(settings.state_dir.resolve()))}")
    if settings.allow_private_destinations:
        allowed = ",".join(str(net) for net in settings.allow_private_destinations)
        exports.append(f"export SVCGW_ALLOW_PRIVATE_DESTINATIONS={shlex.quote(allowed)}")
    lines = [
        "",
        "svcgw demo",
        f"  API base URL   {base}/svc/api/",
        f"  API key        {demo.key}   (header Svc-Key)",
        f"  account        {demo.account}",
        f"  appid          {demo.appid}",
        f"  receiver URL   {receiver}",
        "",
        "Post a test Msg event to the receiver (posting it twice answers duplicates: 1):",
        f"  curl -sS -X POST {shlex.quote(receiver)} -H 'Content-Type: application/json' \\",
        f"    --data {shlex.quote(sample_event_body())}",
        "",
        "Forward events to your endpoint, then watch the callback log and the dead letters:",
        *(f"  {line}" for line in exports),
        f"  svcgw callback set --appid {demo.appid} --url http://127.0.0.1:9000/hook",
        f"  svcgw log {demo.appid} --since 1h",
        "  svcgw dlq list",
        "",
    ]
    return "\n".join(lines)
