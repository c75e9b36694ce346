"""What shard 0 keeps for the whole service, behind one :class:`svcgw.registry.store.Store`.

Accounts and their logins and passwords, API keys, invitations, instances and their receiver
tokens, callback addresses with their secrets and tokens, and the copies of these that the
other shards read.
"""
