"""Posts Redis did not store: each counted, each cause of each shard logged at once, its repeats folded."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, TimeoutError

from receiver.endpoint.notstored import LOG_EVERY, NotStored, message
from svcgw.storage.keys import PLAIN


class Counts:
    def __init__(self) -> None:
        self.fields: Counter[tuple[str, str]] = Counter()

    def add(self, commands: Any) -> None:
        for _, key, name, amount in commands:
            self.fields[(key, name)] += int(amount)


def test_every_refusal_is_counted_and_each_cause_of_each_shard_logged_once_while_it_lasts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    counts = Counts()
    record = NotStored(counts, PLAIN, clock=lambda: now[0])
    down = RedisConnectionError("Error 111 connecting to 127.0.0.1:7001. Connection refused.")
    with caplog.at_level(logging.INFO, logger="svcgw.receiver"):
        for _ in range(5):
            record(1, "we_a", down)
        record(2, "we_b", down)  # another shard: a line of its own
        record(1, "we_a", TimeoutError("Timeout reading from 127.0.0.1:7001"))  # another cause: too
        now[0] += LOG_EVERY - 0.1
        record(1, "we_a", down)  # still folded
        now[0] += 0.2
        record(1, "we_a", down)  # the next line, with how many were folded
    lines = [
        (r.__dict__["shard"], r.getMessage().removeprefix("post not stored, answered 503: ")) for r in caplog.records
    ]
    refused = "ConnectionError: Error 111 connecting to 127.0.0.1:7001. Connection refused."
    assert lines == [
        (1, refused),
        (2, refused),
        (1, "TimeoutError: Timeout reading from 127.0.0.1:7001"),
        (1, f"{refused} (5 more posts not stored for it since the last line)"),
    ]
    assert counts.fields == {
        (PLAIN.metrics_counters, "posts_not_stored|ConnectionError"): 8,
        (PLAIN.metrics_counters, "posts_not_stored|TimeoutError"): 1,
    }


def test_the_message_stops_where_it_would_quote_the_command() -> None:
    quoting = RedisClusterException("No targets were found to execute ('EVALSHA', 'abc', 7, 'body-secret') command on")
    assert message(quoting) == "No targets were found to execute"
    assert "body-secret" not in message(quoting)
    assert message(RedisConnectionError("")) == "(no message)"
    assert len(message(RedisConnectionError("x" * 1000))) == 200
