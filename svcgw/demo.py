"""``svcgw up --demo``: a demo account, API key and instance, ready to try.

Run once the HTTP server is up. It is idempotent: ``svcgw:demo`` remembers
the demo account, its key (sealed by the token vault, like every other
token at rest) and its instance, so every start prints the same ones. A
piece that is gone or unusable (a revoked key, a key sealed under another
encryption key) is made anew.
"""

from __future__ import annotations

import asyncio
import secrets
import shlex
import string
import time
from dataclasses import dataclass, field
from typing import cast

import click
import httpx
from redis.asyncio import Redis as AsyncRedis

from . import keys
from .admin import safe_redis_url
from .settings import Settings
from .store import NotFound, Store
from .vault import TokenVault, VaultError

__all__ = ["Demo", "DemoError", "ensure_demo", "prepare_demo", "render_demo", "wait_ready"]

DEMO_ACCOUNT_NAME = "demo"
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


def prepare_demo(settings: Settings) -> None:
    """Wait for the HTTP server, make sure the demo data exists, and print how to use it."""
    wait_ready(settings)
    demo = ensure_demo(settings)
    print(render_demo(demo, settings), flush=True)


def wait_ready(settings: Settings, timeout: float = 60.0) -> None:
    host = settings.host if settings.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    url = f"http://{host}:{settings.port}/readyz"
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


def ensure_demo(settings: Settings) -> Demo:
    """The demo account, key and instance, created the first time and reused afterwards."""
    if not settings.redis_url:
        raise DemoError("SVCGW_REDIS_URL is not set")
    redis_url = settings.redis_url
    vault = TokenVault.from_settings(settings)

    async def run() -> Demo:
        client = AsyncRedis.from_url(redis_url, decode_responses=True)
        try:
            return await _ensure(client, Store(client, vault), vault)
        finally:
            await client.aclose()

    return asyncio.run(run())


async def _ensure(redis: AsyncRedis, store: Store, vault: TokenVault) -> Demo:
    saved = cast(dict[str, str], await redis.hgetall(keys.DEMO))

    account_id = saved.get("account")
    if account_id:
        try:
            await store.get_account(account_id)
        except NotFound:
            account_id = None
    if not account_id:
        account_id = (await store.create_account(DEMO_ACCOUNT_NAME, devices=DEMO_DEVICES)).id

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
    if not appid or token is None:
        appid = appid if appid and await store.owner(appid) in (None, account_id) else None
        appid = appid or "we_" + "".join(secrets.choice(_APPID_ALPHABET) for _ in range(15))
        token = await store.register_instance(appid, account_id)

    await redis.hset(
        keys.DEMO,
        mapping={"account": account_id, "key_id": key_id, "key": vault.seal(clear), "appid": appid},
    )
    return Demo(account=account_id, key_id=key_id, key=clear, appid=appid, receiver_token=token)


def sample_event_body() -> str:
    """A Msg post as the capability layer sends it; its 19-digit id stays exact end to end."""
    event_id = 7_000_000_000_000_000_000 + time.time_ns() // 1000
    now = int(time.time())
    return (
        '{"event_type":"Msg","events":[{"id":' + str(event_id) + ',"messageType":0,"contentType":0,'
        '"fromUserId":1688850000000001,"toUserId":1688850000000002,"sendTime":' + str(now) + ","
        '"content":[{"type":0,"text":"hello from the svcgw demo"}]}]}'
    )


def render_demo(demo: Demo, settings: Settings) -> str:
    base = settings.public_url.rstrip("/")
    receiver = f"{base}/svc/receiver/{demo.appid}/{demo.receiver_token}"
    exports: list[str] = []
    if settings.redis_url and safe_redis_url(settings.redis_url) == settings.redis_url.split("?")[0]:
        exports.append(f"export SVCGW_REDIS_URL={shlex.quote(settings.redis_url)}")
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
