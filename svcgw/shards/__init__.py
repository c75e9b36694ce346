"""Shards: where instances are placed, the clients of every deployment, and reads over every shard."""
