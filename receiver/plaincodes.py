"""The operators' endpoints' error answers: /metrics, /docs and the rq-dashboard at /rq.

Not JSON: each answers with the row's message as one line of text and its
newline (``receiver.http.plain_answer``), with the row's status; the code is
the HTTP status.
"""

from __future__ import annotations

from svcgw.errors import ErrorKind

__all__ = [
    "DASHBOARD_LIMITED",
    "DASHBOARD_NOT_FOUND",
    "DASHBOARD_NO_JOB",
    "DASHBOARD_READ_ONLY",
    "DASHBOARD_SIGN_IN",
    "DASHBOARD_UNAVAILABLE",
    "DOCS_NOT_FOUND",
    "METRICS_NOT_LOCAL",
    "METRICS_TOKEN_REQUIRED",
    "METRICS_UNAVAILABLE",
    "PLAIN_KINDS",
]

# /metrics, /docs and the rq-dashboard at /rq answer in text, one line and its
# newline (``receiver.http.plain_answer``); the code is the HTTP status.
METRICS_TOKEN_REQUIRED = ErrorKind(401, 401, "a bearer token is required")
METRICS_NOT_LOCAL = ErrorKind(403, 403, "set SVCGW_METRICS_TOKEN to scrape from another host")
METRICS_UNAVAILABLE = ErrorKind(503, 503, "storage unavailable")
DOCS_NOT_FOUND = ErrorKind(404, 404, "not found")
DASHBOARD_SIGN_IN = ErrorKind(401, 401, "authentication required")
DASHBOARD_READ_ONLY = ErrorKind(
    403, 403, "the dashboard is read-only here; replay dead letters with `svcgw dlq replay` or the console"
)
DASHBOARD_NOT_FOUND = ErrorKind(404, 404, "not found in the dashboard")  # then ": " and why
DASHBOARD_NO_JOB = ErrorKind(404, 404, "no such job")
DASHBOARD_LIMITED = ErrorKind(
    429, 429, "too many wrong credentials from this address; retry after the time in Retry-After"
)
# Its text never names the Redis (the host may be in it).
DASHBOARD_UNAVAILABLE = ErrorKind(503, 503, "Redis does not answer; try again shortly")

PLAIN_KINDS: tuple[ErrorKind, ...] = (
    METRICS_TOKEN_REQUIRED,
    METRICS_NOT_LOCAL,
    METRICS_UNAVAILABLE,
    DOCS_NOT_FOUND,
    DASHBOARD_SIGN_IN,
    DASHBOARD_READ_ONLY,
    DASHBOARD_NOT_FOUND,
    DASHBOARD_NO_JOB,
    DASHBOARD_LIMITED,
    DASHBOARD_UNAVAILABLE,
)
