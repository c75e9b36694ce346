"""A post to a receiver fans out to the further destinations that take it, in the same script call.

Against the real app (the receiver wires the routing records' cache, svcgw.callbacks.routecache) and a
real Redis: which deliveries are written, their fields, the post's log entry's ``f``, the destinations'
indexes; a post no destination takes calls the script exactly as before; repeated events go nowhere.
"""

from __future__ import annotations

import json
import time
import zlib
from dataclasses import dataclass

import httpx
from redis import Redis

from receiver.app import create_app
from svcgw import deliveryid
from svcgw.config.settings import Settings
from svcgw.delivery.view import fanned_out
from svcgw.registry.destinations import DestinationConfig
from svcgw.registry.store import Scope
from svcgw.storage.keys import PLAIN as keys
from svcgw.storage.rqformat import FUNC_NAME
from tests.conftest import Tenant, provision
from tests.scriptkeys import ScriptCall, ScriptKeyWatch
from tests.support import ThreadedServer
from tests.svcgw.registry.test_destinations import add

# What one further destination's delivery adds to the script's commands: its one hash (its fields and
# RQ's, as the primary's), its place in the queue, its entry in its destination's index (trimmed), expired.
FANNED_COMMANDS = [b"HSET", b"RPUSH", b"XADD", b"EXPIRE"]


@dataclass(frozen=True)
class Customer:
    tenant: Tenant
    every: DestinationConfig  # A: every type
    messages: DestinationConfig  # B: Msg only
    offline: DestinationConfig  # C: InstanceOffline only


def customer(settings: Settings, appid: str = "") -> Customer:
    tenant = provision(settings, url="http://127.0.0.1:9/primary", appid=appid)
    scope = Scope(account=tenant.account)
    every = add(settings, scope, "http://127.0.0.1:9/archive")
    messages = add(settings, scope, "http://127.0.0.1:9/crm", event_types=["Msg"])
    offline = add(settings, scope, "http://127.0.0.1:9/oncall", event_types=["InstanceOffline"])
    return Customer(tenant, every, messages, offline)


def post(server: str, tenant: Tenant, body: bytes) -> dict[str, int]:
    answer = httpx.post(tenant.receiver_url(server), content=body, timeout=10)
    assert answer.status_code == 200, answer.text
    data: dict[str, int] = answer.json()["data"]
    return data


def queued(redis: Redis) -> list[str]:
    return [i.decode() for i in redis.lrange(keys.rq.queue("svcgw"), 0, -1)]


def last_entry(redis: Redis, appid: str) -> tuple[str, dict[bytes, bytes]]:
    ((entry_id, fields),) = redis.xrevrange(keys.callback_log(appid), count=1)
    return entry_id.decode(), fields


def fanned(fields: dict[bytes, bytes], primary: str = "") -> list[tuple[str, str]]:
    """The ``(delivery id, destination id)`` of the entry's field f (its destinations, the ids following from
    the primary's; or ``dlv_`` pairs)."""
    return fanned_out(fields[b"f"], primary)


