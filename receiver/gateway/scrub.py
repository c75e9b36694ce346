"""Answer scrubbing: the caller never sees an instance's receiver URL.

The receiver URL carries the instance's token, which lets anyone post
events as the capability layer. An answer of the capability layer that
mentions it (the echo of ``updateCallbackURL``, say) has it replaced by the
caller's own callback address before it is passed on, changing no other
byte of the answer when it can.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any

import orjson

from svcgw.upstream import Answer

__all__ = ["mentions", "scrub"]

log = logging.getLogger("svcgw.gateway")


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


def mentions(document: Any, needle: str) -> bool:
    """Whether any string in the parsed ``document`` contains ``needle``."""
    return any(needle in text for text in _strings(document))


def _json_forms(value: str) -> set[bytes]:
    """The ways a JSON encoder may write ``value`` as a string, quotes included."""
    forms = set()
    for ensure_ascii in (True, False):
        encoded = json.dumps(value, ensure_ascii=ensure_ascii)
        forms.add(encoded.encode("utf-8"))
        forms.add(encoded.replace("/", "\\/").encode("utf-8"))
    return forms


def _redact(value: Any, receiver_url: str, token: str, replacement: str) -> Any:
    if isinstance(value, str):
        return value.replace(receiver_url, replacement).replace(token, "[redacted]")
    if isinstance(value, dict):
        return {
            _redact(k, receiver_url, token, replacement): _redact(v, receiver_url, token, replacement)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_redact(item, receiver_url, token, replacement) for item in value]
    return value


def scrub(answer: Answer, receiver_url: str, token: str, replacement: str) -> bytes:
    """The answer's bytes with the instance's receiver URL replaced by ``replacement``.

    The caller must never see the receiver URL (its token lets anyone post
    events as the capability layer). Answers that do not contain the token
    come back untouched. Otherwise the JSON-encoded receiver URL is replaced
    where it is a whole string (the echo of ``updateCallbackURL``), then
    inside longer strings, leaving every other byte as it was. Only if the
    token is still there after that (an encoding nobody uses) is the answer
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
    try:
        cleaned = json.loads(raw)
    except (ValueError, RecursionError):
        cleaned = None
    if cleaned is not None and not mentions(cleaned, token):
        return raw
    log.warning("upstream answer mentions the receiver URL in an unusual encoding; re-serialized")
    redacted = _redact(answer.envelope, receiver_url, token, replacement)
    return json.dumps(redacted, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
