"""Deliveries in the console: the JSON API and the pages, retry now, replay since, the failing and probing banners."""

from __future__ import annotations

import time

import httpx
from redis import Redis

from svcgw.config.settings import Settings
from svcgw.delivery import breaker
from svcgw.delivery.failingorigins import name, origin_of, parse
from svcgw.registry.store import Scope, Store
from svcgw.storage.keys import PLAIN as keys
from tests.conftest import Tenant, with_store
from tests.receiver.console.conftest import ConsoleClient, Developer, make_developer, serve
from tests.receiver.console.test_pages import csrf_of, signed_in
from tests.support import Received, Sink, ThreadedWorker, is_delivered, wait_for
from tests.svcgw.delivery.test_deadletters import ingest, kill
from tests.svcgw.delivery.test_listing import deliver_now, fail_once
from tests.worker.support import add_destination

NO_DELIVERY = {"code": -40404, "message": "no such delivery", "data": None}


def tenant_of(developer: Developer, index: int = 0) -> Tenant:
    appid = developer.appids[index]
    return Tenant(developer.account, appid, developer.receiver_tokens[appid])


def post(settings: Settings, tenant: Tenant, event_id: str, event_type: str = "Msg") -> str:
    return ingest(settings, tenant, f'{{"event_type":"{event_type}","events":[{{"id":"{event_id}"}}]}}'.encode())


def test_deliveries_listed_filtered_and_shown_only_to_their_account(
    console: ConsoleClient, developer: Developer, stranger: Developer, settings: Settings
) -> None:
    mine = tenant_of(developer)
    retrying = post(settings, mine, "e1")
    fail_once(settings, retrying, mine.appid)
    pending = post(settings, mine, "e2", "Offline")
    theirs = post(settings, tenant_of(stranger), "t1")

    answer = console.get(f"/instances/{mine.appid}/deliveries")
    assert answer.status_code == 200 and answer.headers["cache-control"] == "no-store"
    page = answer.json()["data"]
    assert [d["id"] for d in page["deliveries"]] == [pending, retrying] and page["next_before"] is None
    shown = page["deliveries"][1]
    assert shown["state"] == "retrying" and shown["event_ids"] == ["e1"] and shown["next_attempt_at"] > time.time()
    assert shown["attempts"][0]["status"] == 503 and len(shown["attempts"][0]["response"]) == 1024

    def ids(query: str) -> list[str]:
        found = console.get(f"/instances/{mine.appid}/deliveries?{query}").json()["data"]["deliveries"]
        return [d["id"] for d in found]

    assert ids("state=retrying") == [retrying]
    assert ids("state=pending&event_type=Offline") == [pending]
    assert ids("event_id=e1") == [retrying]
    assert ids("event_id=e1&state=pending") == []
    first = console.get(f"/instances/{mine.appid}/deliveries?limit=1").json()["data"]
    assert console.get(f"/instances/{mine.appid}/deliveries?limit=1&before={first['next_before']}").json()["data"][
        "deliveries"
    ][0]["id"] == retrying
    for bad in ("state=lost", "limit=0", "before=garbage"):
        refused = console.get(f"/instances/{mine.appid}/deliveries?{bad}")
        assert refused.status_code == 400 and refused.json()["code"] == -40000

    assert console.get(f"/deliveries/{retrying}").json()["data"] == shown
    # Another account's instance and delivery answer exactly like unknown ones.
    other = console.get(f"/instances/{stranger.appids[0]}/deliveries")
    unknown = console.get("/instances/we_unknown/deliveries")
    assert other.status_code == unknown.status_code == 404 and other.json() == unknown.json()
    assert console.get(f"/deliveries/{theirs}").json() == NO_DELIVERY
    assert console.get("/deliveries/dlv_000000000000000000000000").json() == NO_DELIVERY


