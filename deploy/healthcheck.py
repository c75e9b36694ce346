#!/usr/bin/env python3
"""Container health checks for svcgw, installed in the image as ``svcgw-healthcheck``.

    svcgw-healthcheck http URL   exit 0 if URL answers 2xx within 3 s (the server: /healthz, /readyz)
    svcgw-healthcheck redis      exit 0 if this container's Redis (SVCGW_REDIS_URL or Sentinel) answers PING

A worker serves no HTTP; ``redis`` tells whether it can reach the Redis it
works from. Nothing secret is printed: only the kind of failure.
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request


def check_http(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=3) as answer:  # noqa: S310 (the probe's own address)
            return 0 if 200 <= answer.status < 300 else 1
    except (urllib.error.URLError, OSError) as exc:
        print(f"unhealthy: {type(exc).__name__}", file=sys.stderr)
        return 1


def check_redis() -> int:
    from redis.exceptions import RedisError

    from svcgw.config.settings import Settings, SettingsError
    from svcgw.shards.connections import sync_client

    try:
        client = sync_client(Settings.from_env())
    except SettingsError as exc:
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1
    try:
        return 0 if client.ping() else 1
    except (RedisError, OSError) as exc:
        print(f"unhealthy: Redis {type(exc).__name__}", file=sys.stderr)
        return 1
    finally:
        client.close()


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "http":
        return check_http(argv[1])
    if argv == ["redis"]:
        return check_redis()
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
