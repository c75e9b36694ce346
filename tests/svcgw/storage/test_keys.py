"""Names of svcgw.storage.keys.KeySpace that the other tests do not spell out."""

from __future__ import annotations

from svcgw.storage.keys import PLAIN, KeySpace


def test_a_destinations_deliveries_index_on_one_redis_and_on_a_clusters_shard() -> None:
    assert PLAIN.destination_deliveries("dst_0123456789abcdef") == "svcgw:destination-index:dst_0123456789abcdef"
    assert KeySpace("{s3}").destination_deliveries("dst_1") == "{s3}svcgw:destination-index:dst_1"
