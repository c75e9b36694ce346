"""Deliveries, from queued to delivered or dead.

Their queueing (service events in order), attempt records and bare outcomes, the list and a
delivery shown, retry now, dead letters and their replay over every shard, and the destinations
whose attempts all fail lately.
"""