def test_retry_now_needs_the_csrf_token_and_a_retrying_delivery_of_the_account(
    console: ConsoleClient, developer: Developer, stranger: Developer, settings: Settings, redis: Redis
) -> None:
    mine = tenant_of(developer)
    retrying = post(settings, mine, "r1")
    fail_once(settings, retrying, mine.appid)
    theirs = post(settings, tenant_of(stranger), "t1")
    fail_once(settings, theirs, stranger.appids[0])

    forged = console.change("POST", f"/deliveries/{retrying}/retry", csrf=False)
    assert forged.status_code == 403 and forged.json()["code"] == -40310
    assert redis.zscore(keys.rq.scheduled("svcgw"), retrying) is not None  # untouched

    stolen = console.change("POST", f"/deliveries/{theirs}/retry")
    assert stolen.status_code == 404 and stolen.json() == NO_DELIVERY
    assert redis.zscore(keys.rq.scheduled("svcgw"), theirs) is not None

    done = console.change("POST", f"/deliveries/{retrying}/retry")
    assert done.status_code == 200 and done.json()["data"]["id"] == retrying
    assert redis.lrange(keys.rq.queue("svcgw"), 0, 0) == [retrying.encode()]  # next in line
    again = console.change("POST", f"/deliveries/{retrying}/retry")
    assert again.status_code == 409 and again.json()["code"] == -40900 and "being attempted" in again.json()["message"]
    pending = post(settings, mine, "p1")
    refused = console.change("POST", f"/deliveries/{pending}/retry")
    assert refused.status_code == 409 and "pending" in refused.json()["message"]


def test_replay_since_is_per_account(
    console: ConsoleClient, developer: Developer, stranger: Developer, settings: Settings, redis: Redis
) -> None:
    now = time.time()
    mine = [kill(settings, tenant_of(developer, i), f"m{i}", died_at=now) for i in range(2)]
    old = kill(settings, tenant_of(developer), "old", died_at=now)
    redis.hset(keys.delivery(old), "dead_at", repr(now - 3 * 3600))
    theirs = kill(settings, tenant_of(stranger), "t1", died_at=now)

    answer = console.change("POST", "/dead-letters/replay", {"since": "2h"}).json()["data"]
    assert answer["replayed"] == 2 and {r["id"] for r in answer["results"]} == set(mine)
    assert redis.zscore(keys.rq.failed("svcgw"), theirs) is not None
    assert redis.zscore(keys.rq.failed("svcgw"), old) is not None
    one = console.change("POST", "/dead-letters/replay", {"since": "4h", "appid": developer.appids[0]}).json()
    assert [r["id"] for r in one["data"]["results"]] == [old]
    elsewhere = console.change("POST", "/dead-letters/replay", {"since": "1d", "appid": stranger.appids[0]})
    assert elsewhere.status_code == 404
    assert console.change("POST", "/dead-letters/replay", {"since": "soon"}).status_code == 400
    assert console.change("POST", "/dead-letters/replay", {"since": "1h", "ids": [theirs]}).status_code == 400
    assert redis.zscore(keys.rq.failed("svcgw"), theirs) is not None


def _failing(redis: Redis, account: str, url: str, seconds_ago: float) -> None:
    """What the finish script keeps while every attempt of ``account``'s to ``url``'s origin fails."""
    now = time.time()
    redis.hset(keys.failing_origins, name(account, origin_of(url)), f"{now - seconds_ago}:{now - 1}:1")


