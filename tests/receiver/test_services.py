"""The parts the HTTP role shares, as ``build_services`` makes them from the settings."""

from __future__ import annotations

import asyncio
from pathlib import Path

from cryptography.fernet import Fernet

from receiver.services import Services, build_services
from svcgw.config.settings import Settings


def _built(shards: str, tmp_path: Path) -> Settings:
    return Settings.from_env({"SVCGW_REDIS_SHARDS": shards, "SVCGW_STATE_DIR": str(tmp_path),
                              "SVCGW_ENCRYPTION_KEYS": Fernet.generate_key().decode()})  # fmt: skip


def _close(services: Services) -> None:
    asyncio.run(services.aclose_clients())


def test_the_virtual_shards_of_a_cluster_share_one_batch_of_ingest_scripts(tmp_path: Path) -> None:
    """A turn's posts to instances of different virtual shards go together: one pipeline per master."""
    services = build_services(_built("cluster://127.0.0.1:7000,127.0.0.1:7001", tmp_path))  # nothing connects yet
    try:
        assert len(services.ingests) == 16
        assert len({id(ingest._batch) for ingest in services.ingests}) == 1
    finally:
        _close(services)


def test_shards_of_their_own_redis_each_have_their_own_batch(tmp_path: Path) -> None:
    services = build_services(_built("redis://127.0.0.1:7101/0 redis://127.0.0.1:7102/0", tmp_path))
    try:
        assert len({id(ingest._batch) for ingest in services.ingests}) == 2
    finally:
        _close(services)
