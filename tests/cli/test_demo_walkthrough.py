"""``svcgw up --demo`` as a new user meets it: SVCGW_PORT alone, and the printed commands pasted as they are."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator

import pytest

from cli.reachable import check_public_url
from svcgw.config.settings import Settings
from tests.support import Process, Sink, free_port, start_server, wait_for


def _block(output: str, title: str) -> list[str]:
    """The lines of the printed section that starts with ``title``, up to the blank line that ends it."""
    start = output.index(title)
    return output[start:].split("\n\n", 1)[0].splitlines()[1:]


def _shell(line: str, env: dict[str, str], exports: list[str]) -> str:
    done = subprocess.run(
        ["bash", "-c", "\n".join([*exports, line])], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, (line, done.stdout, done.stderr)
    return done.stdout


@pytest.fixture
def demo(env: dict[str, str]) -> Iterator[tuple[Process, dict[str, str], int, int]]:
    port, sim_port = free_port(), free_port()
    up_env = {k: v for k, v in env.items() if k not in ("SVCGW_REDIS_URL", "SVCGW_UPSTREAM_URL", "SVCGW_PUBLIC_URL")}
    up_env.update(SVCGW_PORT=str(port), SVCGW_SIM_PORT=str(sim_port), SVCGW_HOST="0.0.0.0")
    up = Process(["up", "--demo"], up_env, "up-walkthrough").start()
    yield up, up_env, port, sim_port
    up.stop(30)


@pytest.mark.slow
def test_svcgw_port_alone_and_every_printed_command_works_as_pasted(
    demo: tuple[Process, dict[str, str], int, int],
) -> None:
    up, up_env, port, _sim_port = demo

    def printed() -> str | None:
        if not up.alive():
            raise AssertionError(f"up exited:\n{up.output()}")
        text = up.output()
        return text if "Monitoring: rq-dashboard" in text else None

    try:
        output = wait_for(printed, timeout=90, interval=0.2, what="the demo's walk-through")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; up printed:\n{up.output()}") from None
    base = f"http://127.0.0.1:{port}"
    # Every URL follows SVCGW_PORT (the bind address 0.0.0.0 is reached on loopback); none says 8080.
    assert f"the receiver answers at SVCGW_PUBLIC_URL {base}" in output
    assert f"API base URL   {base}/svc/api/" in output and ":8080" not in output
    assert re.search(rf"receiver URL   {re.escape(base)}/svc/receiver/we_\w+/\S+", output)
    assert f"{base}/console/invitation/" in output and f"{base}/rq/" in output

    # Pasted in a shell where svcgw is not on PATH: the commands name it by its full path.
    shell_env = {k: v for k, v in up_env.items() if not k.startswith("SVCGW_") or k == "SVCGW_ENCRYPTION_KEYS"}
    shell_env["PATH"] = "/usr/bin:/bin"
    exports = [line.strip() for line in output.splitlines() if line.startswith("  export ")]
    assert exports and "svcgw callback set" in output

    gateway = _block(output, "Call the gateway with the demo key")
    call = " ".join(line.strip().rstrip("\\") for line in gateway)
    answer = json.loads(_shell(call, shell_env, []))
    assert answer["code"] == 0, answer

    steps = [line.strip() for line in _block(output, "A dead letter and its replay") if line.startswith("       ")]
    assert len(steps) == 7, steps
    set_failing, send, watch, dead, mend, replay, sink = steps
    assert "/_sim/always-fails" in set_failing
    _shell(set_failing, shell_env, exports)
    _shell(send, shell_env, exports)
    _shell(watch, shell_env, exports)
    named = re.compile(r"dlv_\w+|\bwe_\w+-\d+-\d+")  # svcgw.deliveryid: both forms
    listed = wait_for(
        lambda: named.search(_shell(dead, shell_env, exports)), timeout=60, interval=0.5, what="a dead letter"
    )
    delivery = listed[0]
    _shell(mend, shell_env, exports)
    assert "replayed" in _shell(replay, shell_env, exports)

    def arrived() -> bool:
        return any(entry.get("X-Svc-Delivery-Id") == delivery for entry in json.loads(_shell(sink, shell_env, [])))

    wait_for(arrived, timeout=30, interval=0.3, what="the replayed delivery at the sink")


def test_the_public_url_check_tells_the_service_from_anything_else(env: dict[str, str]) -> None:
    process, base = start_server(env)
    sink = Sink().start()
    try:
        port = int(base.rsplit(":", 1)[1])
        ours = Settings.from_env(dict(env, SVCGW_PORT=str(port), SVCGW_PUBLIC_URL=base))
        assert check_public_url(ours) is None
        elsewhere = Settings.from_env(dict(env, SVCGW_PUBLIC_URL=sink.url.rsplit("/", 1)[0]))
        assert "something else" in (check_public_url(elsewhere) or "")
        nobody = Settings.from_env(dict(env, SVCGW_PUBLIC_URL=f"http://127.0.0.1:{free_port()}"))
        assert "ConnectError" in (check_public_url(nobody) or "")
    finally:
        sink.stop()
        process.stop()
