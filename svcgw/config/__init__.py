"""Configuration: the settings, read once from the environment, and the shards' layout they name."""