def test_a_msg_post_goes_to_the_primary_and_the_two_destinations_that_take_msg(
    settings: Settings, server: str, redis: Redis
) -> None:
    c = customer(settings)
    body = b'{"event_type":"Msg","events":[{"id":"m1","roomId":1688850000000000001234},{"id":"m2"}]}'
    before = time.time()
    assert post(server, c.tenant, body) == {"accepted": 2, "duplicates": 0}

    primary, *others = queued(redis)
    entry_id, entry = last_entry(redis, c.tenant.appid)
    assert primary == f"{c.tenant.appid}-{entry_id}"
    # Routing order: the account's destinations taking every type, then Msg's; C takes none of it.
    pairs = fanned(entry, primary)
    # The entry names the destinations alone: each delivery's id is the primary's and its destination's.
    assert entry[b"f"].decode() == f"{c.every.id} {c.messages.id}"
    assert [destination for _, destination in pairs] == [c.every.id, c.messages.id]
    assert [delivery for delivery, _ in pairs] == others
    assert entry[b"body"] == body and set(entry) == {b"body", b"f"}

    forwarded = redis.hget(keys.delivery(primary), "body")
    received_ms = int(entry_id.split("-")[0])
    assert before * 1000 - 1 <= received_ms <= time.time() * 1000 + 1
    for delivery_id, destination in pairs:
        assert delivery_id == f"{primary}_{destination.removeprefix('dst_')}"
        assert deliveryid.parse_destination(delivery_id) == (c.tenant.appid, entry_id, destination)
        # One hash, as the primary's: RQ's lean fields and the delivery's, the call deliver(delivery_id).
        assert keys.delivery(delivery_id) == keys.rq.job(delivery_id)
        record = redis.hgetall(keys.rq.job(delivery_id))
        assert json.loads(zlib.decompress(record.pop(b"data"))) == [FUNC_NAME, None, [delivery_id], {}]
        assert record.pop(b"created_at")
        assert {k.decode(): v.decode() for k, v in record.items()} == {
            "origin": "svcgw",
            "status": "queued",
            "appid": c.tenant.appid,
            "account": c.tenant.account,
            "event_type": "Msg",
            "body": forwarded.decode() if forwarded else None,
        }  # its destination is its id's, as its post is
        assert redis.exists(f"svcgw:delivery:{delivery_id}") == 0
        # In its destination's index, an entry naming the primary (its id follows), expiring with the log.
        index = keys.destination_deliveries(destination)
        ((index_entry, index_fields),) = redis.xrange(index)
        assert index_fields == {b"d": primary.encode()}
        assert abs(int(index_entry.split(b"-")[0]) - received_ms) < 5000
        assert 0 < redis.ttl(index) <= settings.log_retention
    assert redis.exists(keys.destination_deliveries(c.offline.id)) == 0

    # An InstanceOffline-typed post goes to A and C.
    post(server, c.tenant, b'{"event_type":"InstanceOffline","events":[{"id":"o1"}]}')
    entry_id, entry = last_entry(redis, c.tenant.appid)
    assert [destination for _, destination in fanned(entry, f"{c.tenant.appid}-{entry_id}")] == [
        c.every.id, c.offline.id,
    ]  # fmt: skip
    assert redis.xlen(keys.destination_deliveries(c.every.id)) == 2
    assert redis.xlen(keys.destination_deliveries(c.messages.id)) == 1
    assert len(queued(redis)) == 6


def test_an_instances_own_destinations_follow_its_accounts_and_disabled_ones_take_nothing(
    env: dict[str, str], redis: Redis
) -> None:
    settings = Settings.from_env(dict(env, SVCGW_ROUTES_CACHE_SECONDS="0"))
    c = customer(settings)
    own = add(settings, Scope(appid=c.tenant.appid), "http://127.0.0.1:9/own", event_types=["Msg"])
    add(settings, Scope(appid=c.tenant.appid), "http://127.0.0.1:9/off", enabled=False)
    served = ThreadedServer(create_app(settings)).start()
    try:
        post(served.base, c.tenant, b'{"event_type":"Msg","events":[{"id":"a"}]}')
    finally:
        served.stop()
    entry_id, entry = last_entry(redis, c.tenant.appid)
    assert [destination for _, destination in fanned(entry, f"{c.tenant.appid}-{entry_id}")] == [
        c.every.id, c.messages.id, own.id,
    ]  # fmt: skip


def test_duplicates_go_to_no_destination_and_a_post_of_duplicates_only_fans_out_to_none(
    settings: Settings, server: str, redis: Redis
) -> None:
    c = customer(settings)
    assert post(server, c.tenant, b'{"event_type":"Msg","events":[{"id":"a"},{"id":"b"}]}')["accepted"] == 2
    assert post(server, c.tenant, b'{"event_type":"Msg","events":[{"id":"b"},{"id":"c"}]}') == {
        "accepted": 1, "duplicates": 1,
    }  # fmt: skip
    entry_id, entry = last_entry(redis, c.tenant.appid)
    for delivery_id, _ in fanned(entry, f"{c.tenant.appid}-{entry_id}"):
        record = redis.hgetall(keys.delivery(delivery_id))
        assert record[b"body"].endswith(b'"events":[{"id":"c"}]}')
        assert record[b"dup"] == b"1"  # as the primary's: the post's duplicates
    indexes = {d.id: redis.xlen(keys.destination_deliveries(d.id)) for d in (c.every, c.messages)}
    assert indexes == {c.every.id: 2, c.messages.id: 2}

    assert post(server, c.tenant, b'{"event_type":"Msg","events":[{"id":"a"},{"id":"c"}]}') == {
        "accepted": 0, "duplicates": 2,
    }  # fmt: skip
    _, entry = last_entry(redis, c.tenant.appid)
    assert b"f" not in entry and entry[b"x"] == b"0:2"
    assert {d.id: redis.xlen(keys.destination_deliveries(d.id)) for d in (c.every, c.messages)} == indexes
    assert len(queued(redis)) == 6  # two posts, three deliveries each; nothing for the third


