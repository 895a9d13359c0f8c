"""Print one of README.md's set-up commands, so CI runs exactly what the README tells a user to run.

`test`: the bash block that ends in the test run (`python -m pytest`); `serve`: the one that ends in `sprig serve`.
Exits 1 naming what is missing when the README has no such block."""

from __future__ import annotations

import re
import sys
from pathlib import Path

FENCE = re.compile(r"^```bash\n(.*?)^```", re.M | re.S)
ENDINGS = {"test": "python -m pytest", "serve": "sprig serve"}


def command(kind: str) -> str:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    for block in FENCE.findall(readme):
        line = block.strip()
        if "\n" not in line and "pip install" in line and line.split("#")[0].strip().endswith(ENDINGS[kind]):
            return line.split("#")[0].strip()
    raise SystemExit(f"README.md has no one-line bash block that installs and ends in `{ENDINGS[kind]}`")


if __name__ == "__main__":
    print(command(sys.argv[1]))
