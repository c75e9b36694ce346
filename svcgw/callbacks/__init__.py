"""Where a delivery goes and how it is sent.

The address rules, the destination with its secret and token, signing, the test POST and the
outbound client that dials only the addresses the rules let it.
"""
