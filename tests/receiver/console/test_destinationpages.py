"""The console's destination pages over plain HTTP: forms with CSRF, the test's outcome, refusals on the form,
scoping, no token on any page, the failing banner."""

from __future__ import annotations

import re
import time

import httpx
from redis import Redis

from svcgw.callbacks.signing import verify
from svcgw.config.settings import Settings
from svcgw.delivery.failingorigins import name, origin_of
from svcgw.storage.keys import PLAIN as keys
from tests.conftest import Tenant
from tests.receiver.console.conftest import Developer, make_developer
from tests.receiver.console.test_pages import csrf_of, signed_in
from tests.support import Sink
from tests.svcgw.delivery.fanout import fan_out, kill_among
from tests.svcgw.delivery.test_deadletters import ingest

TOKEN = "tok_page_never_shown_" + "x" * 16


def destination_id(location: str) -> str:
    found = re.fullmatch(r"/console/destinations/(dst_[0-9a-f]{16})", location)
    assert found, location
    return found.group(1)


def test_add_show_change_test_rotate_disable_and_remove_with_forms(
    server: str, developer: Developer, sink: Sink, redis: Redis
) -> None:
    http, csrf = signed_in(server, developer.key)
    page = http.get("/console/destinations")
    assert (
        page.status_code == 200
        and "None yet." in page.text
        and 'name="event_type" value="InstanceOffline"' in page.text
    )

    form = {
        "url": sink.url + "/oncall",
        "label": "on-call",
        "event_type": ["InstanceOffline", "InstanceRecovered"],
        "other_event_types": "",
        "rate": "20",
        "enabled": "on",
        "bearer": "on",
        "bearer_token": TOKEN,
    }
    refused = http.post("/console/destinations", data=form)
    assert refused.status_code == 403 and sink.posts() == []
    added = http.post("/console/destinations", data={**form, "csrf_token": csrf})
    assert added.status_code == 303, added.text
    ident = destination_id(added.headers["location"])
    shown = http.get(added.headers["location"])
    assert shown.status_code == 200
    assert "Destination added." in shown.text and "Test POST succeeded" in shown.text and "HTTP 200" in shown.text
    assert TOKEN not in shown.text and "set (never shown)" in shown.text
    secret = re.search(r'<code id="signing-secret">([^<]+)</code>', shown.text)
    assert secret and secret.group(1).startswith("whsec_")
    (post,) = sink.posts()
    assert verify(secret.group(1), post.headers["x-svc-timestamp"], post.body, post.headers["x-svc-signature"])
    assert post.headers["authorization"] == f"Bearer {TOKEN}"
    assert "<code>InstanceOffline</code>" in shown.text and "20 deliveries per second" in shown.text
    # The message is shown once; the list shows it.
    assert "Destination added." not in http.get(f"/console/destinations/{ident}").text
    listed = http.get("/console/destinations").text
    assert f'data-destination-id="{ident}"' in listed and TOKEN not in listed and secret.group(1) not in listed

    # A refused value is shown on the form, typed values kept, nothing saved.
    bad = http.post(f"/console/destinations/{ident}", data={**form, "rate": "0", "label": "typed", "csrf_token": csrf})
    assert bad.status_code == 400 and "-40021" in bad.text and "Nothing was saved" in bad.text
    assert 'value="typed"' in bad.text
    bad_url = http.post(f"/console/destinations/{ident}", data={**form, "url": "http://10.0.0.1/x", "csrf_token": csrf})
    assert bad_url.status_code == 400 and "-40013" in bad_url.text
    assert redis.hget(keys.destination(ident), "label") == b"on-call" and len(sink.posts()) == 1

    # The edit form: every type, no limit; the blank token keeps it, and no test for that.
    changed = http.post(
        f"/console/destinations/{ident}",
        data={"url": sink.url + "/oncall", "label": "archive", "rate": "", "enabled": "on", "bearer": "on",
              "csrf_token": csrf},
    )  # fmt: skip
    assert changed.status_code == 303
    after = http.get(changed.headers["location"]).text
    assert "Destination saved." in after and "every type" in after and "no limit" in after and "Test POST" not in after
    assert redis.hexists(keys.destination(ident), "token") and len(sink.posts()) == 1

    tested = http.post(f"/console/destinations/{ident}/test", data={"csrf_token": csrf})
    assert tested.status_code == 303 and "Test POST succeeded" in http.get(tested.headers["location"]).text
    assert len(sink.posts()) == 2
    rotated = http.post(f"/console/destinations/{ident}/rotate-secret", data={"csrf_token": csrf})
    assert "New signing secret" in http.get(rotated.headers["location"]).text
    assert secret.group(1) not in http.get(f"/console/destinations/{ident}").text
    disabled = http.post(f"/console/destinations/{ident}/disable", data={"csrf_token": csrf})
    assert "Destination disabled" in http.get(disabled.headers["location"]).text
    assert redis.hget(keys.destination(ident), "enabled") == b"0" and not redis.exists(
        keys.routes_account(developer.account)
    )

    confirm = http.get(f"/console/destinations/{ident}/remove")
    assert confirm.status_code == 200 and "Remove archive?" in confirm.text
    removed = http.post(f"/console/destinations/{ident}/remove", data={"csrf_token": csrf_of(confirm.text)})
    assert removed.status_code == 303 and removed.headers["location"] == "/console/destinations"
    assert "Destination archive removed." in http.get("/console/destinations").text
    assert not redis.exists(keys.destination(ident))
    http.close()


