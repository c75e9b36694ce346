"""``svcgw secrets``: encryption of stored tokens (Bearer and receiver tokens)."""

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
    """Re-encrypt every stored token with the first key of SVCGW_ENCRYPTION_KEYS."""
    count = await admin.store(sealing=True).reseal_tokens()
    emit(as_json, {"resealed": count}, lambda: Text(f"re-encrypted {count} tokens"))
