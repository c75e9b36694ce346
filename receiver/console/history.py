"""The console's pages of what happened to callbacks: the log, dead letters, deliveries.

The callback log of an instance, page by page; the dead letters with their
attempts and destination (filtered by instance or destination), and their
replay (chosen ones, an instance's all, or those that died in the last
stretch of time); an instance's deliveries with their attempts and
destination, and retry now for a retrying one.

A value the service refuses (``Invalid``) becomes a ``PageError`` whose
title says what the page was doing ("Bad filter", "Cannot replay"); the
error page itself is ``receiver.console.answers``'s.
"""

from __future__ import annotations

from urllib.parse import urlencode

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from svcgw.delivery.listing import STATES
from svcgw.delivery.outcomes import ANSWERS_NOTE
from svcgw.intake.calllog import parse_since

from .pageserving import PAGE_SIZE, PageError, PageKit, _field, _path, _redirect, _safe_next
from .service import Invalid, NotRetrying
from .session import Session

__all__ = ["HistoryPages"]


class HistoryPages(PageKit):
    """The pages of the callback log, the dead letters and the deliveries."""

    # --- callback log ---------------------------------------------------------------------------
    async def log(self, request: Request, session: Session) -> Response:
        appid = request.path_params["appid"]
        before = request.query_params.get("before") or None
        try:
            entries, following = await self.service.log(session.account, appid, limit=PAGE_SIZE, before=before)
        except Invalid as exc:
            raise PageError(400, "Bad page", str(exc)) from None
        rows = []
        for entry in entries:
            try:
                body, binary = entry.body.decode("utf-8"), False
            except UnicodeDecodeError:
                body, binary = entry.body.decode("utf-8", "replace"), True
            rows.append({"entry": entry, "body": body, "binary": binary})
        return await self.render(
            request,
            "log.html",
            session,
            nav="instances",
            appid=appid,
            rows=rows,
            next_before=following,
            first_page=before is None,
        )

    # --- dead letters ---------------------------------------------------------------------------
    async def dead_letters(self, request: Request, session: Session) -> Response:
        appid = request.query_params.get("appid") or None
        destination = (request.query_params.get("destination") or "").strip() or None
        try:
            page = max(int(request.query_params.get("page", "1")), 1)
        except ValueError:
            page = 1
        try:
            rows, total = await self.service.dead_letters(
                session.account,
                appid,
                limit=PAGE_SIZE,
                offset=(page - 1) * PAGE_SIZE,
                detailed=True,
                destination=destination,
            )
        except Invalid as exc:
            raise PageError(400, "Bad filter", str(exc)) from None
        appids = await self.service.store.instances_of(session.account)
        return await self.render(
            request,
            "dead_letters.html",
            session,
            nav="dead-letters",
            appid=appid,
            appids=appids,
            destination=destination,
            rows=rows,
            total=total,
            page=page,
            pages=max((total + PAGE_SIZE - 1) // PAGE_SIZE, 1),
            retries=len(self.context.settings.retry_schedule),
        )

    async def dead_letter(self, request: Request, session: Session) -> Response:
        letter = await self.service.dead_letter(session.account, request.path_params["delivery_id"])
        return await self.render(request, "dead_letter.html", session, nav="dead-letters", letter=letter)

    async def replay(self, request: Request, session: Session) -> Response:
        form: FormData = request.state.form
        one = _field(form, "one")
        ids = [one] if one else [value for value in form.getlist("ids") if isinstance(value, str) and value]
        appid = _field(form, "appid") or None
        every = not one and _field(form, "scope") == "all"
        # Back where the replay was asked: the dead letters' page, or a destination's (``next``).
        back = _safe_next(_field(form, "next")) or (
            _path("dead-letters") + (f"?{urlencode({'appid': appid})}" if appid else "")
        )
        if _field(form, "scope") == "since":
            return await self._replay_since(session, appid, _field(form, "since"), back)
        if every and appid is None:
            raise PageError(400, "Choose an instance", "Replaying all dead letters works one instance at a time.")
        if not every and not ids:
            await self.sessions.flash(session, {"kind": "warn", "text": "Select at least one dead letter to replay."})
            return _redirect(back)
        try:
            results = await self.service.replay(
                session.account, ids=None if every else ids, appid=appid if every else None
            )
        except Invalid as exc:
            raise PageError(400, "Cannot replay", str(exc)) from None
        replayed = sum(1 for result in results if result["status"] == "replayed")
        missed = len(results) - replayed
        text = f"{replayed} dead letter{'s' if replayed != 1 else ''} queued for one fresh attempt."
        if missed:
            text += f" {missed} could not be replayed (already replayed, expired or not found)."
        await self.sessions.flash(session, {"kind": "ok" if replayed and not missed else "warn", "text": text})
        return _redirect(back)

    async def _replay_since(self, session: Session, appid: str | None, since: str, back: str) -> Response:
        try:
            seconds = parse_since(since)
        except ValueError as exc:
            raise PageError(400, "Cannot replay", f"Since when? {exc}.") from None
        results = await self.service.replay(session.account, appid=appid, since_seconds=seconds)
        replayed = sum(1 for result in results if result["status"] == "replayed")
        where = "of this instance" if appid else "of your instances"
        text = (
            f"{replayed} dead letter{'s' if replayed != 1 else ''} {where} that died in the last {since.strip()} "
            "queued for one fresh attempt."
        )
        missed = len(results) - replayed
        if missed:
            text += f" {missed} could not be replayed (already replayed or expired)."
        await self.sessions.flash(session, {"kind": "ok" if not missed else "warn", "text": text})
        return _redirect(back)

    # --- deliveries ---------------------------------------------------------------------------------
    async def deliveries(self, request: Request, session: Session) -> Response:
        appid = request.path_params["appid"]
        params = request.query_params
        state = params.get("state") or None
        event_type = (params.get("event_type") or "").strip() or None
        event_id = (params.get("event_id") or "").strip() or None
        destination = (params.get("destination") or "").strip() or None
        before = params.get("before") or None
        try:
            page = await self.service.deliveries(
                session.account,
                appid,
                state=state,
                event_type=event_type,
                event_id=event_id,
                destination=destination,
                limit=PAGE_SIZE,
                before=before,
            )
        except Invalid as exc:
            raise PageError(400, "Bad filter", str(exc)) from None
        filters = {
            "state": state or "",
            "event_type": event_type or "",
            "event_id": event_id or "",
            "destination": destination or "",
        }
        return await self.render(
            request,
            "deliveries.html",
            session,
            nav="instances",
            appid=appid,
            page=page,
            states=STATES,
            retention=_duration(self.context.settings.log_retention),
            filters=filters,
            first_page=before is None,
            older=urlencode({**filters, "before": page.next_before}) if page.next_before else None,
            newest=urlencode({k: v for k, v in filters.items() if v}),
        )

    async def delivery(self, request: Request, session: Session) -> Response:
        found = await self.service.delivery(session.account, request.path_params["delivery_id"])
        return await self.render(
            request, "delivery.html", session, nav="instances", delivery=found, answers_note=ANSWERS_NOTE
        )

    async def retry_now(self, request: Request, session: Session) -> Response:
        delivery_id = request.path_params["delivery_id"]
        form: FormData = request.state.form
        try:
            await self.service.retry_now(session.account, delivery_id)
        except NotRetrying as exc:  # not an error page: back to the delivery, which says what it is doing
            await self.sessions.flash(session, {"kind": "warn", "text": f"Not retried: {exc}."})
        else:
            await self.sessions.flash(
                session,
                {
                    "kind": "ok",
                    "text": (
                        "Queued for its next attempt now. If it fails, the retry schedule goes on from it; "
                        "reload to see the outcome."
                    ),
                },
            )
        return _redirect(_safe_next(_field(form, "next")) or _path("deliveries", delivery_id))


def _duration(seconds: int) -> str:
    """``24 hours``, ``2 days``, ``90 minutes``: the log's retention in words."""
    for unit, size in (("day", 86400 * 2), ("hour", 3600), ("minute", 60)):
        if seconds % size == 0:
            count = seconds // (86400 if unit == "day" else size)
            return f"{count} {unit}s" if count != 1 else f"1 {unit}"
    return f"{seconds} second{'s' if seconds != 1 else ''}"
