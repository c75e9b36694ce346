"""rq-dashboard at /rq: behind its own credentials, read-only, absent when not configured; the URLs of its shards."""

from __future__ import annotations

import re
import socket
import warnings
from collections.abc import Iterator

import httpx
import pytest
from redis_sentinel_url import parse_sentinel_url
from starlette.exceptions import StarletteDeprecationWarning

from receiver.dashboard import add_nonce, dashboard_urls, make_dashboard
from svcgw.config.settings import Settings, SettingsError
from tests.conftest import provision
from tests.support import ThreadedServer
from tests.worker.support import flip, started

with warnings.catch_warnings():
    # The pinned dependencies carry httpx, which starlette's test client still supports but flags.
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient

USER, PASSWORD = "operator", "dashboard-pass-123"


@pytest.fixture
def dashboard_server(env: dict[str, str]) -> Iterator[str]:
    """The real app with the dashboard's credentials set, served in-process (as the ``server`` fixture)."""
    from receiver.app import create_app

    configured = Settings.from_env(dict(env, SVCGW_DASHBOARD_USER=USER, SVCGW_DASHBOARD_PASSWORD=PASSWORD))
    served = ThreadedServer(create_app(configured)).start()
    yield served.base
    served.stop()


def test_dashboard_needs_credentials_and_is_read_only(
    dashboard_server: str, settings: Settings
) -> None:
    tenant = provision(settings)
    httpx.post(
        tenant.receiver_url(dashboard_server), content=b'{"event_type":"Msg","events":[{"id":"q1"}]}', timeout=10
    ).raise_for_status()
    base = dashboard_server + "/rq"
    with httpx.Client(timeout=15) as http:
        anonymous = http.get(base + "/")
        assert anonymous.status_code == 401 and anonymous.headers["www-authenticate"].startswith("Basic")
        assert http.get(base + "/", auth=(USER, "wrong")).status_code == 401
        assert http.get(base + "/", auth=("someone", PASSWORD)).status_code == 401
        assert http.get(base + "/", headers={"Authorization": "Basic !!notbase64"}).status_code == 401
        # Unauthenticated changes are refused before anything else looks at them.
        assert http.post(base + "/queue/svcgw/queued/empty").status_code == 401

        page = http.get(base + "/", auth=(USER, PASSWORD))
        assert page.status_code == 200 and "/rq/static/" in page.text and "<title>" in page.text
        assert PASSWORD not in page.text
        # The page's own inline script runs under a per-page nonce, and nothing else inline does.
        assert_hardened(page)
        policy = page.headers["content-security-policy"]
        nonce = re.search(r"'nonce-([^']+)'", policy)
        assert nonce is not None and "'unsafe-inline'" not in policy.split("style-src")[0]
        inline = re.findall(r"<script(?![^>]*\bsrc=)[^>]*>", page.text)
        with_nonce = [tag for tag in inline if f'nonce="{nonce.group(1)}"' in tag]
        assert with_nonce == [f'<script nonce="{nonce.group(1)}" type="text/javascript">'] and len(inline) > 1
        assert int(page.headers["content-length"]) == len(page.content)
        again = http.get(base + "/", auth=(USER, PASSWORD))
        assert again.headers["content-security-policy"] != page.headers["content-security-policy"]
        assert_hardened(anonymous)
        queues = http.get(base + "/0/data/queues.json", auth=(USER, PASSWORD))
        assert queues.status_code == 200
        (queue,) = [q for q in queues.json()["queues"] if q["name"] == "svcgw"]
        assert queue["count"] == 1
        jobs = http.get(base + "/0/data/jobs/svcgw/queued/10/asc/1.json", auth=(USER, PASSWORD))
        assert jobs.status_code == 200 and len(jobs.json()["jobs"]) == 1
        assert http.get(base + "/static/css/main.css", auth=(USER, PASSWORD)).status_code in (200, 404)

        for method, path in (
            ("POST", "/queue/svcgw/queued/empty"),
            ("POST", "/queue/svcgw/compact"),
            ("POST", "/job/x/delete"),
            ("POST", "/job/x/requeue"),
            ("POST", "/requeue/svcgw"),
            ("GET", "/requeue/svcgw"),
        ):
            refused = http.request(method, base + path, auth=(USER, PASSWORD))
            assert refused.status_code == 403, (method, path)
        assert http.get(base + "/0/data/queues.json", auth=(USER, PASSWORD)).json()["queues"][0]["count"] == 1


