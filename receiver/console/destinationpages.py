"""The console's pages of further destinations (``receiver.console.destinations`` holds what they do).

``GET /console/destinations`` (the account's, for all its instances) and
``GET /console/instances/{appid}/destinations`` (the instance's own, and the
account's it takes too) list them with an add form; ``GET
/console/destinations/{id}`` shows one: its values, its failing banner, its
signing secret with a rotate button, **Send a test**, **Enable** /
**Disable**, **Remove…** (after a confirmation page), its edit form, its
deliveries (newest first, paged with ``?before=``: states, attempts, next
attempt) and its dead letters with their replay buttons (the dead-letters
page's replay, which comes back here). Forms
post back with the CSRF token and are answered with a redirect and a
one-time message, the test POST's outcome in it as for a callback address;
a refused value is shown on the form, typed values kept, nothing saved.
Anything else refused (a destination not found, another account's, a
value refused by a button) is raised, and is the error page of
``receiver.console.answers``.
"""

from __future__ import annotations

from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from receiver.console import codes as console_codes
from svcgw.callbacks.addresses import AddressError
from svcgw.callbacks.destinationrules import (
    KNOWN_EVENT_TYPES,
    MAX_DESTINATIONS,
    DestinationRejected,
    split_event_types,
)
from svcgw.callbacks.testpost import CallbackTestResult
from svcgw.errors import Invalid

from .destinations import Destinations
from .pages import Pages
from .pageserving import PAGE_SIZE, PageError, _field, _path, _redirect
from .session import Session

__all__ = ["DestinationPages"]

# What a form shows on itself, typed values kept: a value the destination cannot hold, an address refused.
FormRefusal = DestinationRejected | AddressError


def _form_values(form: FormData) -> dict[str, Any]:
    """What a destination form holds, as typed (shown again when a value is refused)."""
    checked = [value for value in form.getlist("event_type") if isinstance(value, str)]
    other = _field(form, "other_event_types")
    return {
        "url": _field(form, "url"),
        "label": _field(form, "label"),
        "event_types": checked,
        "other_event_types": other,
        "all_event_types": [*checked, *split_event_types(other)],
        "rate": _field(form, "rate").strip() or None,
        "enabled": _field(form, "enabled") == "on",
        "bearer_token": _field(form, "bearer_token"),
        "bearer": _field(form, "bearer") == "on",
        "keep_token": _field(form, "keep_token") == "on",
    }


def _stored_values(destination: dict[str, Any]) -> dict[str, Any]:
    """The edit form's values from the stored destination."""
    types = list(destination["event_types"])
    return {
        "url": destination["url"],
        "label": destination["label"],
        "event_types": [name for name in types if name in KNOWN_EVENT_TYPES],
        "other_event_types": ", ".join(name for name in types if name not in KNOWN_EVENT_TYPES),
        "rate": f"{destination['rate']:g}" if destination["rate"] else None,
        "enabled": destination["enabled"],
    }


def _refused(exc: FormRefusal) -> dict[str, object]:
    code = console_codes.destination_kind(exc).code if isinstance(exc, DestinationRejected) else exc.code
    return {"code": code, "message": exc.message}


def _saved_message(text: str, test: CallbackTestResult | None) -> dict[str, object]:
    if test is None:
        return {"kind": "ok", "text": text}
    return {"kind": "ok" if test.ok else "warn", "text": text, "test": test.as_dict()}