def test_pages_list_deliveries_retry_now_and_show_the_failing_banner(
    server: str, developer: Developer, stranger: Developer, settings: Settings, redis: Redis
) -> None:
    mine = tenant_of(developer)
    retrying = post(settings, mine, "r1")
    fail_once(settings, retrying, mine.appid)
    delivered_later = post(settings, mine, "p1")
    http, csrf = signed_in(server, developer.key)
    try:
        page = http.get(f"/console/instances/{mine.appid}/deliveries")
        assert page.status_code == 200 and "<script" not in page.text
        assert retrying in page.text and delivered_later in page.text and "HTTP 503" in page.text
        assert page.text.count('class="inline retry-now"') == 1  # only the retrying one
        only = http.get(f"/console/instances/{mine.appid}/deliveries", params={"state": "pending"})
        assert delivered_later in only.text and retrying not in only.text
        assert http.get(f"/console/instances/{stranger.appids[0]}/deliveries").status_code == 404
        detail = http.get(f"/console/deliveries/{retrying}")
        assert detail.status_code == 200 and "Retry now" in detail.text

        forged = http.post(f"/console/deliveries/{retrying}/retry", data={"csrf_token": "nope"})
        assert forged.status_code == 403
        back = f"/console/instances/{mine.appid}/deliveries?state=retrying"
        done = http.post(f"/console/deliveries/{retrying}/retry", data={"csrf_token": csrf, "next": back})
        assert done.status_code == 303 and done.headers["location"] == back
        assert "Queued for its next attempt now" in http.get(back).text
        again = http.post(f"/console/deliveries/{retrying}/retry", data={"csrf_token": csrf})
        assert again.status_code == 303 and "Not retried" in http.get(again.headers["location"]).text

        # The banner: on every page of the account, naming the instance on its own page.
        assert 'id="failing-banner"' not in http.get("/console/instances").text
        redis.hset(keys.callback_account(developer.account), "url", "https://down.example/hook")
        # The stranger's address is on the same host: the developer's failures there are not the stranger's.
        redis.hset(keys.callback_account(stranger.account), "url", "https://down.example/theirs")
        _failing(redis, developer.account, "https://down.example/other", seconds_ago=settings.failing_after + 60)
        for path in ("/console/instances", "/console/dead-letters", "/console/settings"):
            shown = http.get(path).text
            assert 'id="failing-banner"' in shown and "https://down.example:443" in shown, path
        assert "including this instance" in http.get(f"/console/instances/{mine.appid}").text
        fresh = httpx.Client(base_url=server, timeout=10)
        try:
            assert "failing-banner" not in fresh.get("/console/login").text
        finally:
            fresh.close()
        stranger_http, _ = signed_in(server, stranger.key)
        try:
            assert 'id="failing-banner"' not in stranger_http.get("/console/instances").text
            assert stranger_http.get("/console/api/failing-destinations").json()["data"]["failing"] == []
        finally:
            stranger_http.close()

        listed = http.get("/console/api/failing-destinations").json()["data"]["failing"]
        assert [f["destination"] for f in listed] == ["https://down.example:443"]
        assert set(listed[0]["appids"]) == set(developer.appids)

        # Replay since, from the dead letters page (with nothing else queued).
        redis.delete(keys.rq.queue("svcgw"))
        letter = kill(settings, mine, "d1", died_at=time.time())
        form = http.get("/console/dead-letters").text
        assert 'id="replay-since-form"' in form
        replayed = http.post(
            "/console/dead-letters/replay", data={"csrf_token": csrf_of(form), "scope": "since", "since": "1h"}
        )
        assert replayed.status_code == 303
        assert "1 dead letter of your instances that died in the last 1h" in http.get("/console/dead-letters").text
        assert redis.zscore(keys.rq.failed("svcgw"), letter) is None
        bad = http.post("/console/dead-letters/replay", data={"csrf_token": csrf, "scope": "since", "since": "x"})
        assert bad.status_code == 400
    finally:
        http.close()


def test_a_delivered_delivery_shows_its_bare_outcome_and_says_what_is_kept(
    server: str, console: ConsoleClient, developer: Developer, settings: Settings
) -> None:
    mine = tenant_of(developer)
    deliver_now(settings, delivered := post(settings, mine, "d1"), mine.appid)
    shown = console.get(f"/deliveries/{delivered}").json()["data"]
    assert shown["state"] == "delivered" and shown["event_ids"] == ["d1"]
    assert [(a["status"], a["response"], a["destination"]) for a in shown["attempts"]] == [(200, "", None)]
    listed = console.get(f"/instances/{mine.appid}/deliveries?state=delivered").json()["data"]["deliveries"]
    assert listed == [shown]
    http, _ = signed_in(server, developer.key)
    try:
        detail = http.get(f"/console/deliveries/{delivered}")
        assert detail.status_code == 200 and "kept only for deliveries that did not succeed" in detail.text
    finally:
        http.close()