def test_an_appid_of_the_older_id_form_fans_out_from_its_dlv_primary(
    settings: Settings, server: str, redis: Redis
) -> None:
    c = customer(settings, appid="we.older-form")
    post(server, c.tenant, b'{"event_type":"Msg","events":[{"id":"a"}]}')
    primary, *others = queued(redis)
    _, entry = last_entry(redis, c.tenant.appid)
    assert primary.startswith("dlv_") and entry[b"delivery"].decode() == primary
    assert [delivery for delivery, _ in fanned(entry)] == others and len(others) == 2
    assert all(d.startswith("dlv_") for d in others)
    assert {redis.hget(keys.delivery(d), "primary") for d in others} == {primary.encode()}
    # A service event's kind of delivery: a delivery hash and a job hash of its own.
    assert all(redis.exists(keys.rq.job(d)) and keys.delivery(d) != keys.rq.job(d) for d in others)


def _ingest_calls(watch: ScriptKeyWatch) -> list[ScriptCall]:
    return [call for call in watch.calls() if call.name == "ingest"]


def test_a_post_no_destination_takes_calls_the_script_as_before_and_every_key_is_named(
    settings: Settings, server: str, redis: Redis, redis_url: str
) -> None:
    plain = provision(settings, url="http://127.0.0.1:9/primary")
    c = customer(settings)
    # Each instance's first post (its records read, the queue and scripts in place), then the ones watched.
    for tenant in (plain, c.tenant):
        post(server, tenant, b'{"event_type":"Msg","events":[{"id":"warm"}]}')
    body = b'{"event_type":"Msg","events":[{"id":"x1"},{"code":0}]}'
    with ScriptKeyWatch(redis_url) as watch:
        post(server, plain, body)
        post(server, c.tenant, body)
    alone, fanning = _ingest_calls(watch)
    assert watch.undeclared() == []

    # EVALSHA sha numkeys KEYS... ARGV...: without destinations, the 7 keys and the window's; the job
    # field count alone in ARGV[12]; the job fields, then the events (two arguments each) to the end.
    numkeys = int(alone.call[2])
    assert all(key.startswith(b"svcgw:dd:") for key in alone.call[3 + 7 : 3 + numkeys]), alone.call
    args = alone.call[3 + numkeys :]
    nfields = int(args[11])
    assert len(args) == 13 + 2 * nfields + 2 * 2
    # With two destinations: three keys (the hash named twice, the index) and a job's arguments more for
    # each, their count after a space.
    assert int(fanning.call[2]) == numkeys + 2 * 3
    fanning_args = fanning.call[3 + numkeys + 6 :]
    assert fanning_args[11] == b"%d 2" % nfields
    fields = int(fanning_args[13 + 2 * nfields])
    assert len(fanning_args) == len(args) + 1 + 2 * (2 + 2 * fields)
    # The same commands as the post that fanned out, less its destinations' own.
    names = [command[0].upper() for command in alone.inner]
    fanned_names = [command[0].upper() for command in fanning.inner]
    assert fanned_names.count(b"XADD") == names.count(b"XADD") + 2
    hset_at = fanned_names.index(b"RPUSH") + 1  # the primary's HSET and RPUSH come first
    assert fanned_names[hset_at : hset_at + 8] == FANNED_COMMANDS * 2
    assert fanned_names[:hset_at] + fanned_names[hset_at + 8 :] == names
    _, entry = last_entry(redis, plain.appid)
    assert b"f" not in entry
