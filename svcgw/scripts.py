"""The service's Lua scripts, one ``.lua`` file each under ``svcgw/lua/``.

Each file starts with a comment that names its KEYS and ARGV. Scripts are
read once and registered with a client by their callers
(``redis.register_script(source("ingest"))``).
"""

from __future__ import annotations

import functools
from importlib import resources

__all__ = ["source"]


@functools.cache
def source(name: str) -> str:
    """The text of ``svcgw/lua/<name>.lua``."""
    return resources.files("svcgw").joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")
