"""``python -m peers install [--dir DIR] [CLIENT ...]``: install the peer clients (docs/peers.md).

Without clients it installs them all, and says for each where it is or why it could not be;
it exits 1 if any could not (the tests then skip that peer, saying the same).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

from . import install


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m peers", description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    installing = sub.add_parser("install", help="install peers into the cache directory")
    installing.add_argument(
        "clients", nargs="*", metavar="CLIENT", help=f"any of {', '.join(install.PEERS)} (default: all)"
    )
    installing.add_argument(
        "--dir", type=pathlib.Path, default=None, help=f"where (default ${install.ENV_DIR} or {install.cache_dir()})"
    )
    sub.add_parser("where", help="print the cache directory")
    args = parser.parse_args(argv)
    unknown = [client for client in getattr(args, "clients", []) if client not in install.PEERS]
    if unknown:
        parser.error(f"unknown peers {unknown}; choose from {list(install.PEERS)}")
    if args.command == "where":
        print(install.cache_dir())
        return 0
    failed = 0
    for client in args.clients or install.PEERS:
        started = time.monotonic()
        try:
            installed = install.ensure(client, args.dir)
        except install.InstallFailed as exc:
            print(f"{client}: NOT installed: {exc}", file=sys.stderr)
            failed += 1
            continue
        print(f"{client}: {installed.path} ({time.monotonic() - started:.1f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
