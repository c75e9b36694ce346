"""The HTTP server under the receiver's app: the protocol uvicorn runs, and what limits its connections.

``httpprotocol`` is the protocol ``svcgw serve`` gives uvicorn (one write per
answer, slow clients shed); ``uvicornhttp`` is the one module that reads and
writes uvicorn's own state for it. ``addressshare`` and ``pressure`` decide,
purely, which connections a process takes and which it sheds; ``turnwriter``
is the transport that writes an answer in one piece; ``listeners`` gives each
server process a listening socket of its own.
"""
