"""What a benchmark run prepares before it starts the service's processes."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from tests.bench.services import _imported_libraries, compile_sources


def test_the_libraries_the_roles_import_are_compiled_before_a_run() -> None:
    """A role started without their bytecode compiles them all again, seconds of CPU in the run it measures."""
    files = _imported_libraries()
    for library in ("aiohttp", "redis", "starlette", "uvicorn", "rq"):
        assert any(Path(f).parts[-2:] == (library, "__init__.py") for f in files), library
    compile_sources()
    writable = [f for f in files if os.access(Path(f).parent, os.W_OK)]
    assert writable
    missing = [f for f in writable if not os.path.exists(importlib.util.cache_from_source(f))]
    assert not missing, missing[:5]