def test_dashboard_lists_the_service_event_being_delivered_and_those_waiting(
    dashboard_server: str, settings: Settings
) -> None:
    tenant = started(settings, "http://127.0.0.1:9/hook")
    offline = flip(settings, tenant.appid, offline=True)
    recovered = flip(settings, tenant.appid, offline=False)
    base = dashboard_server + "/rq/0/data"
    with httpx.Client(timeout=15, auth=(USER, PASSWORD)) as http:
        queued = http.get(base + "/jobs/svcgw/queued/10/asc/1.json").json()["jobs"]
        assert [job["id"] for job in queued] == [offline]
        waiting = http.get(base + "/jobs/svcgw/deferred/10/asc/1.json")
        assert waiting.status_code == 200
        (job,) = waiting.json()["jobs"]
        assert job["id"] == recovered and job["description"] == f"InstanceRecovered for {tenant.appid}"


def test_what_rq_dashboard_cannot_answer_is_a_404_never_a_500(
    dashboard_server: str, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    tenant = provision(settings)
    httpx.post(
        tenant.receiver_url(dashboard_server), content=b'{"event_type":"Msg","events":[{"id":"q1"}]}', timeout=10
    ).raise_for_status()
    base = dashboard_server + "/rq"
    missing = (
        "/0/data/jobs/svcgw/registries/queued/8/1.json",  # a path of another shape: "queued" as per page
        "/0/data/jobs/svcgw/nosuch/8/asc/1.json",  # no such registry
        "/0/view/jobs/svcgw/nosuch/8/asc/1",
        "/0/data/jobs/svcgw/queued/0/asc/1.json",  # no page of 0 jobs
        "/0/data/jobs/svcgw/queued/8/asc/0.json",  # pages count from 1
        "/0/data/jobs/svcgw/queued/8/up/1.json",  # asc or dsc
        "/0/data/jobs/svcgw/queued/1001/asc/1.json",  # at most 1000 per page
        "/1/data/queues.json",  # one shard here: 0
        "/1/view",
        "/99999999999999999999/view",
        "/0/view/job/nosuchjob",
        "/0/data/job/nosuchjob.json",
    )
    with httpx.Client(timeout=15, auth=(USER, PASSWORD)) as http, caplog.at_level("ERROR"):
        for path in missing:
            answer = http.get(base + path)
            assert answer.status_code == 404, (path, answer.status_code)
            assert_hardened(answer)
        # What the dashboard asks for itself still works, in every registry and both orders.
        (job,) = http.get(base + "/0/data/jobs/svcgw/queued/8/asc/1.json").json()["jobs"]
        for registry in ("queued", "scheduled", "deferred", "started", "finished", "failed", "canceled"):
            for order in ("asc", "dsc"):
                assert http.get(base + f"/0/data/jobs/svcgw/{registry}/8/{order}/1.json").status_code == 200
            assert http.get(base + f"/0/view/jobs/svcgw/{registry}/8/asc/1").status_code == 200
        assert http.get(base + "/0/data/jobs/svcgw/queued/1000/dsc/3.json").status_code == 200
        assert http.get(base + f"/0/data/job/{job['id']}.json").json()["id"] == job["id"]
        assert http.get(base + f"/0/view/job/{job['id']}").status_code == 200
        # Writes stay refused before anything looks at their parameters.
        assert http.post(base + "/0/data/jobs/svcgw/nosuch/8/asc/1.json").status_code == 403
    assert "Traceback" not in caplog.text and "Exception on" not in caplog.text


def test_a_redis_that_does_not_answer_is_a_503_with_retry_after() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: connections are refused
        settings = Settings.from_env({
            "SVCGW_REDIS_URL": f"redis://127.0.0.1:{port}/0",
            "SVCGW_DASHBOARD_USER": USER,
            "SVCGW_DASHBOARD_PASSWORD": PASSWORD,
        })  # fmt: skip
        dashboard = make_dashboard(settings)
        assert dashboard is not None
        client = TestClient(dashboard)  # no lifespan: the dashboard alone, mounted under no prefix
        try:
            answer = client.get("/0/data/queues.json", auth=(USER, PASSWORD))
        finally:
            client.close()
    assert answer.status_code == 503 and answer.headers["retry-after"] == "1"
    assert str(port) not in answer.text


def assert_hardened(answer: httpx.Response) -> None:
    policy = answer.headers["content-security-policy"]
    assert "script-src 'self' 'nonce-" in policy and "frame-ancestors 'none'" in policy
    assert answer.headers["x-frame-options"] == "DENY"
    assert answer.headers["x-content-type-options"] == "nosniff"


def test_nonce_goes_on_the_dashboards_own_script_only() -> None:
    bundle = b'<script src="/rq/static/js/bootstrap.bundle.min.js" type="text/javascript"></script>\n  '
    own = b'<script type="text/javascript">go()</script>'
    # Script tags that reached the content, of any shape (the layout's own too), come before its end.
    content = b"<SCRIPT>x</SCRIPT>" + bundle + b'<script type="text/javascript">evil()</script>'
    html = b'<script src="/rq/static/a.js"></script>' + content + bundle + own
    assert add_nonce(html, "n0") == (
        b'<script src="/rq/static/a.js"></script>' + content + bundle
        + b'<script nonce="n0" type="text/javascript">go()</script>'
    )  # fmt: skip
    # A page without the layout's script gets no nonce at all.
    assert add_nonce(b"<script>x</script><script type='text/javascript'>y</script>", "n0").count(b"nonce") == 0


def test_no_dashboard_without_credentials(server: str) -> None:
    assert httpx.get(server + "/rq/", timeout=10).status_code == 404
    assert httpx.get(server + "/rq/", auth=(USER, PASSWORD), timeout=10).status_code == 404


def test_credentials_come_in_pairs() -> None:
    with pytest.raises(SettingsError, match="SVCGW_DASHBOARD_PASSWORD"):
        Settings.from_env({"SVCGW_DASHBOARD_USER": USER})
    with pytest.raises(SettingsError, match="SVCGW_DASHBOARD_USER"):
        Settings.from_env({"SVCGW_DASHBOARD_PASSWORD": PASSWORD})
    settings = Settings.from_env({"SVCGW_DASHBOARD_USER": USER, "SVCGW_DASHBOARD_PASSWORD": PASSWORD})
    assert PASSWORD not in repr(settings)


def test_a_sentinel_group_is_given_as_the_url_rq_dashboard_reads_it_from() -> None:
    settings = Settings.from_env({
        "SVCGW_REDIS_SHARDS": "redis://:pw0@h0:6379/0 sentinel://:pr1m:ary@10.0.0.1:26379,s-b:26380/events/2",
        "SVCGW_REDIS_SENTINEL_PASSWORD": "s3ntinel",
    })  # fmt: skip
    first, second = dashboard_urls(settings)
    assert first == "redis://:pw0@h0:6379/0"
    assert second.startswith("redis+sentinel://") and "s3ntinel" not in second
    # As rq-dashboard reads it (redis_sentinel_url), with the sentinels' password it is given apart.
    read = parse_sentinel_url(second, sentinel_options={"password": "s3ntinel"})
    assert read.hosts == [("10.0.0.1", 26379), ("s-b", 26380)]
    assert read.default_client.service == "events" and read.default_client.type == "master"
    assert read.client_options == {"password": "pr1m:ary", "db": 2}
    assert read.sentinel_options == {"password": "s3ntinel", "socket_timeout": 2.0, "socket_connect_timeout": 2.0}
    one = Settings.from_env({"SVCGW_REDIS_SENTINELS": "127.0.0.1:26379", "SVCGW_REDIS_PASSWORD": "pw"})
    (only,) = dashboard_urls(one)
    assert parse_sentinel_url(only).client_options == {"password": "pw", "db": 0}


@pytest.mark.parametrize(
    "entry",
    [
        "sentinel://user:pw@h:26379/mymaster",  # a user name: the URL has no room for one
        "sentinel://:p%40ss@h:26379/mymaster",  # "@" in the password: read as written, up to the first one
        "sentinel://:p%2Fss@h:26379/mymaster",
        "sentinel://[::1]:26379/mymaster",  # IPv6: host:port split at the first colon
    ],
)
def test_no_dashboard_for_a_deployment_its_urls_cannot_name(entry: str) -> None:
    settings = Settings.from_env({"SVCGW_REDIS_SHARDS": f"redis://h0:6379/0 {entry}"})
    assert dashboard_urls(settings) == ()


def test_a_dashboard_that_cannot_be_mounted_says_so(caplog: pytest.LogCaptureFixture) -> None:
    settings = Settings.from_env({
        "SVCGW_REDIS_SHARDS": "redis://h0:6379/0 sentinel://user:pw@h:26379/mymaster",
        "SVCGW_DASHBOARD_USER": USER,
        "SVCGW_DASHBOARD_PASSWORD": PASSWORD,
    })  # fmt: skip
    with caplog.at_level("WARNING", logger="svcgw.dashboard"):
        assert make_dashboard(settings) is None
    assert "rq-dashboard is not mounted" in caplog.text and "pw" not in caplog.text


def test_one_url_and_no_dashboard_for_the_embedded_redis_or_a_cluster() -> None:
    assert dashboard_urls(Settings.from_env({"SVCGW_REDIS_URL": "redis://h:6379/3"})) == ("redis://h:6379/3",)
    assert dashboard_urls(Settings.from_env({})) == ()
    assert dashboard_urls(Settings.from_env({"SVCGW_REDIS_SHARDS": "cluster://h:7000,h:7001"})) == ()
