"""Read models over every room: an instance as its owner or the operator sees it, and what a /metrics scrape reads."""
