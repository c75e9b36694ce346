"""Capability-layer simulator: a stand-in upstream for demos, tests and benchmarks.

Not part of the serving path and independent of the service's packages.
``simulator.state`` holds the simulated instances and their rules,
``simulator.capabilities`` the capability layer's operations over that state,
``simulator.control`` the ``/_sim`` control API for tests and demos, and
``simulator.app`` the Starlette app (``create_app``) and ``run``, which serves
it; ``simulator.traffic`` builds and posts events.
"""
