"""Redis and its key space.

Every key's name per shard (one hash tag each), RQ's formats, the Lua scripts, commands about a
shard's server, and the data layout's version with its upgrades in place.
"""
