"""``svcgw secrets``: encryption of stored tokens (Bearer and receiver tokens) and signing secrets."""

from __future__ import annotations

import click
from rich.text import Text

from .context import Admin, admin_command
from .output import emit, json_option

__all__ = ["secrets_group"]


@click.group("secrets")
def secrets_group() -> None:
    """Encryption of stored tokens."""


@secrets_group.command("reencrypt")
@json_option
@admin_command
async def secrets_reencrypt(admin: Admin, as_json: bool) -> None:
    """Re-encrypt every stored token and signing secret with the first key of SVCGW_ENCRYPTION_KEYS.

    Signing secrets stored in clear (written before secrets were sealed) are sealed.
    """
    store = admin.store(sealing=True)
    count = await store.reseal_tokens()
    secrets = await store.reseal_secrets()
    emit(
        as_json,
        {"resealed": count, "secrets": secrets},
        lambda: Text(f"re-encrypted {count} tokens and {secrets} signing secrets"),
    )
