"""An aiohttp request that adds no header of aiohttp's own choosing.

Unless told not to, aiohttp adds ``Accept: */*``, ``Accept-Encoding: gzip,
deflate`` and its own ``User-Agent`` to every request. The service's two
clients, the capability layer's (:mod:`svcgw.upstream`) and the callbacks'
(:mod:`svcgw.callbacks.outbound`), decompress nothing, so neither may ask for
a compressed answer: one would reach the attempt records, or the gateway's
caller, as the compressed bytes. Each sends the headers it means and HTTP/1.1's
own (``Host``, ``Content-Length``), nothing else.

``skip_auto_headers`` would do the same, but builds and copies a header dict
on every request to learn what to leave out; :class:`PlainRequest` skips the
step.
"""

from __future__ import annotations

from typing import Any

import aiohttp

__all__ = ["PlainRequest"]


class PlainRequest(aiohttp.ClientRequest):
    """A request with no ``Accept``, ``Accept-Encoding`` or ``User-Agent`` of aiohttp's (``request_class=``)."""

    def update_auto_headers(self, skip_auto_headers: Any) -> None:
        return None
