"""What ``svcgw up --demo`` prints: every command ready to paste, with the demo's own values.

The commands name the ``svcgw`` of the running interpreter by its full path
when ``svcgw`` on PATH is not that one (or there is none), and ``python -m
cli`` with the interpreter's path when the script is missing: pasted in
another terminal, they run the same code against the same Redis.
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

from receiver.console.account import invitation_path
from svcgw.config.settings import Settings
from svcgw.config.shards import ShardLayout

from .context import safe_redis_url
from .demoaccount import Demo

__all__ = [
    "DEMO_RETRY_SCHEDULE",
    "INVITATION_SECONDS",
    "render_dead_letter",
    "render_demo",
    "render_flow",
    "render_onboarding",
    "sample_event_body",
    "svcgw_command",
]

INVITATION_SECONDS = 24 * 3600
# The demo's retry schedule, unless SVCGW_RETRY_SCHEDULE is set: a dead letter within a minute
# (4 failed attempts, about 35 s) instead of about 9 hours.
DEMO_RETRY_SCHEDULE = "5,10,20"
# An address of the simulator that answers every POST with 404: a destination that always fails.
FAILING_PATH = "/_sim/always-fails"


def svcgw_command() -> str:
    """``svcgw`` as it can be pasted: this interpreter's script, by full path unless PATH finds that very one."""
    script = Path(sys.executable).parent / "svcgw"
    if script.is_file():
        found = shutil.which("svcgw")
        if found is not None and Path(found).resolve() == script.resolve():
            return "svcgw"
        return shlex.quote(str(script))
    return f"{shlex.quote(sys.executable)} -m cli"


def _sim_base(settings: Settings) -> str:
    return (settings.upstream_url or "").rstrip("/")


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


def _exports(settings: Settings) -> list[str]:
    """The environment an administration command needs to reach the demo's Redis and keys."""
    exports: list[str] = []
    password_file = (settings.state_dir / "redis" / "password").resolve()
    if settings.redis_shards is not None:
        exports += _shard_exports(settings.redis_shards)
    elif settings.redis_url and safe_redis_url(settings.redis_url) == settings.redis_url.split("?")[0]:
        exports.append(f"export SVCGW_REDIS_URL={shlex.quote(settings.redis_url)}")
    elif settings.redis_url and _embedded_password(settings.redis_url, password_file):
        # The embedded Redis's password stays in its file: the line reads it rather than showing it.
        # Its port is kept for the state dir, so the line keeps working after a restart.
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
    return exports


def _shard_exports(layout: ShardLayout) -> list[str]:
    """The settings that name every shard, as the service has them: a command given shard 0 alone sees only it.

    A shard's entry is printed when it holds no password; otherwise the line says what to set.
    """
    entries: list[str] = []
    for deployment in layout.deployments:
        if deployment.kind == "redis":
            url = deployment.url or ""
            entries.append(url if safe_redis_url(url) == url else "")
        else:
            entries.append(deployment.name if deployment.password is None and deployment.username is None else "")
    if all(entries):
        lines = [f"export SVCGW_REDIS_SHARDS={shlex.quote(' '.join(entries))}"]
    else:
        lines = ["export SVCGW_REDIS_SHARDS=...   # every shard, as the service has them (with their passwords)"]
    if layout.cluster:
        lines.append(f"export SVCGW_CLUSTER_SHARDS={len(layout.shards)}")
    return lines


