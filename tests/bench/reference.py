"""References measured in the same run as the service, against the same sink.

* :func:`post` is the job that stock RQ workers run: a plain synchronous
  httpx POST, one per job, as a webhook forwarder on RQ would do it. The
  client is made once per process and kept (a SimpleWorker reuses it; a
  forking worker's work horse starts afresh for every job);
* ``python -m tests.bench.reference URL CONCURRENCY SECONDS`` is a raw
  aiohttp POST loop: the most this machine delivers from one Python process
  with nothing but HTTP in it. It prints ``{"requests": N, "per_s": R, "failed": F, "cpu_us_per_request": C}``:
  N answers 200, F any other status (not counted in the rate), C the process's CPU per request
  (answered or not) while the loop ran.
"""

from __future__ import annotations

import asyncio
import sys
import time

import httpx
import orjson

_client: httpx.Client | None = None


def post(url: str, body: str) -> int:
    """The stock RQ job."""
    global _client
    if _client is None:
        _client = httpx.Client(timeout=10)
    answer = _client.post(url, content=body.encode(), headers={"Content-Type": "application/json"})
    answer.raise_for_status()
    return answer.status_code


async def aiohttp_loop(urls: list[str], concurrency: int, seconds: float) -> dict[str, float | int]:
    import aiohttp

    done = failed = 0
    stop_at = time.monotonic() + seconds
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def client(n: int) -> None:
            nonlocal done, failed
            i = 0
            while time.monotonic() < stop_at:
                body = b'{"event_type":"Msg","events":[{"id":"ref-%d-%d"}]}' % (n, i)
                async with session.post(urls[(n + i) % len(urls)], data=body) as resp:
                    await resp.read()
                    if resp.status == 200:
                        done += 1
                    else:
                        failed += 1
                i += 1

        started, cpu = time.monotonic(), time.process_time()
        await asyncio.gather(*(client(n) for n in range(concurrency)))
        elapsed, cpu = time.monotonic() - started, time.process_time() - cpu
    cpu_us = round(cpu / max(done + failed, 1) * 1e6, 1)
    return {"requests": done, "per_s": round(done / elapsed, 1), "failed": failed, "cpu_us_per_request": cpu_us}


if __name__ == "__main__":
    import uvloop

    urls = sys.argv[1].split(",")
    result = uvloop.run(aiohttp_loop(urls, int(sys.argv[2]), float(sys.argv[3])))
    print(orjson.dumps(result).decode())
