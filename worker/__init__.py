"""Everything that runs in the background: delivery, retry scheduling, liveness."""
