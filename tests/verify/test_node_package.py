"""verify/node as its README says to install it: ``npm install ./verify/node``, then ``require``."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from tests.support import missing_tool
from tests.verify.conftest import NODE_LIB, ROOT


def test_the_readme_install_line_installs_the_package(tmp_path: Path) -> None:
    readme = (NODE_LIB / "README.md").read_text()
    (line,) = re.findall(r"^npm install (\S+)$", readme, flags=re.MULTILINE)
    assert (ROOT / line).resolve() == NODE_LIB  # the path, as written, from the checkout's root
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        missing_tool("needs npm and node (apt-get install -y npm)")
    # A project of the reader's own: the package is installed into it, not into the checkout.
    project = tmp_path / "app"
    project.mkdir()
    installed = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--offline", str(NODE_LIB)],
        cwd=project, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    used = subprocess.run(
        [node, "-e", "const v = require('svcgw-verify'); console.log(typeof v.verify, typeof v.check)"],
        cwd=project, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert used.returncode == 0 and used.stdout.split() == ["function", "function"], used.stderr
    assert not (ROOT / "node_modules").exists() and not (NODE_LIB / "node_modules").exists()
