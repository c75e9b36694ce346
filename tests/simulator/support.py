"""Helpers for the simulator's tests: calling operations, seeding instances, reading what a sink got."""

from __future__ import annotations

import json
import re
import warnings
from typing import Any

import httpx
from starlette.exceptions import StarletteDeprecationWarning

from tests.support import Sink

with warnings.catch_warnings():
    # The pinned dependencies carry httpx, which starlette's test client still supports but flags.
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient

__all__ = ["APPID_FORM", "TIME_FORMAT", "TestClient", "bodies", "call", "envelopes", "event_types", "seed", "state"]

TIME_FORMAT = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$")
APPID_FORM = re.compile(r"^we_[A-Za-z0-9]{15}$")


def call(client: TestClient | httpx.Client, path: str, **body: Any) -> dict[str, Any]:
    response = client.post(f"/svc/api/{path}", json=body)
    assert response.status_code == 200
    result: dict[str, Any] = json.loads(response.content)
    return result


def seed(client: TestClient | httpx.Client, **body: Any) -> str:
    response = client.post("/_sim/instances", json=body)
    assert response.status_code == 201
    appid: str = response.json()["appid"]
    return appid


def state(client: TestClient | httpx.Client, appid: str) -> dict[str, Any]:
    result: dict[str, Any] = client.get(f"/_sim/instances/{appid}").json()
    return result


def bodies(sink: Sink) -> list[bytes]:
    return [post.body for post in sink.posts()]


def envelopes(sink: Sink) -> list[dict[str, Any]]:
    return [json.loads(body) for body in bodies(sink)]


def event_types(sink: Sink) -> list[str]:
    return [envelope["event_type"] for envelope in envelopes(sink)]