def test_an_instances_page_adds_its_own_and_shows_the_accounts(
    server: str, developer: Developer, sink: Sink, redis: Redis
) -> None:
    http, csrf = signed_in(server, developer.key)
    appid = developer.appids[0]
    http.post(
        "/console/destinations",
        data={"url": sink.url + "/acc", "label": "for all", "enabled": "on", "csrf_token": csrf},
    )
    assert f"/console/instances/{appid}/destinations" in http.get(f"/console/instances/{appid}").text
    added = http.post(
        f"/console/instances/{appid}/destinations",
        data={"url": sink.url + "/own", "other_event_types": "Msg, GapClosed", "enabled": "on", "csrf_token": csrf},
    )
    assert added.status_code == 303
    ident = destination_id(added.headers["location"])
    assert redis.hget(keys.destination(ident), "appid") == appid.encode()
    assert redis.hget(keys.destination(ident), "event_types") == b"Msg,GapClosed"
    page = http.get(f"/console/instances/{appid}/destinations").text
    assert f'data-destination-id="{ident}"' in page and "for all" in page and 'id="account-destinations"' in page
    (own_post,) = [p for p in sink.posts() if p.path == "/hook/own"]
    assert b'"appid"' in own_post.body

    wrong = http.post(f"/console/instances/{appid}/destinations", data={"url": "ftp://x/", "csrf_token": csrf})
    assert wrong.status_code == 400 and "-40011" in wrong.text and "Nothing was saved" in wrong.text
    http.close()


def test_another_accounts_pages_are_not_found(
    server: str, developer: Developer, settings: Settings, sink: Sink
) -> None:
    stranger = make_developer(settings)
    theirs, their_csrf = signed_in(server, stranger.key)
    added = theirs.post("/console/destinations", data={"url": sink.url, "enabled": "on", "csrf_token": their_csrf})
    ident = destination_id(added.headers["location"])
    theirs.close()
    posts = len(sink.posts())

    http, csrf = signed_in(server, developer.key)
    for path in (
        f"/console/destinations/{ident}",
        f"/console/destinations/{ident}/remove",
        f"/console/instances/{stranger.appids[0]}/destinations",
        "/console/destinations/dst_0000000000000000",
    ):
        assert http.get(path).status_code == 404, path
    for path in ("", "/test", "/rotate-secret", "/disable", "/enable", "/remove"):
        answer = http.post(f"/console/destinations/{ident}{path}", data={"url": sink.url, "csrf_token": csrf})
        assert answer.status_code == 404, path
    assert (
        http.post(
            f"/console/instances/{stranger.appids[0]}/destinations", data={"url": sink.url, "csrf_token": csrf}
        ).status_code
        == 404
    )
    assert len(sink.posts()) == posts
    http.close()


