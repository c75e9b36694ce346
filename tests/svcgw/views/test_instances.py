"""The instance view: one read of an instance, projected for its owner and for the operator."""

from __future__ import annotations

import asyncio
from typing import Any

from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from svcgw.config.settings import Settings
from svcgw.registry.store import Scope, Store
from svcgw.storage.keys import PLAIN as keys
from svcgw.vault import TokenVault
from svcgw.views import instances
from tests.conftest import provision
from tests.svcgw.delivery.test_deadletters import ingest


def views(settings: Settings, appids: list[str], **kwargs: Any) -> list[instances.InstanceView]:
    async def run() -> list[instances.InstanceView]:
        raw = AsyncRedis.from_url(settings.redis_url or "")
        text = AsyncRedis.from_url(settings.redis_url or "", decode_responses=True)
        try:
            store = Store(text, TokenVault.from_settings(settings), keys)
            return await instances.load_many(store, raw, keys, settings, appids, **kwargs)
        finally:
            await raw.aclose()
            await text.aclose()

    return asyncio.run(run())


def test_owner_and_operator_see_the_same_instance_their_own_way(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings, url="http://127.0.0.1:9/own", bearer="secret-bearer")
    redis.hset(
        keys.instance(tenant.appid),
        mapping={"status": "offline", "reason": "relogin", "since": "1700000000", "maintained": "1", "proxy": "p"},
    )
    ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"one"}]}')

    (view,) = views(settings, [tenant.appid], dead_letters=True, last_event=True)
    assert (view.appid, view.account, view.dead_letters) == (tenant.appid, tenant.account, 0)
    assert view.last_event_at is not None

    owner = view.for_owner()
    assert list(owner)[:3] == ["appid", "created_at", "status"]
    assert list(owner)[-3:] == ["forward_url", "forward_source", "last_event_at"]
    assert (owner["status"], owner["reason"], owner["maintained"]) == ("offline", "relogin", True)
    assert owner["since"].startswith("2023-11-14T")  # described: ISO 8601
    assert (owner["forward_url"], owner["forward_source"]) == ("http://127.0.0.1:9/own", "instance")

    operator = view.for_operator()
    assert list(operator)[:8] == [
        "appid", "account", "created_at", "status", "reason", "since", "last_probe", "next_probe",
    ]  # fmt: skip
    assert list(operator)[-3:] == ["forward_url", "forward_source", "dead_letters"]
    assert (operator["status"], operator["since"], operator["proxy"]) == ("offline", 1700000000.0, "p")  # a number
    text = repr(operator) + repr(owner)
    assert tenant.receiver_token not in text and "secret-bearer" not in text and "receiver_token" not in text


def test_without_an_address_and_without_a_record(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)

    async def clear() -> None:
        text = AsyncRedis.from_url(settings.redis_url or "", decode_responses=True)
        try:
            await Store(text, TokenVault.from_settings(settings), keys).clear_callback(Scope(account=tenant.account))
        finally:
            await text.aclose()

    asyncio.run(clear())
    (view,) = views(settings, [tenant.appid, "we_listed_but_gone"])
    assert view.dead_letters is None and view.last_event_at is None  # not asked for
    assert (view.for_owner()["forward_source"], view.for_operator()["forward_source"]) == (None, "none")
    assert view.for_owner()["status"] == "not_started" and view.for_operator()["status"] is None
