"""Console passwords: the rules a new one must meet, and argon2id hashing.

Hashing is argon2-cffi's ``PasswordHasher`` with its defaults (argon2id,
RFC 9106's low-memory profile: 3 passes over 64 MiB, 4 lanes), so a stored
hash names its own parameters and :func:`needs_rehash` tells when they have
moved on. Every function here is CPU only and slow by design (a fifth of a
second on a busy core): callers on an event loop run them in a thread
(``receiver.console.signin``).

:func:`verify` of an unknown login is answered by :func:`verify_nothing`,
which spends the same work on a fixed hash, so the time taken does not tell
whether a login exists.

Errors::

    PasswordRejected (a ValueError)   a new password breaks a rule; the message says which
"""

from __future__ import annotations

import functools

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

from svcgw.errors import Rejected

__all__ = [
    "MAX_LENGTH",
    "MIN_LENGTH",
    "PasswordRejected",
    "check_new",
    "hash_password",
    "needs_rehash",
    "verify",
    "verify_nothing",
]

MIN_LENGTH = 10
# argon2 takes inputs up to 4 GiB; a bound keeps one sign-in attempt from making the server hash megabytes.
MAX_LENGTH = 256

_hasher = PasswordHasher()


class PasswordRejected(Rejected, ValueError):
    """A new password breaks a rule; the message says which, never the password."""


def check_new(password: str, *, login: str | None = None) -> None:
    """Raise :class:`PasswordRejected` unless ``password`` may be set."""
    if len(password) < MIN_LENGTH:
        raise PasswordRejected(f"a password needs at least {MIN_LENGTH} characters")
    if len(password) > MAX_LENGTH:
        raise PasswordRejected(f"a password has at most {MAX_LENGTH} characters")
    if password.strip() != password or not password.isprintable():
        raise PasswordRejected("a password cannot start or end with a space, or contain control characters")
    if login is not None and password.casefold() == login.casefold():
        raise PasswordRejected("a password cannot be the login")


def hash_password(password: str) -> str:
    """The argon2id hash to store (``$argon2id$v=19$m=...``: salt and parameters included)."""
    return _hasher.hash(password)


def verify(stored: str, presented: str) -> bool:
    """Whether ``presented`` is the password of the hash ``stored`` (constant time inside argon2)."""
    if len(presented) > MAX_LENGTH:
        verify_nothing()
        return False
    try:
        return _hasher.verify(stored, presented)
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False


def verify_nothing() -> None:
    """The work of one verification, for a login that has no password: no timing oracle."""
    try:
        _hasher.verify(_decoy(), "not the password of anyone")
    except VerificationError:
        pass


def needs_rehash(stored: str) -> bool:
    """Whether ``stored`` was made with other parameters than today's (then it is replaced at sign-in)."""
    try:
        return _hasher.check_needs_rehash(stored)
    except InvalidHashError:
        return True


@functools.cache
def _decoy() -> str:
    return _hasher.hash("decoy password for unknown logins")
