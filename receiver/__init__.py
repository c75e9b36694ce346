"""Everything that serves HTTP: the receiver, the gateway API and the console."""
