"""The gateway API: ``POST /svc/api/{module}/{action}`` and ``POST /svc/instances/set-callback``.

Every operation, listed in the spec or not, is forwarded to
``SVCGW_UPSTREAM_URL`` + the same path with the request body as received,
and the capability layer's answer is returned as it came: HTTP 200, the same
bytes (19-digit integers untouched). The only rewrites are the
``callbackUrl`` field sent upstream by ``long/start`` and
``long/updateCallbackURL`` (the caller's address is swapped for the
instance's receiver URL) and, in an answer, any mention of that receiver URL
(swapped back for the caller's address; see :mod:`.scrub`).

Order of checks; the first one that fails answers, with
``{code, message, data: null}``:

1. Path, before routing, on the raw path as received (``PathGuard``), for
   paths under ``/svc/api/`` or ``/svc/instances/``: a trailing slash, an
   empty segment, a dot segment, an encoded ``/`` or ``.`` (``%2f``,
   ``%2e``, any case), or an API path other than ``/svc/api/{module}/{action}``
   is -40004 (400).
2. API key, from ``Svc-Key``, ``X-Svc-Key`` or ``Authorization: Bearer``
   (``receiver.http.presented_key``): missing, invalid, revoked, or several
   headers carrying different keys is 401 (code 401). Its look-up is
   guarded per client address (``receiver.credentialguard``): a key not
   found valid lately in this process, from an address whose window of
   failed keys (``SVCGW_KEY_FAILURES_PER_ADDRESS``) is full, or that finds
   no place for its look-up in time, is -42900 (429) with ``Retry-After``,
   unchecked.
3. Rate limit (``receiver.ratelimit``): every call that got past 2 counts,
   whatever its outcome, a refused one included; excess is -42900 (429)
   with ``Retry-After``.
4. Body: larger than ``SVCGW_GATEWAY_MAX_BODY_BYTES`` (1 MiB), or for the
   upload operations (``cdn/uploadImage``, ``cdn/uploadFile``,
   ``cdn/uploadVideo``) ``SVCGW_UPLOAD_MAX_BODY_BYTES`` (32 MiB), is -41300
   (413), refused on its ``Content-Length`` before it is read when it
   declares one. A body that would take the account's calls in progress
   past ``SVCGW_ACCOUNT_INFLIGHT_BYTES`` of bodies held at once (64 MiB,
   per server process; :mod:`.inflight`) is -42900 (429) with
   ``Retry-After``, as soon as that is known. Not UTF-8 JSON (strictly:
   not UTF-16 or UTF-32, no escaped lone surrogate), or not a JSON
   object, is -40001 (400). A body over 64 KiB is parsed in a worker
   thread.
5. Instance field: a spelling of it other than ``appid`` or ``ql_appid``
   (``appId``, ``app_id``, ``APPID``, ``qlAppId``...), either one sent twice,
   or both sent with different values is -40002 (400). Both with the same
   value count as one field. ``ql_appid`` is accepted on every operation,
   not only ``friend/deleteSnsComment``: the spec names it without saying
   where it stops applying, and the body goes upstream as sent either way.
6. ``appid`` present: missing (or null) is -40001 (400), except on the
   operations that configure a callback (``long/start``,
   ``long/updateCallbackURL``, ``set-callback``), where it is -40010 (400);
   a body that is not an object stays -40001 there too, as check 4 answers
   first. A value that is not a string is -40001 (400).
7. Controlled operation: one the console denied to the account
   (``svcgw accounts deny``; compared without regard to case) is -40300
   (403). ``set-callback`` is the operation ``instances/set-callback``.
8. ``callbackUrl`` or ``pushHistory`` (or another spelling of them, such as
   ``callbackURL``) on any other operation is -40403 (403); on the
   callback operations, another spelling is -40403 too, so no address
   reaches the capability layer unchecked. ``set-callback`` is the route
   ``/svc/instances/set-callback`` only: ``/svc/api/instances/set-callback``
   is an API operation like any unlisted one, and takes neither field. The
   same answer stands at the last step, whatever routed a call there: a body
   goes upstream only through ``body.outbound_body``, which makes every
   ``callbackUrl`` the instance's receiver URL, or refuses the call (-40403)
   when the operation does not configure the callback.
9. Ownership, except on ``device/create``: an ``appid`` that does not exist
   and one of another account get the same -40404 (404) after the same
   Redis work (one ``HGET``, inside the admission script for a small body).
10. Per operation:

    * ``device/create`` (any string ``appid``, the empty one included):
      entitlement expired is -40402 (403), quota full -40402 (402). A slot
      is reserved atomically before forwarding (:class:`DeviceQuota`), so
      concurrent creates never exceed the quota; a new ``data.appid`` in a
      code-0 answer is registered under the account, and the slot is
      released whatever happened.
    * ``long/start``, ``long/updateCallbackURL``, ``set-callback``:
      ``callbackUrl`` must pass ``check_callback_url`` (-40011, -40012,
      -40013; missing is -40011). The first two forward with the receiver
      URL in its place; when the capability layer answers code 0, and for
      ``long/start`` also code -1 with message ``started`` (already
      running: the connection was reset and runs on with the receiver URL
      of its first start, which is this same URL), the caller's address
      becomes the instance's forward address, and ``long/start`` marks the
      instance maintained again. Any other answer leaves the stored address
      as it was and is passed on. ``set-callback`` is not forwarded: it only
      stores the address and answers ``{code: 0, message: "ok", time,
      data: {appid, callbackUrl}}``.
    * ``long/stop`` and ``login/logout`` with code 0 update the instance's
      liveness state; ``login/getQr``, ``login/checkQr`` and
      ``login/reconnect`` with code 0 remember the ``proxy`` sent.

11. Forwarding: no answer (connection failure, timeout) or an unusable one
    (not HTTP 200 with a JSON object carrying an integer ``code``) is
    -50002 (502); on ``long/start`` and ``long/updateCallbackURL`` it is
    -50000 (502), as is a failure to store the address afterwards.

Redis being unreachable at any step is -50002 (502). The query string of a
gateway call is not forwarded: operations take their input from the body.

Checks 2, 3, 7 and 9 read Redis in one round trip, one script
(:mod:`.admission`); the handler judges what it read in the order above.
A call on a plain API path skips the router (``direct_operation``,
``Gateway.direct``); ``Gateway.invoke`` runs checks 3 to 11 for an account
signed in elsewhere (the console).

Modules: :mod:`.paths` (check 1), :mod:`.admission` (what checks 2, 3, 7
and 9 read), :mod:`.body` (checks 4, 5, 6, 8),
:mod:`.inflight` (the bytes of check 4 held per account), :mod:`.quota`
(the device quota of check 10), :mod:`.scrub` (the receiver token out of
answers), :mod:`.intake` (a call's path, key and body as read),
:mod:`.handlers` (the routes, the order above, and the one mapping of
refusals to answers) and :mod:`.forwarding` (checks 10 and 11, forwarding).
"""

from __future__ import annotations

from .body import instance_id
from .handlers import API_PATH, SET_CALLBACK_PATH, Gateway, direct_operation
from .paths import PathGuard, path_problem
from .quota import DeviceQuota
from .scrub import scrub

__all__ = [
    "API_PATH",
    "SET_CALLBACK_PATH",
    "DeviceQuota",
    "Gateway",
    "PathGuard",
    "direct_operation",
    "instance_id",
    "path_problem",
    "scrub",
]
