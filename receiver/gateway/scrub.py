"""Answer scrubbing: the caller never sees an instance's receiver token.

The receiver URL carries the instance's token, which lets anyone post
events as the capability layer. Every answer of the capability layer is
looked at for the token itself, in any form a string can hold it: plain,
JSON-escaped (``\\u0054``, ``\\/``) or percent-encoded (once or more, any
hex case). An answer that holds it has the receiver URL replaced by the
caller's own callback address (in the same encoding, when it is a plain,
JSON-escaped or percent-encoded copy of the URL) and any other copy of the
token by ``[redacted]``; no other byte of the answer changes when that
can be done on the bytes. An answer without the token is passed on as it
came, byte for byte (19-digit integers untouched).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, unquote

import orjson

from svcgw.upstream import Answer

__all__ = ["REDACTED", "mentions", "might_mention", "scrub"]

log = logging.getLogger("svcgw.gateway")

REDACTED = "[redacted]"

# Percent-decoding is applied this many times at most: enough for a URL
# encoded inside a query string inside another one.
_UNQUOTE_ROUNDS = 4


def _strings(value: Any) -> Iterable[str]:
    """Every string in a parsed JSON value, member names included."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _decodings(text: str) -> Iterable[str]:
    """``text``, then each percent-decoding of it while one changes something."""
    yield text
    for _ in range(_UNQUOTE_ROUNDS):
        if "%" not in text:
            return
        decoded = unquote(text)
        if decoded == text:
            return
        text = decoded
        yield text


def mentions(document: Any, needle: str) -> bool:
    """Whether any string in the parsed ``document`` holds ``needle``, percent-decoded or not."""
    return any(needle in form for text in _strings(document) for form in _decodings(text))


def might_mention(raw: bytes, token: str) -> bool:
    """False when the answer's bytes certainly hold no form of ``token`` (cheap; see :func:`mentions`).

    Without a backslash or a percent sign in the answer, every string in it
    is a plain copy of its bytes, so a token in any string is in the bytes.
    """
    return b"\\" in raw or b"%" in raw or token.encode() in raw


def _json_forms(value: str) -> set[bytes]:
    """The ways a JSON encoder may write ``value`` as a string, quotes included."""
    forms = set()
    for ensure_ascii in (True, False):
        encoded = json.dumps(value, ensure_ascii=ensure_ascii)
        forms.add(encoded.encode("utf-8"))
        forms.add(encoded.replace("/", "\\/").encode("utf-8"))
    return forms


def _percent_forms(value: str, replacement: str) -> list[tuple[bytes, bytes]]:
    """Percent-encoded copies of ``value`` (as JSON string content), each with its ``replacement``."""
    pairs = []
    for safe in ("", "/"):
        encoded, substitute = quote(value, safe=safe), quote(replacement, safe=safe)
        for form, sub in ((encoded, substitute), (_lower_hex(encoded), _lower_hex(substitute))):
            pairs.append((form.encode(), sub.encode()))
            pairs.append((form.replace("/", "\\/").encode(), sub.replace("/", "\\/").encode()))
    return pairs


def _lower_hex(encoded: str) -> str:
    parts = encoded.split("%")
    return parts[0] + "".join("%" + part[:2].lower() + part[2:] for part in parts[1:])


def _redact(value: Any, receiver_url: str, token: str, replacement: str) -> Any:
    if isinstance(value, str):
        for form in _decodings(value):
            if token in form:
                return form.replace(receiver_url, replacement).replace(token, REDACTED)
        return value
    if isinstance(value, dict):
        return {
            _redact(k, receiver_url, token, replacement): _redact(v, receiver_url, token, replacement)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_redact(item, receiver_url, token, replacement) for item in value]
    return value


def scrub(answer: Answer, receiver_url: str, token: str, replacement: str) -> bytes:
    """The answer's bytes without the instance's receiver token.

    Answers that do not hold the token (see :func:`mentions`) come back
    untouched. Otherwise, on the bytes: the JSON-encoded receiver URL where
    it is a whole string (the echo of ``updateCallbackURL``), then inside
    longer strings, then its percent-encoded copies, become ``replacement``;
    then any remaining plain copy of the token (its characters need no
    escaping) becomes ``[redacted]``. Only if the token can still be found
    after that (an escape or encoding nobody uses) is the answer
    re-serialized from its parsed form with the token redacted.
    """
    if not mentions(answer.envelope, token):
        return answer.raw
    raw = answer.raw
    quoted = orjson.dumps(replacement)
    forms = sorted(_json_forms(receiver_url), key=len, reverse=True)
    for form in forms:
        raw = raw.replace(form, quoted)
    for form in forms:
        raw = raw.replace(form[1:-1], quoted[1:-1])
    for form, substitute in sorted(_percent_forms(receiver_url, replacement), key=lambda pair: -len(pair[0])):
        raw = raw.replace(form, substitute)
    raw = raw.replace(token.encode(), REDACTED.encode())
    try:
        cleaned = json.loads(raw)
    except (ValueError, RecursionError):
        cleaned = None
    if cleaned is not None and not mentions(cleaned, token):
        return raw
    log.warning("upstream answer mentions the receiver token in an unusual encoding; re-serialized")
    # From what the byte replacements left, so the copies they caught stay replaced as they were.
    source = cleaned if cleaned is not None else answer.envelope
    redacted = _redact(source, receiver_url, token, replacement)
    return json.dumps(redacted, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
