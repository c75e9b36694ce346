"""The receiver's core: a post checked, de-duplicated and stored with its delivery, and the callback log."""
