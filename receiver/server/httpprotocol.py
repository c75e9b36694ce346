"""The HTTP/1.1 protocol of ``svcgw serve``: uvicorn's httptools protocol, each answer in one write.

uvicorn writes an answer's status line and headers to the socket when the
app sends ``http.response.start``, and its body with each
``http.response.body``: two ``write`` system calls for every answer, each a
trip through the loopback or network stack, and at c=50 the costliest
single line of a gateway call. :class:`OneWriteProtocol` gives uvicorn's
protocol a transport that keeps what is written during one turn of the
event loop and writes it at the end of that turn (or before closing), in
order, as one piece (:mod:`receiver.server.turnwriter`). Nothing else changes: the bytes on the wire are the
same, and no answer waits longer than the turn it was written in.

It also sheds slow clients itself, with or without a proxy in front:

* a request whose head has not arrived within :attr:`OneWriteProtocol.header_timeout`
  seconds (``SVCGW_HTTP_HEADER_TIMEOUT``) of its first byte (or of the
  connection, before any byte) has its connection closed;
* a body must arrive in full by a deadline, as Apache's ``mod_reqtimeout``
  has it: :attr:`~OneWriteProtocol.body_timeout` seconds after the head
  (``SVCGW_HTTP_BODY_TIMEOUT``), one second later for every
  ``SVCGW_HTTP_BODY_MIN_RATE`` bytes received (:func:`body_due`), and it may
  not stall longer than the header timeout meanwhile. A body past either is
  answered 408 and its connection closed; a body that moves at a few bytes
  a second no longer holds its place for ever.

One timer per connection does it (``loop.call_later``, re-armed only when it
fires while a request is being read); a request reading its head or body
notes the time it moved and the bytes it received, nothing more.

And it holds each client address to its share of the server's connections
(:class:`receiver.server.addressshare.AddressShare`): a connection past it is closed as
soon as it is made, before anything is read.

Near the cap of connections it makes room before anyone is refused
(:mod:`receiver.server.pressure`): a new connection past the high water closes idle
keep-alive connections first, then the slowest unfinished requests; and the
keep-alive timeout shrinks as the cap fills. Each connection notes what it
needs for that: since when it has waited idle for a request, and the bytes
of the request it is reading.

What it needs of uvicorn's own state it asks of :mod:`receiver.server.uvicornhttp`,
the one module that reaches into uvicorn (and says what uvicorn lacks).
"""

from __future__ import annotations

import asyncio

from .addressshare import AddressShare
from .pressure import IDLE, UNFINISHED, Pressure, pick, shed_rank
from .uvicornhttp import UvicornHttpTools

__all__ = ["OneWriteProtocol", "body_due"]

# What a connection is reading: a request's head, its body, or nothing (answering, or idle between requests).
_HEAD, _BODY, _IDLE = 0, 1, 2

_TOO_SLOW = b"request body timed out"
_SHED = b"the server is full; send again"


def body_due(began: float, received: int, timeout: float, seconds_per_byte: float) -> float:
    """When a body that began at ``began`` must have arrived, ``received`` bytes of it in so far.

    ``mod_reqtimeout``'s ``body=timeout,MinRate=rate``: ``timeout`` seconds,
    extended by a second for every ``rate`` bytes (``seconds_per_byte`` is
    ``1 / rate``; 0 for a fixed deadline). A body sent at the minimum rate or
    faster never reaches it.
    """
    return began + timeout + received * seconds_per_byte


