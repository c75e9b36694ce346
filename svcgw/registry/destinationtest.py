"""The ``SvcCallbackTest`` POST of a further destination, signed with its own secret and sent with its own token.

The same test as a saved primary address gets (``svcgw.callbacks.testpost``):
one POST through the guarded callback client, not queued, not retried, not
in the callback log; ``appid`` in the body only for an instance's
destination. The console sends it when a destination is saved (created, or
its address or token changed, or enabled again: :func:`needs_test`) and on
demand; so does ``svcgw destinations``. It never raises for the POST's outcome: a secret or
token that no configured key opens is a failed test too.
"""

from __future__ import annotations

from svcgw.callbacks.outbound import Sender
from svcgw.callbacks.testpost import CallbackTestResult, send_test
from svcgw.registry.destinations import DestinationConfig, DestinationStore
from svcgw.vault import VaultError

__all__ = ["needs_test", "send_destination_test"]


def needs_test(before: DestinationConfig, after: DestinationConfig, *, new_token: bool) -> bool:
    """Whether an update changed what a test POST checks: the address, the token, or enabled it again."""
    return (
        after.url != before.url or new_token or after.bearer != before.bearer or (after.enabled and not before.enabled)
    )


async def send_destination_test(
    store: DestinationStore, sender: Sender, destination_id: str, *, account: str | None = None
) -> CallbackTestResult:
    """POST one ``SvcCallbackTest`` to the destination; ``NotFound`` when it is not there (or not ``account``'s)."""
    try:
        opened = await store.opened(destination_id, account=account)
    except VaultError:
        return CallbackTestResult(
            ok=False,
            event_id="",
            error="the signing secret or the Bearer token cannot be decrypted with the configured keys",
        )
    return await send_test(sender, opened.url, secret=opened.secret, token=opened.token, appid=opened.appid)
