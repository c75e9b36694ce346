"""The ``svcgw`` command: the roles (``up``, ``serve``, ``worker``, ``sim``) and the administration groups.

The top layer. It composes the core (``svcgw``), the HTTP role (``receiver``),
the background role (``worker``) and the simulator; nothing imports it but
the console script and ``python -m cli``.
"""