class DestinationPages:
    def __init__(self, pages: Pages, destinations: Destinations) -> None:
        self.pages = pages
        self.destinations = destinations

    def routes(self) -> list[BaseRoute]:
        page, form = self.pages._page, self.pages._form
        return [
            Route("/destinations", page(self.listed), methods=["GET"], name="destinations"),
            Route("/destinations", form(self.add), methods=["POST"]),
            Route("/instances/{appid}/destinations", page(self.listed), methods=["GET"], name="instance-destinations"),
            Route("/instances/{appid}/destinations", form(self.add), methods=["POST"]),
            Route("/destinations/{destination_id}", page(self.show), methods=["GET"], name="destination"),
            Route("/destinations/{destination_id}", form(self.update), methods=["POST"]),
            Route("/destinations/{destination_id}/enable", form(self.enable), methods=["POST"]),
            Route("/destinations/{destination_id}/disable", form(self.disable), methods=["POST"]),
            Route("/destinations/{destination_id}/rotate-secret", form(self.rotate), methods=["POST"]),
            Route("/destinations/{destination_id}/test", form(self.test), methods=["POST"]),
            Route("/destinations/{destination_id}/remove", page(self.confirm_remove), methods=["GET"]),
            Route("/destinations/{destination_id}/remove", form(self.remove), methods=["POST"]),
        ]

    # --- a scope's list, and adding ----------------------------------------------------------------
    async def listed(
        self,
        request: Request,
        session: Session,
        *,
        values: dict[str, Any] | None = None,
        error: dict[str, object] | None = None,
        status: int = 200,
    ) -> Response:
        appid = request.path_params.get("appid")
        own, inherited = await self.destinations.listed(session.account, appid)
        return await self.pages.render(
            request,
            "destinations.html",
            session,
            status=status,
            nav="instances" if appid else "destinations",
            appid=appid,
            destinations=own,
            account_destinations=inherited,
            values=values or {"enabled": True, "event_types": []},
            error=error,
            known_types=KNOWN_EVENT_TYPES,
            limit=MAX_DESTINATIONS,
        )

    async def add(self, request: Request, session: Session) -> Response:
        appid = request.path_params.get("appid")
        values = _form_values(request.state.form)
        try:
            view, test = await self.destinations.add(
                session.account,
                appid,
                values["url"],
                label=values["label"],
                event_types=values["all_event_types"],
                rate=values["rate"],
                enabled=values["enabled"],
                bearer_token=values["bearer_token"],
            )
        except (DestinationRejected, AddressError) as exc:  # the form again
            return await self.listed(request, session, values=values, error=_refused(exc), status=exc_status(exc))
        await self.pages.sessions.flash(session, _saved_message("Destination added.", test))
        return _redirect(_path("destinations", view["id"]))

    # --- one destination ----------------------------------------------------------------------
    async def show(
        self,
        request: Request,
        session: Session,
        *,
        values: dict[str, Any] | None = None,
        error: dict[str, object] | None = None,
        status: int = 200,
    ) -> Response:
        destination = await self.destinations.show(session.account, request.path_params["destination_id"])
        before = request.query_params.get("before") or None
        try:
            deliveries = await self.destinations.deliveries(
                session.account, destination["id"], limit=PAGE_SIZE, before=before
            )
        except Invalid as exc:
            raise PageError(400, "Bad page", str(exc)) from None
        letters, dead_total = await self.destinations.dead_letters(session.account, destination["id"], limit=PAGE_SIZE)
        return await self.pages.render(
            request,
            "destination.html",
            session,
            status=status,
            nav="instances" if destination["appid"] else "destinations",
            appid=destination["appid"],
            destination=destination,
            values=values or _stored_values(destination),
            error=error,
            known_types=KNOWN_EVENT_TYPES,
            deliveries=deliveries,
            first_page=before is None,
            letters=letters,
            dead_total=dead_total,
        )

    async def update(self, request: Request, session: Session) -> Response:
        destination_id = request.path_params["destination_id"]
        values = _form_values(request.state.form)
        try:
            _, test = await self.destinations.update(
                session.account,
                destination_id,
                url=values["url"],
                label=values["label"],
                event_types=values["all_event_types"],
                rate=values["rate"],
                enabled=values["enabled"],
                bearer_token=values["bearer_token"],
                bearer=values["bearer"],
                keep_token=values["keep_token"],
            )
        except (DestinationRejected, AddressError) as exc:  # the form again
            return await self.show(request, session, values=values, error=_refused(exc), status=exc_status(exc))
        await self.pages.sessions.flash(session, _saved_message("Destination saved.", test))
        return _redirect(_path("destinations", destination_id))

    async def enable(self, request: Request, session: Session) -> Response:
        return await self._switch(request, session, enabled=True)

    async def disable(self, request: Request, session: Session) -> Response:
        return await self._switch(request, session, enabled=False)

    async def _switch(self, request: Request, session: Session, *, enabled: bool) -> Response:
        destination_id = request.path_params["destination_id"]
        _, test = await self.destinations.update(session.account, destination_id, enabled=enabled)
        text = "Destination enabled." if enabled else "Destination disabled: nothing is sent to it until enabled."
        await self.pages.sessions.flash(session, _saved_message(text, test))
        return _redirect(_path("destinations", destination_id))

    async def rotate(self, request: Request, session: Session) -> Response:
        destination_id = request.path_params["destination_id"]
        await self.destinations.rotate(session.account, destination_id)
        await self.pages.sessions.flash(
            session,
            {"kind": "ok", "text": "New signing secret in use for this destination; the old one is gone."},
        )
        return _redirect(_path("destinations", destination_id))

    async def test(self, request: Request, session: Session) -> Response:
        destination_id = request.path_params["destination_id"]
        result = await self.destinations.test(session.account, destination_id)
        await self.pages.sessions.flash(session, _saved_message("Test sent.", result))
        return _redirect(_path("destinations", destination_id))

    async def confirm_remove(self, request: Request, session: Session) -> Response:
        destination = await self.destinations.show(session.account, request.path_params["destination_id"])
        return await self.pages.render(
            request, "remove_destination.html", session, nav="destinations", destination=destination
        )

    async def remove(self, request: Request, session: Session) -> Response:
        removed = await self.destinations.remove(session.account, request.path_params["destination_id"])
        name = removed["label"] or removed["url"]
        await self.pages.sessions.flash(session, {"kind": "info", "text": f"Destination {name} removed."})
        appid = removed["appid"]
        return _redirect(_path("instances", appid, "destinations") if appid else _path("destinations"))


def exc_status(exc: FormRefusal) -> int:
    """The page's status for a refused value: the row's (an address refused is 400)."""
    return console_codes.destination_kind(exc).status if isinstance(exc, DestinationRejected) else 400
