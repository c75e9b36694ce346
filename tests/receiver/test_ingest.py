"""The receiver against a real server process and a real Redis."""

from __future__ import annotations

import httpx
import orjson
from redis import Redis

from svcgw import keys
from svcgw.settings import Settings
from tests.conftest import provision


def post(url: str, body: bytes) -> httpx.Response:
    return httpx.post(url, content=body, headers={"Content-Type": "application/json"}, timeout=10)


def queued(redis: Redis) -> list[bytes]:
    return redis.lrange(keys.rq_queue("svcgw"), 0, -1)


def test_accepted_post_is_logged_raw_and_queued_as_one_delivery(
    settings: Settings, server: str, redis: Redis
) -> None:
    tenant = provision(settings)
    body = b'{"event_type":"Msg","events":[{"id":"m1","roomId":1688850000000000001234},{"id":"m2","v":1e2}]}'
    answer = post(tenant.receiver_url(server), body)
    assert answer.status_code == 200
    assert answer.json() == {"code": 0, "message": "ok", "data": {"accepted": 2, "duplicates": 0}}

    log = redis.xrange(keys.callback_log(tenant.appid))
    assert len(log) == 1 and log[0][1][b"body"] == body
    assert 0 < redis.ttl(keys.callback_log(tenant.appid)) <= settings.log_retention

    (delivery_id,) = queued(redis)
    record = redis.hgetall(keys.delivery(delivery_id.decode()))
    assert record[b"body"] == (
        b'{"appid":"' + tenant.appid.encode() + b'","event_type":"Msg","events":'
        b'[{"id":"m1","roomId":1688850000000000001234},{"id":"m2","v":1e2}]}'
    )
    # The delivery is a real RQ job that RQ itself can load.
    from rq.job import Job
    from rq.serializers import JSONSerializer

    job = Job.fetch(delivery_id.decode(), connection=redis, serializer=JSONSerializer)
    assert job.func_name == "worker.jobs.deliver" and job.args == [delivery_id.decode()]
    assert job.get_status() == "queued" and job.origin == "svcgw"


def test_duplicates_are_dropped_but_still_logged(settings: Settings, server: str, redis: Redis) -> None:
    tenant = provision(settings)
    first = post(tenant.receiver_url(server), b'{"event_type":"Msg","events":[{"id":"a"},{"id":"b"}]}')
    again = post(tenant.receiver_url(server), b'{"event_type":"Msg","events":[{"id":"b"},{"id":"c"}]}')
    assert first.json()["data"] == {"accepted": 2, "duplicates": 0}
    assert again.json()["data"] == {"accepted": 1, "duplicates": 1}
    bodies = [redis.hget(keys.delivery(i.decode()), "body") for i in queued(redis)]
    assert bodies[1] is not None and b'"id":"b"' not in bodies[1] and b'"id":"c"' in bodies[1]
    assert redis.xlen(keys.callback_log(tenant.appid)) == 2


def test_all_duplicate_post_queues_nothing(settings: Settings, server: str, redis: Redis) -> None:
    tenant = provision(settings)
    body = b'{"event_type":"GapClosed","events":[{"code":0}]}'
    assert post(tenant.receiver_url(server), body).json()["data"]["accepted"] == 1
    assert post(tenant.receiver_url(server), body).json()["data"] == {"accepted": 0, "duplicates": 1}
    assert len(queued(redis)) == 1


def test_same_event_id_on_two_instances_is_not_a_duplicate(
    settings: Settings, server: str, redis: Redis
) -> None:
    one, two = provision(settings), provision(settings)
    body = b'{"event_type":"Msg","events":[{"id":"shared"}]}'
    assert post(one.receiver_url(server), body).json()["data"]["accepted"] == 1
    assert post(two.receiver_url(server), body).json()["data"]["accepted"] == 1


def test_wrong_token_or_unknown_appid_is_404_and_stores_nothing(
    settings: Settings, server: str, redis: Redis
) -> None:
    tenant = provision(settings)
    body = b'{"event_type":"Msg","events":[{"id":"x"}]}'
    wrong_token = f"{server}/svc/receiver/{tenant.appid}/not-the-token"
    other_appid = f"{server}/svc/receiver/we_unknown0000000/{tenant.receiver_token}"
    for url in (wrong_token, other_appid):
        answer = post(url, body)
        assert answer.status_code == 404
        assert answer.json()["data"] is None
    assert queued(redis) == []
    assert redis.exists(keys.callback_log(tenant.appid)) == 0
    assert redis.keys("svcgw:dedup:*") == []


def test_bad_bodies_get_a_clear_4xx_and_nothing_is_stored(
    settings: Settings, server: str, redis: Redis
) -> None:
    tenant = provision(settings)
    url = tenant.receiver_url(server)
    cases = {
        b"{not json": 400,
        b"[]": 400,
        b'{"event_type":"Msg"}': 422,
        b'{"event_type":"Msg","events":"x"}': 422,
        b'{"appid":"we_other","event_type":"Msg","events":[]}': 422,
    }
    for body, status in cases.items():
        answer = post(url, body)
        assert answer.status_code == status, body
        assert answer.json()["message"]
    too_big = b'{"event_type":"Msg","events":[{"id":"big","pad":"' + b"x" * settings.max_body_bytes + b'"}]}'
    assert post(url, too_big).status_code == 413
    assert queued(redis) == []
    assert redis.exists(keys.callback_log(tenant.appid)) == 0


def test_matching_appid_in_body_is_accepted(settings: Settings, server: str, redis: Redis) -> None:
    tenant = provision(settings)
    body = orjson.dumps({"appid": tenant.appid, "event_type": "Msg", "events": [{"id": "1"}]})
    assert post(tenant.receiver_url(server), body).status_code == 200
