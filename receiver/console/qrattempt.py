"""A QR login attempt as the console keeps it, and what the gateway's answers to its steps say.

:class:`QrLogin` is the record of one QR login (its stages are described in
:mod:`.qrflow`), stored as a Redis hash; :class:`Outcome` is one gateway
call's answer; the words and images the pages show of them come from
:func:`login_status_words`, :func:`action_needed` and :func:`image_data_url`.

Errors (in the one tree of ``svcgw.errors``)::

    FlowError       a step was refused: by the gateway (its status, code and
                    message) or by the capability layer (HTTP 200, its code)
    AttemptGone     no such attempt for this account (expired, or another's);
                    also ``Missing`` and ``LookupError``
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import orjson
from starlette.responses import Response

from svcgw.errors import Missing, SvcgwError
from svcgw.liveness import transitions

__all__ = [
    "ATTEMPT_SECONDS",
    "GAP_WAIT_SECONDS",
    "AttemptGone",
    "FlowError",
    "Outcome",
    "QrLogin",
    "action_needed",
    "image_data_url",
    "login_status_words",
]

ATTEMPT_SECONDS = 15 * 60
GAP_WAIT_SECONDS = 10.0
MAX_IMAGE_BYTES = 256 * 1024
# The business read that proves a connection, as the prober's (worker.prober.PROBE_READ).
BUSINESS_READ = ("user", "getProfile")
DEVICE = {"type": "iPad", "name": "console", "version": 0}

# The Login status table of the spec, in words; any other value gets FALLBACK_WORDS and the polling goes on.
STATUS_WORDS: Mapping[int, str] = {
    -1: "Waiting for a scan: open the app on the phone and scan this code.",
    0: "This device can log in without scanning; waiting for the login to complete.",
    1: "Scanned. Confirm the login on the phone.",
    2: "Logged in.",
    4: "The login was cancelled on the phone. Ask for a new code to try again.",
    10: "Enter the six-digit code sent to the phone.",
}
FALLBACK_WORDS = "The login is in an unexpected state ({status}); still checking."

_IMAGE_TYPES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def login_status_words(status: int | None) -> str:
    if status is None:
        return "Asking for a code."
    return STATUS_WORDS.get(status, FALLBACK_WORDS.format(status=status))


def action_needed(instance: Mapping[str, Any]) -> str | None:
    """What the developer must do for an instance's status (the console's view of it), in words."""
    status, action = instance.get("status"), instance.get("action_required")
    if status == transitions.OFFLINE and action == "relogin":
        return "Re-login: the connection broke but the login is probably alive; usually no scan is needed."
    if status == transitions.OFFLINE:
        return "Scan a new QR code: the login is gone (risk control, another device, or logged out on the phone)."
    if status == transitions.STOPPED:
        return "Start the long connection to receive events again."
    if status == transitions.LOGGED_OUT:
        return "Log in again with a QR scan."
    if status == "not_started":
        return "Log in with a QR scan, then start the long connection."
    return None


def image_data_url(value: object) -> str | None:
    """A ``data:`` URL for the QR image the capability layer sent, with or without its own prefix.

    The value is decoded and encoded again from the bytes, and only a PNG,
    JPEG or GIF by its first bytes is taken: whatever else the layer sent
    never reaches the page. None when it is not such an image.
    """
    if not isinstance(value, str) or not value:
        return None
    text = value.strip()
    if text.startswith("data:"):
        head, comma, text = text.partition(",")
        if not comma or not head.endswith(";base64"):
            return None
    try:
        raw = base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        return None
    if not raw or len(raw) > MAX_IMAGE_BYTES:
        return None
    for magic, media in _IMAGE_TYPES:
        if raw.startswith(magic):
            return f"data:{media};base64,{base64.b64encode(raw).decode('ascii')}"
    return None


# --- what one gateway call answered ---------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    """A gateway call's answer: HTTP status, code, message, data (and Retry-After, when refused so)."""

    operation: str
    status: int
    code: int
    message: str
    data: Any = None
    retry_after: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.code == 0

    @property
    def by_gateway(self) -> bool:
        """Refused by the service's own checks (not an answer of the capability layer)."""
        return self.status != 200

    @classmethod
    def of(cls, operation: str, response: Response) -> Outcome:
        try:
            document = orjson.loads(bytes(response.body))
        except orjson.JSONDecodeError:
            document = None
        if not isinstance(document, dict):
            return cls(operation, response.status_code, -1, "the answer was not a JSON object")
        code = document.get("code")
        message = document.get("message")
        return cls(
            operation,
            response.status_code,
            code if isinstance(code, int) and not isinstance(code, bool) else -1,
            message if isinstance(message, str) else "",
            document.get("data"),
            response.headers.get("retry-after"),
        )

    def describe(self) -> str:
        return f"{self.operation} was refused: {self.code} {self.message}".rstrip()


class FlowError(SvcgwError):
    """A step refused, by the gateway or the capability layer; ``outcome`` says which and how."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.describe())
        self.outcome = outcome


class AttemptGone(Missing, LookupError):
    """No such login attempt for this account: expired, finished long ago, or another account's."""


# --- the attempt ---------------------------------------------------------------------------
@dataclass
class QrLogin:
    id: str
    appid: str
    stage: str  # closing, qr, done, failed
    proxy: str = ""
    callback_url: str = ""
    uuid: str = ""
    image: str = ""  # a data: URL checked by image_data_url
    refresh_interval: int = 0
    issued_at: float = 0.0
    stopped_at: float = 0.0
    status: int | None = None  # the last checkQr status
    error: str = ""  # the last refused step, for the page
    created: bool = False  # the instance was made by this attempt (device/create)

    def view(self) -> dict[str, Any]:
        """The attempt for the page and the API; without the proxy, which may carry its own credentials."""
        data = asdict(self)
        del data["proxy"]
        data["words"] = login_status_words(self.status) if self.stage == "qr" else None
        data["needs_code"] = self.stage == "qr" and self.status == 10
        data["cancelled"] = self.stage == "qr" and self.status == 4
        return data

    def fields(self) -> dict[str, str]:
        """The hash's fields: None as empty, a flag as 1 or 0."""
        return {k: "" if v is None else str(int(v) if isinstance(v, bool) else v) for k, v in asdict(self).items()}

    @classmethod
    def load(cls, fields: Mapping[str, str]) -> QrLogin:
        status = fields.get("status", "")
        return cls(
            id=fields["id"],
            appid=fields.get("appid", ""),
            # "finished" is written once, by the poll that started the connection, and by nothing else.
            stage="done" if fields.get("finished") == "1" else fields.get("stage", "qr"),
            proxy=fields.get("proxy", ""),
            callback_url=fields.get("callback_url", ""),
            uuid=fields.get("uuid", ""),
            image=fields.get("image", ""),
            refresh_interval=int(fields.get("refresh_interval") or 0),
            issued_at=float(fields.get("issued_at") or 0),
            stopped_at=float(fields.get("stopped_at") or 0),
            status=int(status) if status.lstrip("-").isdigit() else None,
            error=fields.get("error", ""),
            created=fields.get("created") == "1",
        )
