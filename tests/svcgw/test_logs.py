"""svcgw.logs: one JSON object per line, its time in UTC to the millisecond."""

from __future__ import annotations

import logging
import sys

import orjson

from svcgw.logs import JsonFormatter


def record(created: float, **extra: object) -> logging.LogRecord:
    made = logging.LogRecord("svcgw.delivery", logging.INFO, __file__, 1, "delivery attempt", None, None)
    made.created, made.msecs = created, (created - int(created)) * 1000
    made.__dict__.update(extra)
    return made


def test_a_line_is_json_with_its_fields_and_utc_time() -> None:
    formatter = JsonFormatter()
    line = orjson.loads(formatter.format(record(1795746297.123456, appid="wx_1", attempt=2, status=None)))
    assert line == {
        "time": "2026-11-27T02:24:57.123Z",
        "level": "info",
        "logger": "svcgw.delivery",
        "message": "delivery attempt",
        "appid": "wx_1",
        "attempt": 2,
    }


def test_each_line_has_its_own_second_and_millisecond() -> None:
    formatter = JsonFormatter()
    times = [orjson.loads(formatter.format(record(at)))["time"] for at in (1795746297.125, 1795746297.75, 1795746298.5)]
    assert times == ["2026-11-27T02:24:57.125Z", "2026-11-27T02:24:57.750Z", "2026-11-27T02:24:58.500Z"]


def test_an_exception_is_in_its_line() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        failed = record(1795746297.0)
        failed.exc_info = sys.exc_info()
    assert "ValueError: boom" in orjson.loads(JsonFormatter().format(failed))["exception"]
