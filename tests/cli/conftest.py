"""Fixtures of the command-line tests: logging put back after each command."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def keep_logging() -> Iterator[None]:
    # The group configures logging on the runner's captured stderr; put it back.
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
