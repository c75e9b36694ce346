"""The signature libraries of verify/ are tested from their sources, not from an installed copy."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYTHON_LIB = ROOT / "verify" / "python"
NODE_LIB = ROOT / "verify" / "node"

if str(PYTHON_LIB) not in sys.path:
    sys.path.insert(0, str(PYTHON_LIB))
