"""Which packages of an environment differ from constraints.txt, and how.

    python3 .ci/drift.py ENV_PYTHON

.ci/run calls it when the default suite fails on the newest releases, so that the failure
names the releases that may have caused it ("redis 8.2.0 -> 8.3.0") instead of leaving a
developer to guess; the exit status is 0 either way. Standard library only: it runs before
and beside any venv.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

CONSTRAINTS = pathlib.Path(__file__).resolve().parent.parent / "constraints.txt"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


def pins(lines: list[str]) -> dict[str, str]:
    """``name==version`` lines as {normalised name: version}; anything else is skipped."""
    found = {}
    for line in lines:
        match = _PIN.match(line.strip())
        if match:
            found[re.sub(r"[-_.]+", "-", match.group(1)).lower()] = match.group(2)
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    frozen = subprocess.run(
        [argv[0], "-m", "pip", "freeze", "--exclude-editable", "--all"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    pinned, installed = pins(CONSTRAINTS.read_text().splitlines()), pins(frozen)
    rows = [
        f"  {name} {pinned.get(name, '(not pinned)')} -> {installed.get(name, '(not installed)')}"
        for name in sorted(pinned.keys() | installed.keys())
        if name not in ("pip", "setuptools", "wheel") and pinned.get(name) != installed.get(name)
    ]
    if rows:
        print(f"{len(rows)} packages differ from {CONSTRAINTS.name} (pinned -> newest):")
        print("\n".join(rows))
    else:
        print(f"every package is at its version of {CONSTRAINTS.name}: the failure is not a new release's")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
