"""The function every delivery job names (``svcgw.storage.rqformat.FUNC_NAME``).

RQ stores the dotted path of a job's function in its hash, so this module
keeps that path importable. The job hashes themselves are written by
``svcgw.delivery.queueing``.
"""

from __future__ import annotations

__all__ = ["deliver"]


def deliver(delivery_id: str) -> None:
    """The job's entry point as RQ sees it; deliveries run only in ``svcgw worker``."""
    raise RuntimeError(
        f"delivery {delivery_id} was taken by a stock rq worker; run `svcgw worker` on this queue instead"
    )