def render_demo(demo: Demo, settings: Settings) -> str:
    base = settings.public_url.rstrip("/")
    receiver = f"{base}/svc/receiver/{demo.appid}/{demo.receiver_token}"
    svcgw = svcgw_command()
    profile = json.dumps({"appid": demo.appid}, separators=(",", ":"))
    lines = [
        "",
        "svcgw demo",
        f"  API base URL   {base}/svc/api/",
        f"  API key        {demo.key}   (header Svc-Key)",
        f"  account        {demo.account}",
        f"  appid          {demo.appid}",
        f"  receiver URL   {receiver}",
        "",
        f"Call the gateway with the demo key (every operation: docs/gateway-api.md, or {base}/docs):",
        f"  curl -sS -X POST {base}/svc/api/user/getProfile -H {shlex.quote('Svc-Key: ' + demo.key)} \\",
        f"    -H 'Content-Type: application/json' --data {shlex.quote(profile)}",
        "",
        "Post a test Msg event to the receiver (posting it twice answers duplicates: 1):",
        f"  curl -sS -X POST {shlex.quote(receiver)} -H 'Content-Type: application/json' \\",
        f"    --data {shlex.quote(sample_event_body())}",
        "",
        "Forward events to your endpoint, then watch the callback log and the dead letters:",
        *(f"  {line}" for line in _exports(settings)),
        f"  {svcgw} callback set --appid {demo.appid} --url http://127.0.0.1:9000/hook",
        f"  {svcgw} log {demo.appid} --since 1h",
        f"  {svcgw} dlq list",
        "",
    ]
    return "\n".join(lines)


def render_flow(demo: Demo, settings: Settings) -> str:
    sim = _sim_base(settings)
    more = json.dumps({"appid": demo.appid, "rate": 2, "count": 10}, separators=(",", ":"))
    lines = [
        f"Simulator flow for {demo.appid}:",
        f"  long/start registered {sim}/_sim/sink as the forward address;",
        "  the simulator is sending a few Msg events. Watch the signed callbacks arrive:",
        f"  curl -s {sim}/_sim/sink",
        "Signing secret (X-Svc-Signature is HMAC-SHA256 over timestamp + '.' + body; verify it with",
        "verify/python or verify/node of the repository):",
        f"  {svcgw_command()} callback show --appid {demo.appid}",
        "Make the simulator send more:",
        f"  curl -s -X POST {sim}/_sim/traffic -d {shlex.quote(more)}",
        "",
    ]
    return "\n".join(lines)


def render_dead_letter(demo: Demo, settings: Settings) -> str:
    """A dead letter and its replay within two minutes: an address that always fails, and the short schedule."""
    sim, svcgw = _sim_base(settings), svcgw_command()
    schedule = ",".join(f"{delay:g}" for delay in settings.retry_schedule)
    total = sum(settings.retry_schedule)
    traffic = json.dumps({"appid": demo.appid, "count": 1, "kinds": ["text"]}, separators=(",", ":"))
    lines = [
        f"A dead letter and its replay (retry schedule {schedule}: dead after "
        f"{len(settings.retry_schedule) + 1} failed attempts, about {total:.0f} s; the default takes about 9 h):",
        "  (with the exports above)",
        "  1. Point the instance at an address that always fails (the simulator answers 404 there):",
        f"       {svcgw} callback set --appid {demo.appid} --url {sim}{FAILING_PATH}",
        "  2. Send it an event, and watch its attempts fail:",
        f"       curl -s -X POST {sim}/_sim/traffic -d {shlex.quote(traffic)}",
        f"       {svcgw} deliveries list {demo.appid} --state retrying",
        f"  3. After about {total:.0f} s it is a dead letter:",
        f"       {svcgw} dlq list --appid {demo.appid}",
        "  4. Mend the address and replay: the delivery arrives at the sink.",
        f"       {svcgw} callback set --appid {demo.appid} --url {sim}/_sim/sink",
        f"       {svcgw} dlq replay --appid {demo.appid}",
        f"       curl -s {sim}/_sim/sink",
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
        f"API reference: {base}/docs (interactive, from {base}/openapi.json)",
        "",
    ]
    if settings.dashboard_user and settings.dashboard_password:
        lines.append(f"Monitoring: rq-dashboard at {base}/rq/ (HTTP Basic, read-only; Workers lists the workers)")
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
