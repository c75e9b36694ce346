"""Logging: one JSON object per line, or readable lines on a terminal.

Records carry structured fields through ``extra=`` (appid, delivery_id,
attempt, outcome, status, error, duration_ms, destination, account, shard). Secrets are never passed to a
logger; the formatter has no way to know them, so the rule is kept at the
call sites. A worker's parts of one shard, of several, log through
:func:`of_shard`, so that each of their lines names it.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import MutableMapping
from typing import Any

import orjson

__all__ = ["Line", "ShardLog", "configure", "of_shard"]

FIELDS = (
    "appid", "delivery_id", "attempt", "outcome", "status", "error", "duration_ms", "role", "destination", "account",
    "shard",
)  # fmt: skip


class JsonFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__()
        self._second = -1
        self._stamp = ""

    def _time(self, record: logging.LogRecord) -> str:
        # A worker writes a line per delivery attempt, thousands a second: the second's text is made once.
        second = int(record.created)
        if second != self._second:
            self._second, self._stamp = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        return f"{self._stamp}.{int(record.msecs):03d}Z"

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": self._time(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        values = record.__dict__  # read once: a worker formats a line per attempt
        for name in FIELDS:
            value = values.get(name)
            if value is not None:
                line[name] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(line).decode()


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        base = super().format(record)
        extras = " ".join(f"{name}={record.__dict__[name]}" for name in FIELDS if record.__dict__.get(name) is not None)
        return f"{base} {extras}" if extras else base


class Line:
    """One message of one logger at one level, written many times with different fields (``extra``).

    The delivery engine writes one per attempt. ``Logger.info(msg, extra=...)`` makes each record
    from nothing (``makeRecord``, ``LogRecord.__init__``: its source, its level's name, its
    arguments, each ``extra`` field checked against the record's own); this copies a record made
    once and sets its time and fields, then hands it to the logger as ``Logger.info`` would
    (``Logger.handle``: its filters, its handlers and its ancestors').
    """

    def __init__(self, logger: logging.Logger, level: int, msg: str) -> None:
        self.logger = logger
        self.level = level
        self._template = dict(logging.LogRecord(logger.name, level, "(unknown file)", 0, msg, None, None).__dict__)
        # When logging started, which every record's relativeCreated counts from.
        self._started = self._template["created"] - self._template["relativeCreated"] / 1000

    def __call__(self, fields: dict[str, object]) -> None:
        if not self.logger.isEnabledFor(self.level):
            return
        record = logging.LogRecord.__new__(logging.LogRecord)
        values = record.__dict__
        values.update(self._template)
        created = time.time()
        values["created"] = created
        values["msecs"] = int((created - int(created)) * 1000) + 0.0
        values["relativeCreated"] = (created - self._started) * 1000
        values.update(fields)
        self.logger.handle(record)


class ShardLog(logging.LoggerAdapter[logging.Logger]):
    """A logger whose records carry the field ``shard``, added to the call's own ``extra``."""

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        kwargs["extra"] = {**(kwargs.get("extra") or {}), **(self.extra or {})}
        return msg, kwargs


def of_shard(logger: logging.Logger, shard: int | None) -> logging.Logger | ShardLog:
    """``logger``, whose records name ``shard``; ``logger`` itself for None (one shard: nothing to tell apart)."""
    return logger if shard is None else ShardLog(logger, {"shard": shard})


def configure(level: str = "INFO", *, json: bool | None = None) -> None:
    use_json = (not sys.stderr.isatty()) if json is None else json
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter() if use_json else TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    # No line shows the calling function, thread or process: a record need not look them up (the
    # logging HOWTO's "Optimization"), which is a quarter of a record's cost at a line per attempt.
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # One access line per request would drown the delivery records.
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