def test_a_destination_being_probed_has_a_banner_on_the_accounts_pages_and_in_the_api(
    server: str, console: ConsoleClient, developer: Developer, stranger: Developer, settings: Settings, redis: Redis
) -> None:
    # The record as the worker's finish script writes it (svcgw.delivery.breaker): timing out.
    mine = tenant_of(developer)
    redis.hset(keys.callback_instance(mine.appid), "url", "https://slow.example/hook")
    # The stranger's instance goes to another path of the same host: the records are each account's.
    redis.hset(keys.callback_instance(stranger.appids[0]), "url", "https://slow.example/other-hook")
    field = breaker.name(mine.account, "https://slow.example:443")
    now = time.time()
    http, _ = signed_in(server, developer.key)
    try:
        assert 'id="probing-banner"' not in http.get("/console/instances").text
        redis.hset(keys.breakers, field, f"1:{now - 30}:{now - 1}:t:")
        for path in ("/console/instances", "/console/dead-letters", f"/console/instances/{mine.appid}"):
            shown = http.get(path).text
            assert 'id="probing-banner"' in shown and "https://slow.example:443" in shown, path
            assert "1 attempt at a time per worker" in shown
        assert "this instance's included" in http.get(f"/console/instances/{mine.appid}").text
        listed = console.get("/probing-destinations").json()["data"]["probing"]
        assert [(p["destination"], p["attempts_in_flight"], p["answering"]) for p in listed] == [
            ("https://slow.example:443", 1, False)
        ]
        assert listed[0]["appids"] == [mine.appid]
        assert console.get("/probing-destinations", params={"appid": mine.appid}).json()["data"]["probing"]
        assert console.get("/probing-destinations", params={"appid": stranger.appids[0]}).status_code == 404
        # Answering again, it opens up; back at its caps, no banner.
        redis.hset(keys.breakers, field, f"4:{now - 30}:{now}:a:{now}")
        assert "it answers again" in http.get("/console/instances").text
        redis.hset(keys.breakers, field, f"16:{now - 30}:{now}:o:{now}")
        assert 'id="probing-banner"' not in http.get("/console/instances").text
        stranger_http, _ = signed_in(server, stranger.key)
        try:
            redis.hset(keys.breakers, field, f"1:{now - 30}:{now}:t:")
            assert 'id="probing-banner"' not in stranger_http.get("/console/instances").text
            # Not even in the form of an earlier version, named by the origin alone.
            redis.hset(keys.breakers, "https://slow.example:443", f"1:{now - 30}:{now}:t:")
            assert 'id="probing-banner"' not in stranger_http.get("/console/instances").text
        finally:
            stranger_http.close()
    finally:
        http.close()


def test_a_further_destination_being_probed_has_the_banner_and_is_in_the_api(
    server: str, console: ConsoleClient, developer: Developer, stranger: Developer, settings: Settings, redis: Redis
) -> None:
    mine = tenant_of(developer)
    archive = add_destination(settings, Scope(account=developer.account), "http://127.0.0.1:9/archive")
    own = add_destination(settings, Scope(appid=mine.appid), "http://127.0.0.1:9/own")
    origin = "http://127.0.0.1:9"
    now = time.time()
    http, _ = signed_in(server, developer.key)
    try:
        assert 'id="probing-banner"' not in http.get("/console/instances").text
        # The record as the worker's finish script writes it for an attempt to that address: timing out.
        redis.hset(keys.breakers, breaker.name(mine.account, origin), f"1:{now - 30}:{now - 1}:t:")
        for path in ("/console/instances", f"/console/instances/{mine.appid}", f"/console/destinations/{archive.id}"):
            shown = http.get(path).text
            assert 'id="probing-banner"' in shown and origin in shown, path
            assert f'href="/console/destinations/{archive.id}"' in shown and own.id in shown, path
        (listed,) = console.get("/probing-destinations").json()["data"]["probing"]
        assert listed["destination"] == origin and listed["appids"] == []
        assert listed["destinations"] == [archive.id, own.id]
        (of_instance,) = console.get("/probing-destinations", params={"appid": mine.appid}).json()["data"]["probing"]
        assert of_instance["destinations"] == [archive.id, own.id]
        # Another instance of the account takes the account's destination, not the first one's own.
        (other,) = console.get("/probing-destinations", params={"appid": developer.appids[1]}).json()["data"]["probing"]
        assert other["destinations"] == [archive.id]
        stranger_http, _ = signed_in(server, stranger.key)
        try:
            assert 'id="probing-banner"' not in stranger_http.get("/console/instances").text
            assert stranger_http.get("/console/api/probing-destinations").json()["data"]["probing"] == []
        finally:
            stranger_http.close()
    finally:
        http.close()


