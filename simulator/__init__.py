"""Capability-layer simulator: a stand-in upstream for demos, tests and benchmarks.

Not part of the serving path and independent of the service's packages.
``simulator.app.create_app`` builds the app and ``simulator.app.run`` serves
it; ``simulator.traffic`` builds and posts events.
"""
