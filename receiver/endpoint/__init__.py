"""The receiver endpoint: where the capability layer posts an instance's events.

``receive`` is the route (``POST /svc/receiver/{appid}/{token}``), ``schemas``
its part of ``/openapi.json``. It uses the shared server parts of
``receiver`` (``http``), never the gateway API or the console.
"""

from __future__ import annotations

from .receive import Endpoint, direct_post, make_endpoint

__all__ = ["Endpoint", "direct_post", "make_endpoint"]
