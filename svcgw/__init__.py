"""svcgw: the callback gateway of an enterprise messaging service."""

__version__ = "0.1.0"