def _by_path(post: Received, earlier: list[Received]) -> tuple[int, float]:
    """A host where many customers' endpoints live: the paths under /failing/ answer 500, the others 200."""
    return (500 if post.path.startswith("/failing/") else 200), 0.0


def test_one_accounts_failures_at_a_shared_host_are_neither_shown_to_nor_cleared_by_another(
    env: dict[str, str], redis: Redis
) -> None:
    # A few attempts 0.2 s apart, then ten minutes to the next: each account's failures stay current
    # (not forgotten) for the whole test, whatever the machine's load. Flagged after a second.
    settings = Settings.from_env(
        dict(env, SVCGW_FAILING_AFTER="1", SVCGW_RETRY_SCHEDULE="0.2,0.2,0.2,0.2,0.2,0.2,0.2,0.2,600")
    )
    host = Sink(rule=_by_path).start()
    base = host.url.removesuffix("/hook")
    origin = origin_of(host.url)
    failing, answering = make_developer(settings, instances=1), make_developer(settings, instances=1)

    async def addresses(store: Store) -> None:
        await store.set_callback(Scope(appid=failing.appids[0]), f"{base}/failing/{failing.account}")
        await store.set_callback(Scope(appid=answering.appids[0]), f"{base}/answering/{answering.account}")

    with_store(settings, addresses)
    record = name(failing.account, origin)

    def listed(server: str, developer: Developer) -> list[dict[str, object]]:
        answer = httpx.get(f"{server}/console/api/failing-destinations", headers={"Svc-Key": developer.key}, timeout=10)
        assert answer.status_code == 200, answer.text
        return list(answer.json()["data"]["failing"])

    def flagged() -> bool:
        found = parse(record, redis.hget(keys.failing_origins, record) or b"")
        return found is not None and found.flagged

    worker = ThreadedWorker(settings).start()
    try:
        with serve(settings) as server:
            for n in range(3):
                post(settings, tenant_of(failing), f"f{n}")
            wait_for(flagged, timeout=20, what="the failing account's record flagged")
            # Failing for the account whose endpoints fail, and for it alone, though both use the host.
            assert [(f["destination"], f["appids"]) for f in listed(server, failing)] == [(origin, failing.appids)]
            assert listed(server, answering) == []
            # The other account's deliveries to the same host succeed: its record is never made, and they
            # end nothing of the failing account's.
            delivered = [post(settings, tenant_of(answering), f"a{n}") for n in range(5)]
            wait_for(lambda: all(is_delivered(redis, d) for d in delivered), timeout=20, what="the deliveries")
            assert flagged()
            assert redis.hget(keys.failing_origins, name(answering.account, origin)) is None
            assert [f["destination"] for f in listed(server, failing)] == [origin]
            assert listed(server, answering) == []
            for developer, shown in ((failing, True), (answering, False)):
                http, _ = signed_in(server, developer.key)
                try:
                    page = http.get("/console/instances").text
                    assert ('id="failing-banner"' in page) is shown
                    assert (f'class="failing" data-destination="{origin}"' in page) is shown
                finally:
                    http.close()
    finally:
        worker.stop()
        host.stop()
