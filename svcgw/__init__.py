"""svcgw: the callback gateway of an enterprise messaging service.

This package is the core, shared by the HTTP role (``receiver``), the worker (``worker``) and the
command line (``cli``). Its concepts are rooms, each using only the rooms below it:

* ``views``: read models over every room (an instance's view, a ``/metrics`` scrape);
* ``liveness``: an instance's status, its transitions and the service events that report them;
* ``delivery``: deliveries from queued to delivered or dead, dead letters and replay;
* ``registry``: what shard 0 keeps for the whole service (accounts, keys, instances, addresses);
* ``callbacks``: where a delivery goes and how it is sent (address rules, signing, the client);
* ``intake``: the receiver's core (a post stored with its delivery) and the callback log;
* ``counters``: what every process records for ``/metrics``;
* ``shards``: placement, the clients of every deployment, reads over every shard;
* ``storage``: Redis and its key space (names, RQ's formats, scripts, the layout's version);
* ``vault``, ``upstream``: encryption at rest, the capability layer's client;
* ``config``: the settings, read once from the environment;
* shared by all: ``errors``, ``logs``, ``threads``, ``deliveryid``, ``digests``, ``clientkeys``.

``lint-imports`` holds the order (pyproject.toml); docs/modules.md maps every module.
"""

__version__ = "0.1.0"
