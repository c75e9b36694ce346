"""The copies instances' shards hold of further destinations: the routing record and the hashes, kept in step.

Unit tests on fakeredis, one server per shard; the copies on real ``redis-server`` shards are in
``tests/deploy/test_shard_parts.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import fakeredis
from cryptography.fernet import Fernet

from svcgw.callbacks.addresses import CallbackUrl
from svcgw.registry.copies import ShardCopies
from svcgw.registry.destinations import DestinationChange
from svcgw.registry.store import Scope, Store
from svcgw.storage.keys import KeySpace
from svcgw.vault import TokenVault

URL = CallbackUrl("http://hooks.example.com/in", "http", "hooks.example.com", 80, ("93.184.216.34",))
OTHER = CallbackUrl("https://archive.example.com/in", "https", "archive.example.com", 443, ("93.184.216.35",))


def three_shards(spaces: tuple[KeySpace, ...]) -> tuple[Store, list[Any]]:
    clients = [fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer(), decode_responses=True) for _ in spaces]
    store = Store(clients[0], TokenVault([Fernet.generate_key().decode()]), spaces[0])
    store.copies = ShardCopies(clients, spaces)
    return store, clients


async def _scenario(spaces: tuple[KeySpace, ...]) -> None:
    store, clients = three_shards(spaces)
    account = (await store.create_account("copies")).id
    await store.register_instance("we_on_two", account, 2)
    shared = await store.add_destination(Scope(account=account), URL, event_types=["Msg"])
    own = await store.add_destination(Scope(appid="we_on_two"), OTHER, bearer_token="t0ken-for-the-archive")

    async def hashes(shard: int, name: Callable[[KeySpace], str]) -> dict[str, str]:
        return dict(await clients[shard].hgetall(name(spaces[shard])))

    registry_shared = await hashes(0, lambda k: k.destination(shared.id))
    registry_own = await hashes(0, lambda k: k.destination(own.id))
    # An account's: on every shard. An instance's: on its shard only.
    for shard in (1, 2):
        assert await hashes(shard, lambda k: k.destination(shared.id)) == registry_shared
        assert await hashes(shard, lambda k: k.routes_account(account)) == {"Msg": shared.id}
    assert await hashes(2, lambda k: k.destination(own.id)) == registry_own
    assert await hashes(2, lambda k: k.routes_instance("we_on_two")) == {"*": own.id}
    assert await hashes(1, lambda k: k.destination(own.id)) == {}
    assert await hashes(1, lambda k: k.routes_instance("we_on_two")) == {}

    # Every change follows: disabled, rotated, removed.
    await store.update_destination(own.id, DestinationChange(enabled=False))
    assert await hashes(2, lambda k: k.routes_instance("we_on_two")) == {}
    assert (await hashes(2, lambda k: k.destination(own.id)))["enabled"] == "0"
    rotated = await store.rotate_destination_secret(shared.id)
    for shard in (1, 2):
        copied = await hashes(shard, lambda k: k.destination(shared.id))
        assert copied == await hashes(0, lambda k: k.destination(shared.id))
        assert store.vault.open(copied["secret"]) == rotated.secret != shared.secret
    await store.remove_destination(shared.id)
    for shard in (0, 1, 2):
        assert await hashes(shard, lambda k: k.destination(shared.id)) == {}
        assert await hashes(shard, lambda k: k.routes_account(account)) == {}
    for client in clients:
        await client.aclose()


def test_copies_on_separate_deployments() -> None:
    plain = KeySpace()
    asyncio.run(_scenario((plain, plain, plain)))


def test_copies_on_a_clusters_virtual_shards_carry_each_shards_names() -> None:
    asyncio.run(_scenario((KeySpace("{s0}"), KeySpace("{s1}"), KeySpace("{s2}"))))
