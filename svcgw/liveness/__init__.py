"""Liveness: an instance's status and its transitions, and the service events that report them."""
