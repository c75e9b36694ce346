"""The API keys page and its JSON API: create a key with a label, list them, revoke one.

Keys are the store's (``svcgw.registry.store``: kept as SHA-256 digests, a prefix
to recognise them, a label, ``last_used`` written by the gateway). A new
key is shown once, in the answer that creates it, and never again: the page
answers the form itself instead of redirecting, so the key is not parked in
the session for the next page. Revoking deletes the key's look-up entry, so
the gateway refuses the very next call made with it (the gateway reads the
key's look-up on every call; it remembers only the key's id and account).

Every key belongs to one account: another account's key id answers 404
exactly like one that does not exist, and nothing is changed.

The page shows a new key in a read-only text field, selectable by hand, and
a Copy button that a small inline script shows and drives. The script is
allowed by a nonce of this one answer (``script-src 'nonce-...'``); without
scripts the button stays hidden and the key can still be selected.

Pages: ``GET /console/keys``, ``POST /console/keys`` (``label``), ``POST
/console/keys/{key_id}/revoke``. API: ``GET /console/api/keys``, ``POST
/console/api/keys`` (``{"label"}``, 201), ``DELETE /console/api/keys/{key_id}``.
Creating and revoking count against the account's rate limit.
"""

from __future__ import annotations

import secrets

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from receiver.console import codes as console_codes
from svcgw.errors import NotFound
from svcgw.registry.store import MAX_LABEL_LENGTH, ApiKey, Store

from .api import Api
from .pages import CONTENT_SECURITY_POLICY, Pages, _field, _path, _redirect
from .requests import parsed_body
from .schemas import NewKeyRequest
from .session import Session
from .web import ConsoleHTTPError, json_ok

__all__ = ["KeyApi", "KeyPages", "Keys"]


def _view(key: ApiKey) -> dict[str, object]:
    """What the account sees of one of its keys: never the key, never its digest."""
    data = key.as_dict()
    data.pop("account", None)
    return data


class Keys:
    """An account's keys, every call scoped to it."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def of(self, account: str) -> list[ApiKey]:
        """Keys in use first, newest first; then revoked ones, newest revoked first."""
        found = await self.store.list_keys(account)
        active = sorted((k for k in found if k.revoked_at is None), key=lambda k: -k.created_at)
        revoked = sorted((k for k in found if k.revoked_at is not None), key=lambda k: -(k.revoked_at or 0))
        return active + revoked

    async def create(self, account: str, label: str) -> tuple[ApiKey, str]:
        try:
            return await self.store.create_key(account, label)
        except ValueError as exc:
            raise ConsoleHTTPError(console_codes.BAD_REQUEST, str(exc)) from None

    async def revoke(self, account: str, key_id: str) -> ApiKey:
        """Revoke one of the account's keys; another account's is not found, like one that does not exist."""
        key = await self.store.get_key(key_id) if len(key_id) <= 64 else None
        if key is None or key.account != account:
            raise NotFound("no such API key", what="api key")
        return await self.store.revoke_key(key_id)


class KeyPages:
    def __init__(self, pages: Pages) -> None:
        self.pages = pages
        self.keys = Keys(pages.service.store)

    def routes(self) -> list[BaseRoute]:
        page, form = self.pages._page, self.pages._form
        return [
            Route("/keys", page(self.page), methods=["GET"], name="keys"),
            Route("/keys", form(self.create), methods=["POST"]),
            Route("/keys/{key_id}/revoke", form(self.revoke), methods=["POST"]),
        ]

    async def page(
        self,
        request: Request,
        session: Session,
        *,
        created: tuple[ApiKey, str] | None = None,
        error: str | None = None,
        status: int = 200,
    ) -> Response:
        nonce = secrets.token_urlsafe(18)
        response = await self.pages.render(
            request,
            "keys.html",
            session,
            status=status,
            nav="keys",
            keys=await self.keys.of(session.account),
            created=created[0] if created else None,
            created_key=created[1] if created else None,
            label_limit=MAX_LABEL_LENGTH,
            error=error,
            nonce=nonce,
        )
        # The page's one script (the Copy button), and nothing else.
        response.headers["Content-Security-Policy"] = f"{CONTENT_SECURITY_POLICY}; script-src 'nonce-{nonce}'"
        return response

    async def create(self, request: Request, session: Session) -> Response:
        form: FormData = request.state.form
        try:
            created = await self.keys.create(session.account, _field(form, "label"))
        except ConsoleHTTPError as exc:  # the form again, with the reason in it
            return await self.page(request, session, error=exc.message, status=exc.status)
        # Answered here, not redirected: the key is shown this once and kept nowhere.
        return await self.page(request, session, created=created, status=201)

    async def revoke(self, request: Request, session: Session) -> Response:
        key = await self.keys.revoke(session.account, request.path_params["key_id"])
        name = f"“{key.label}” ({key.prefix}…)" if key.label else f"{key.prefix}…"
        await self.pages.sessions.flash(
            session, {"kind": "ok", "text": f"Key {name} revoked: the gateway refuses it from now on."}
        )
        return _redirect(_path("keys"))


class KeyApi:
    def __init__(self, api: Api) -> None:
        self.api = api
        self.keys = Keys(api.service.store)

    async def listed(self, request: Request, session: Session) -> Response:
        return json_ok({"keys": [_view(key) for key in await self.keys.of(session.account)]})

    async def create(self, request: Request, session: Session) -> Response:
        label = (await parsed_body(request, NewKeyRequest)).label or ""
        key, clear = await self.keys.create(session.account, label)
        return json_ok({**_view(key), "key": clear}, status=201)

    async def revoke(self, request: Request, session: Session) -> Response:
        key = await self.keys.revoke(session.account, request.path_params["key_id"])
        return json_ok(_view(key))
