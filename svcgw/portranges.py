"""Port ranges: the ports a callback address may use (``SVCGW_DESTINATION_PORTS``), and reading them.

Pure: :func:`parse_port_ranges` reads the setting's text, and ``svcgw.settings``
puts the variable's name in front of what it refuses.
"""

from __future__ import annotations

__all__ = ["DEFAULT_DESTINATION_PORTS", "PortRanges", "parse_port_ranges"]

PortRanges = tuple[tuple[int, int], ...]  # inclusive (first, last) pairs
# Web ports and the unprivileged range: a callback address is not a way to knock on a host's
# SSH, SMTP or database port.
DEFAULT_DESTINATION_PORTS: PortRanges = ((80, 80), (443, 443), (1024, 65535))


def parse_port_ranges(text: str) -> PortRanges:
    """``80,443,1024-65535``: single ports and inclusive ranges; ``ValueError`` for anything else."""
    ranges: list[tuple[int, int]] = []
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        try:
            low, high = int(first), int(last or first)
        except ValueError:
            raise ValueError(f"must be comma-separated ports or ranges such as 1024-65535, got {part!r}") from None
        if not 0 < low <= high <= 65535:
            raise ValueError(f"ports must be from 1 to 65535, low to high, got {part!r}")
        ranges.append((low, high))
    return tuple(ranges)
