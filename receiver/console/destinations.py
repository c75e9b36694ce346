"""Further destinations in the console: what it does for one account, and the JSON API.

A further destination (``docs/destinations.md``) is a callback address beside
the primary one, on the account (for all its instances) or on one instance,
with its own signing secret, optional Bearer token, event types, rate limit
and enabled flag (``svcgw.registry.destinations``). Every call is scoped to
the signed-in account: another account's destination, like another
account's instance, answers 404 exactly as one that does not exist, and
nothing is changed.

Saving one checks its address first (-40011/-40012/-40013, nothing saved),
then sends it one ``SvcCallbackTest`` POST signed with its own secret
(``svcgw.registry.destinationtest``): when it is created, and when an update
changes its address or its token or enables it again; ``/test`` sends one on
demand. The destination stays saved whatever the test answers. The token is
never shown, only whether one is set; a list leaves out the signing secrets,
one destination shows its own.

A destination's deliveries (``svcgw.delivery.bydestination``: newest first,
paged, from its index on its instance's shard or, for an account's, on every
shard) and its dead letters (``svcgw.delivery.deadletters``, narrowed to it) are read
only after the destination is found to be the account's.

API (under ``/console/api``): ``GET|POST /destinations`` (the account's),
``GET|POST /instances/{appid}/destinations`` (the instance's own; the list
also names the account's, which the instance takes too), ``GET|PATCH|DELETE
/destinations/{id}``, ``POST /destinations/{id}/rotate-secret``,
``POST /destinations/{id}/test`` and ``GET /destinations/{id}/deliveries``. Changes count against the account's rate
limit like every change of the console.

What is refused is raised: a value a destination cannot hold
(``DestinationRejected``, whose class picks its row: ``receiver.console.codes.destination_kind``),
a destination not found
(``svcgw.errors.NotFound``, ``what="destination"``: -40404), an address
(``AddressError``); ``receiver.console.answers`` answers them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from msgspec import UNSET
from starlette.requests import Request
from starlette.responses import Response

from svcgw.callbacks.addresses import check_for_service
from svcgw.callbacks.testpost import CallbackTestResult
from svcgw.delivery import bydestination, failingorigins, listing
from svcgw.registry.destinations import KEEP, DestinationChange, DestinationConfig, Keep
from svcgw.registry.destinationtest import needs_test, send_destination_test
from svcgw.registry.store import Scope
from svcgw.threads import in_thread

from .requests import parsed_body
from .schemas import DestinationRequest, DestinationUpdate
from .session import Session
from .web import int_param, json_ok

if TYPE_CHECKING:
    from receiver.services import Services

    from .api import Api
    from .service import ConsoleService

__all__ = ["DestinationApi", "Destinations"]

Saved = tuple[dict[str, Any], CallbackTestResult | None]


class Destinations:
    """An account's further destinations, every call scoped to it; the pages and the API both call this."""

    def __init__(self, services: Services, service: ConsoleService) -> None:
        self.service = service  # ownership of instances
        self.store = services.store
        self.settings = services.settings
        self.texts = services.text_shards
        self._sender = services.callbacks

    # --- reading -------------------------------------------------------------------------
    async def listed(self, account: str, appid: str | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The scope's own destinations, and for an instance its account's (which it takes too); no secrets."""
        scope = await self._scope(account, appid)
        own = await self.store.list_destinations(scope)
        inherited = await self.store.list_destinations(Scope(account=account)) if appid is not None else []
        failing = await self._failing(account, [*own, *inherited])
        return [self._view(d, failing, secret=False) for d in own], [
            self._view(d, failing, secret=False) for d in inherited
        ]

    async def show(self, account: str, destination_id: str) -> dict[str, Any]:
        found = await self.store.get_destination(destination_id, account=account)
        return self._view(found, await self._failing(account, [found]))

    async def deliveries(
        self, account: str, destination_id: str, *, limit: int = 20, before: str | None = None
    ) -> listing.Page:
        """A page of the destination's deliveries, newest first; ``NotFound`` for another account's destination."""
        found = await self.store.get_destination(destination_id, account=account)
        return await bydestination.list_destination_deliveries(
            self.service.shards,
            self.settings,
            found.id,
            appid=found.appid,
            account=account,
            limit=limit,
            before=before,
        )

    async def dead_letters(
        self, account: str, destination_id: str, *, limit: int = 20
    ) -> tuple[list[dict[str, Any]], int]:
        """The destination's newest dead letters, with their attempts and bodies, and how many it has."""
        found = await self.store.get_destination(destination_id, account=account)
        return await self.service.dead_letters(account, found.appid, limit=limit, detailed=True, destination=found.id)

    # --- changing ----------------------------------------------------------------------------
    async def add(
        self,
        account: str,
        appid: str | None,
        url: str,
        *,
        label: str = "",
        event_types: Sequence[str] = (),
        rate: float | str | None = None,
        enabled: bool = True,
        bearer_token: str = "",
    ) -> Saved:
        """Check the address (``AddressError``, nothing saved), save, then send the test."""
        scope = await self._scope(account, appid)
        checked = await in_thread(check_for_service, url.strip(), self.settings, abandon_on_cancel=False)
        saved = await self.store.add_destination(
            scope,
            checked,
            label=label,
            event_types=event_types,
            rate=rate,
            enabled=enabled,
            bearer_token=bearer_token.strip() or None,
        )
        return await self._saved(account, saved, test=True)

    async def update(
        self,
        account: str,
        destination_id: str,
        *,
        url: str | Keep = KEEP,
        label: str | Keep = KEEP,
        event_types: Sequence[str] | Keep = KEEP,
        rate: float | str | Keep | None = KEEP,
        enabled: bool | Keep = KEEP,
        bearer_token: str = "",
        bearer: bool | None = None,
        keep_token: bool = False,
    ) -> Saved:
        """Change what is given; a blank ``bearer_token`` keeps the token (same origin), ``bearer`` False deletes it."""
        before = await self.store.get_destination(destination_id, account=account)
        checked = (
            KEEP
            if isinstance(url, Keep)
            else await in_thread(check_for_service, url.strip(), self.settings, abandon_on_cancel=False)
        )
        token = bearer_token.strip() if bearer is not False else ""
        change = DestinationChange(
            url=checked,
            label=label,
            event_types=event_types,
            rate=rate,
            enabled=enabled,
            bearer_token=token or None,
            no_bearer=bearer is False,
            keep_token=keep_token,
        )
        after = await self.store.update_destination(destination_id, change, account=account)
        return await self._saved(account, after, test=needs_test(before, after, new_token=bool(token)))

    async def rotate(self, account: str, destination_id: str) -> dict[str, Any]:
        rotated = await self.store.rotate_destination_secret(destination_id, account=account)
        return self._view(rotated, await self._failing(account, [rotated]))

    async def remove(self, account: str, destination_id: str) -> dict[str, Any]:
        removed = await self.store.remove_destination(destination_id, account=account)
        return self._view(removed, {}, secret=False)

    async def test(self, account: str, destination_id: str) -> CallbackTestResult:
        return await send_destination_test(self.store, self._sender(), destination_id, account=account)

    # --- the parts ---------------------------------------------------------------------------------
    async def _scope(self, account: str, appid: str | None) -> Scope:
        if appid is None:
            return Scope(account=account)
        await self.service.check_owner(account, appid)
        return Scope(appid=appid)

    async def _saved(self, account: str, saved: DestinationConfig, *, test: bool) -> Saved:
        result = await self.test(account, saved.id) if test else None
        return self._view(saved, await self._failing(account, [saved])), result

    async def _failing(self, account: str, found: Sequence[DestinationConfig]) -> dict[str, float]:
        """Since when each failing origin of ``found``'s addresses (``account``'s destinations) fails for
        ``account`` (``svcgw.delivery.failingorigins``)."""
        origins = {failingorigins.origin_of(d.url) for d in found} - {""}
        if not origins:
            return {}
        failing = await failingorigins.failing_anywhere(self.texts, self.settings, origins, account=account)
        return {name: record.first_failure for name, record in failing.items()}

    @staticmethod
    def _view(found: DestinationConfig, failing: dict[str, float], *, secret: bool = True) -> dict[str, Any]:
        return {
            **found.as_dict(secret=secret),
            "failing_since": failing.get(failingorigins.origin_of(found.url)),
        }


def _saved_answer(saved: Saved, status: int = 200) -> Response:
    view, test = saved
    return json_ok({"destination": view, "test": test.as_dict() if test else None}, status=status)


class DestinationApi:
    """The JSON API's routes (see the module docstring)."""

    def __init__(self, api: Api, destinations: Destinations) -> None:
        self.api = api
        self.destinations = destinations

    async def listed(self, request: Request, session: Session) -> Response:
        appid = request.path_params.get("appid")
        own, inherited = await self.destinations.listed(session.account, appid)
        data: dict[str, Any] = {"destinations": own}
        if appid is not None:
            data["account_destinations"] = inherited
        return json_ok(data)

    async def add(self, request: Request, session: Session) -> Response:
        appid = request.path_params.get("appid")
        if appid is not None:
            # Ownership before the body: another account's appid answers 404 whatever is sent.
            await self.destinations.service.check_owner(session.account, appid)
        body = await parsed_body(request, DestinationRequest)
        saved = await self.destinations.add(
            session.account,
            appid,
            body.url,
            label=body.label or "",
            event_types=body.event_types or (),
            rate=body.rate,
            enabled=body.enabled,
            bearer_token=body.bearer_token or "",
        )
        return _saved_answer(saved, status=201)

    async def show(self, request: Request, session: Session) -> Response:
        return json_ok(await self.destinations.show(session.account, request.path_params["destination_id"]))

    async def update(self, request: Request, session: Session) -> Response:
        destination_id = request.path_params["destination_id"]
        # Ownership before the body, as for an instance.
        await self.destinations.show(session.account, destination_id)
        body = await parsed_body(request, DestinationUpdate)
        saved = await self.destinations.update(
            session.account,
            destination_id,
            url=KEEP if body.url is UNSET else body.url,
            label=KEEP if body.label is UNSET else body.label,
            event_types=KEEP if body.event_types is UNSET else body.event_types,
            rate=KEEP if body.rate is UNSET else body.rate,
            enabled=KEEP if body.enabled is UNSET else body.enabled,
            bearer_token=body.bearer_token or "",
            bearer=None if body.bearer is UNSET else body.bearer,
            keep_token=body.keep_token is True,
        )
        return _saved_answer(saved)

    async def remove(self, request: Request, session: Session) -> Response:
        return json_ok(await self.destinations.remove(session.account, request.path_params["destination_id"]))

    async def rotate(self, request: Request, session: Session) -> Response:
        return json_ok(await self.destinations.rotate(session.account, request.path_params["destination_id"]))

    async def test(self, request: Request, session: Session) -> Response:
        result = await self.destinations.test(session.account, request.path_params["destination_id"])
        return json_ok(result.as_dict())

    async def deliveries(self, request: Request, session: Session) -> Response:
        page = await self.destinations.deliveries(
            session.account,
            request.path_params["destination_id"],
            limit=int_param(request, "limit", 20, minimum=1, maximum=200),
            before=request.query_params.get("before") or None,
        )
        return json_ok(page.as_dict())