def test_a_failing_destination_has_its_banner(server: str, developer: Developer, sink: Sink, redis: Redis) -> None:
    http, csrf = signed_in(server, developer.key)
    added = http.post(
        "/console/destinations", data={"url": sink.url, "label": "crm", "enabled": "on", "csrf_token": csrf}
    )
    ident = destination_id(added.headers["location"])
    assert 'id="destination-failing"' not in http.get(f"/console/destinations/{ident}").text
    # What the delivery engine's finish script keeps while every attempt of an account to an origin fails:
    # a record of an earlier version (the origin alone) and another account's record there, then this one's.
    now = time.time()
    origin = origin_of(sink.url)
    redis.hset(keys.failing_origins, origin, f"{now - 3600}:{now}:1")
    redis.hset(keys.failing_origins, name("acc_someone_else", origin), f"{now - 3600}:{now}:1")
    assert 'id="destination-failing"' not in http.get(f"/console/destinations/{ident}").text
    assert 'data-failing="' not in http.get("/console/destinations").text
    redis.hset(keys.failing_origins, name(developer.account, origin), f"{now - 3600}:{now - 1}:1")
    page = http.get(f"/console/destinations/{ident}").text
    assert 'id="destination-failing"' in page and "Failing:" in page
    assert f'data-failing="{ident}"' in http.get("/console/destinations").text
    api = httpx.get(f"{server}/console/api/destinations/{ident}", headers={"Svc-Key": developer.key}, timeout=10)
    assert abs(api.json()["data"]["failing_since"] - (now - 3600)) < 1
    http.close()


def test_a_destinations_page_lists_its_deliveries_and_replays_its_dead_letters(
    server: str, developer: Developer, settings: Settings, sink: Sink, redis: Redis
) -> None:
    http, csrf = signed_in(server, developer.key)
    added = http.post(
        "/console/destinations", data={"url": sink.url, "label": "crm", "enabled": "on", "csrf_token": csrf}
    )
    ident = destination_id(added.headers["location"])
    page = http.get(f"/console/destinations/{ident}").text
    assert 'id="no-deliveries"' in page and 'id="no-dead-letters"' in page

    appid = developer.appids[0]
    tenant = Tenant(developer.account, appid, developer.receiver_tokens[appid])
    made = []
    for n in range(3):
        primary = ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"d%d"}]}' % n)
        made += fan_out(settings, primary, [ident])
    kill_among(settings, made[1], appid, 6)

    page = http.get(f"/console/destinations/{ident}").text
    listed = re.findall(r'<li class="letter delivery" data-id="([^"]+)" data-state="([^"]+)"', page)
    assert listed == [(made[2], "pending"), (made[1], "dead"), (made[0], "pending")]
    assert "next attempt: as soon as a worker is free" in page and "HTTP 500" in page
    dead = re.findall(r'<li class="letter" data-id="([^"]+)"', page)
    assert dead == [made[1]] and "1 in all" in page

    # Replay one from here: back to this page, one fresh attempt queued.
    replayed = http.post(
        "/console/dead-letters/replay",
        data={"one": made[1], "next": f"/console/destinations/{ident}", "csrf_token": csrf},
    )
    assert replayed.status_code == 303 and replayed.headers["location"] == f"/console/destinations/{ident}"
    after = http.get(replayed.headers["location"]).text
    assert "1 dead letter queued for one fresh attempt." in after and 'id="no-dead-letters"' in after
    assert redis.hget(keys.delivery(made[1]), "state") == b"queued"
    assert f'data-id="{made[1]}" data-state="pending"' in after

    # The instance's deliveries and the dead-letters page name the destination.
    deliveries = http.get(f"/console/instances/{appid}/deliveries").text
    assert f'data-destination="{ident}"' in deliveries and 'data-destination="primary"' in deliveries
    only = http.get(f"/console/instances/{appid}/deliveries?destination={ident}").text
    assert 'data-destination="primary"' not in only and only.count('class="letter delivery"') == 3
    assert http.get(f"/console/instances/{appid}/deliveries?destination=nowhere").status_code == 400
    kill_among(settings, made[1], appid, 1)
    letters = http.get(f"/console/dead-letters?destination={ident}").text
    assert f'href="/console/destinations/{ident}" class="destination"' in letters and made[1] in letters
    assert (
        made[1] in http.get(f"/console/dead-letters/{made[1]}").text
        and ident in http.get(f"/console/deliveries/{made[1]}").text
    )
    http.close()