class OneWriteProtocol(UvicornHttpTools):
    """uvicorn's httptools protocol writing through a ``TurnWriter``, shedding slow and greedy clients.

    It reads and writes none of uvicorn's state itself: :class:`~receiver.server.uvicornhttp.UvicornHttpTools`
    does, each in a method of its own.
    """

    # Set by cli.runner before the server starts (each process of several too); see ``configure``.
    header_timeout: float = 10.0
    body_timeout: float = 20.0
    body_seconds_per_byte: float = 1 / 500
    shares: AddressShare | None = None

    # The share and the client address this connection counts against, if it does.
    _counted: tuple[AddressShare, str] | None = None
    _refused = False
    _shed = False  # closed to make room, its closing counted in pressure.going until reported
    # When the request being read began and how many bytes of it have arrived (and, in UvicornHttpTools,
    # since when the connection has waited idle for a request's first byte).
    _request_began = 0.0
    _request_bytes = 0

    @classmethod
    def configure(
        cls,
        *,
        header_timeout: float,
        body_timeout: float,
        body_min_rate: int,
        shares: AddressShare | None,
        pressure: Pressure | None = None,
    ) -> None:
        """This process's limits: every connection made from now on reads them."""
        cls.header_timeout = header_timeout
        cls.body_timeout = body_timeout
        cls.body_seconds_per_byte = 1 / body_min_rate if body_min_rate > 0 else 0.0
        cls.shares = shares
        cls.pressure = pressure

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        shares = self.shares
        if shares is not None:
            address = shares.counted_address(transport.get_extra_info("peername"))
            if address is not None:
                if not shares.take(address):
                    # Past its share: closed unread, before uvicorn counts it among its connections.
                    self._refused = True
                    transport.close()
                    return
                self._counted = (shares, address)
        self._attach(transport)
        loop = self.event_loop
        self._reading = _HEAD
        self._since = self._idle_since = loop.time()
        self._deadline: asyncio.TimerHandle | None = loop.call_later(self.header_timeout, self._late)
        pressure = self.pressure
        if pressure is not None:
            excess = pressure.excess(self._open_connections())
            if excess > 0:
                self._make_room(pressure, excess)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refused:
            return
        if self._shed and self.pressure is not None:
            self._shed = False
            self.pressure.going -= 1
        self._give_back()
        self._stop_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._request_bytes += len(data)

    # --- room near the cap (receiver.server.pressure) -----------------------------------------------------
    def _make_room(self, pressure: Pressure, excess: int) -> None:
        """Shed ``excess`` other connections: the idle first, then the slowest unfinished requests."""
        now = self.event_loop.time()
        ranked = []
        for connection in self._connections():
            if connection is not self and isinstance(connection, OneWriteProtocol):
                standing = connection._standing(now)
                if standing is not None:
                    ranked.append((standing, connection))
        for connection in pick(ranked, excess):
            connection._shed_now(pressure)

    def _standing(self, now: float) -> tuple[int, float, float] | None:
        """Where this connection stands in the order of shedding; None when it is not to be shed."""
        if self._shed or self.writer.is_closing():
            return None
        if self._idle_since is not None:
            return shed_rank(now, self._idle_since, 0.0, 0)
        if self._reading == _IDLE or self._reading_paused():
            return None  # being answered, or a body the server is not reading: the server's own time
        return shed_rank(now, None, self._request_began, self._request_bytes)

    def _shed_now(self, pressure: Pressure) -> None:
        kind = UNFINISHED if self._idle_since is None else IDLE
        if kind == UNFINISHED and self._reading == _BODY:
            self._answer_early(503, _SHED, b"retry-after: 1\r\n")
        self._shed = True
        pressure.going += 1
        pressure.note(kind, self._open_connections() - pressure.going)
        self.writer.close()

    def _give_back(self) -> None:
        if self._counted is not None:
            shares, address = self._counted
            shares.release(address)
            self._counted = None

    # --- the clock of the request being read -------------------------------------------------
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._reading = _HEAD
        self._since = self._request_began = self.event_loop.time()
        self._idle_since = None
        self._request_bytes = 0
        if self._deadline is None:
            self._deadline = self.event_loop.call_later(self.header_timeout, self._late)

    def on_headers_complete(self) -> None:
        self._reading = _BODY
        self._since = self._began = self.event_loop.time()
        self._received = 0
        if self.body_timeout < self.header_timeout and self._deadline is not None:
            # The head's timer would fire after the body's deadline: set for the body instead.
            self._deadline.cancel()
            self._deadline = self.event_loop.call_later(self.body_timeout, self._late)
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        self._since = self.event_loop.time()
        self._received += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._reading = _IDLE
        super().on_message_complete()

    def _late(self) -> None:
        """The timer: shed the request if its head or body made no way in time, else wait on."""
        self._deadline = None
        if self._reading == _IDLE or self.writer.is_closing():
            return  # the next request's first byte arms it again
        now = self.event_loop.time()
        due = self._since + self.header_timeout
        if self._reading == _BODY:
            if self._server_not_reading():
                # The server is the one not reading: neither a stall nor a slow body is the client's.
                self._since = self._began = now
                self._received = 0
                due = now + self.header_timeout
            due = min(due, body_due(self._began, self._received, self.body_timeout, self.body_seconds_per_byte))
        left = due - now
        if left > 0:
            self._deadline = self.event_loop.call_later(left, self._late)
            return
        if self._reading == _BODY:
            self._answer_early(408, _TOO_SLOW)
        self.writer.close()

    def _stop_timer(self) -> None:
        self._reading = _IDLE
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def handle_websocket_upgrade(self) -> None:
        self._stop_timer()
        self._give_back()  # the WebSocket protocol takes the connection over, and is not counted
        self._hand_back_socket()
        super().handle_websocket_upgrade()
