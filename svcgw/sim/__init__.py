"""Capability-layer simulator: a stand-in upstream for demos, tests and benchmarks.

Not part of the serving path. ``svcgw.sim.app.create_app`` builds the app and
``svcgw.sim.app.run`` serves it; ``svcgw.sim.traffic`` builds and posts events.
"""
