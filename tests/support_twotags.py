"""A Redis Cluster's names as the version before one tag made them: the upgrade's fixtures on a Cluster.

That version wrote every name of a virtual shard as ``{s<i>}`` in front of the plain name, and the
plain names of an instance's own keys carried the instance's tag: ``{s3}svcgw:log:{we_1}``,
``{s3}svcgw:dd:{we_1}:<n>``, ``{s3}svcgw:instance:{we_1}:seq``; every other name was as it is now
(``{s3}rq:job:<id>``, ``{s3}svcgw:instance:we_1``). Its scripts wrote what those of now write. So the
service's own writers, given :class:`TwoTags` for a shard, write what that version wrote.
"""

from __future__ import annotations

from svcgw.storage.keys import KeySpace

__all__ = ["TwoTags", "old_marker"]


class TwoTags(KeySpace):
    """A shard's names with the instance's tag kept inside the shard's (``TwoTags("{s3}")``)."""

    __slots__ = ()

    def _own(self, appid: str) -> str:
        return f"{{{appid}}}"


def old_marker(since: int, tags: int) -> dict[str, str]:
    """The layout marker that version left on each shard: no ``one_tag`` (Redis 7.0: de-duplication buckets)."""
    return {"version": "2", "since": str(since), "dedup": "buckets", "tags": str(tags)}
