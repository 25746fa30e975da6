"""The built distribution, installed as a user installs it: no checkout, and no redis-py.

``.ci/run`` runs it after the tests, the release checklist (docs/release.md) runs it to make
the files it publishes, and ``pytest -m wheel`` runs it from the suite
(tests/test_packaging.py)::

    .venv/bin/python tests/wheel_smoke.py --dist dist

1. ``python -m build`` makes the sdist, then the wheel from the sdist (so that a file the
   sdist leaves out fails here, not on a user's machine), into ``--dist``;
2. ``twine check --strict`` reads both as the package index would;
3. the wheel goes into a fresh venv in a temporary directory, with its dependencies only;
4. from there (its own Python, ``-I``: no checkout on sys.path, no PYTHONPATH): the imports,
   URLs, the TypeError for a master that is not a URL, the lines that name a missing extra,
   lock cycles (sync, asyncio, ``redlock exec``) on local masters it starts, and
   ``redlock --version``;
5. with the ``[redis]`` extra added: redis-py clients as masters, and one chaos scenario
   whose power-loss shim is compiled from the source the wheel installed;
6. with the oldest redis-py that extra allows (4.6): its clients as masters again.

Needs a redis-server binary where redlock.servers looks for one ($REDLOCK_REDIS_SERVER, or
``redis-server`` on PATH: .ci/run installs Debian's), a C compiler for the shim, and the
package index (setuptools for the build, hiredis, redis-py). Exit status 0 when every check
passed, 1 otherwise; the last line counts them.

The checks inside the venv are functions of this file too: it copies itself next to the
venv and runs there with ``--inside``, importing only the standard library and the
installed package.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile
from collections.abc import Callable, Iterator, Sequence

ROOT = pathlib.Path(__file__).resolve().parent.parent
Command = Sequence[str | os.PathLike[str]]

#: Bounds each command: a wedged step fails the smoke instead of hanging CI.
STEP_TIMEOUT = 600.0


class Checks:
    """Named checks, each timed and reported on one line; a failure is counted, not raised."""

    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0

    def run(self, name: str, check: Callable[[], object]) -> bool:
        started = time.monotonic()
        try:
            check()
        except Exception as error:  # (every failure is reported the same way, and the run goes on)
            self.failed += 1
            print(f"FAIL {name} ({time.monotonic() - started:.1f}s): {error}", flush=True)
            return False
        self.passed += 1
        print(f"ok   {name} ({time.monotonic() - started:.1f}s)", flush=True)
        return True


def _spawn(command: Command, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """``command``'s outcome, its output captured, with no input and a bounded wait."""
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        [str(part) for part in command],
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT,
        check=False,
        stdin=subprocess.DEVNULL,
        **kwargs,
    )


def _run(command: Command, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """``command``'s outcome; its output is part of the error if it fails."""
    done = _spawn(command, **kwargs)
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip()
        raise AssertionError(f"`{' '.join(map(str, command))}` exited {done.returncode}:\n{output}")
    return done


# --- inside the venv: the installed package only ----------------------------------------------------


def inside(stage: str, checkout: str, compiled: bool) -> int:
    """The checks of ``stage``: "bare" (no redis-py), "redis" (the [redis] extra's newest
    redis-py) or "redis-floor" (its oldest: only what redis-py's version changes)."""
    import redlock  # noqa: PLC0415  (the installed package, imported only here)

    checks = Checks()
    location = pathlib.Path(redlock.__file__).resolve()
    checks.run(
        "redlock is imported from the venv, not the checkout",
        lambda: _expect(
            location.is_relative_to(pathlib.Path(sys.prefix).resolve())
            and not location.is_relative_to(pathlib.Path(checkout).resolve()),
            f"imported from {location}",
        ),
    )
    checks.run(
        f"the core is {'compiled' if compiled else 'pure Python'}",
        lambda: _expect(redlock.compiled == compiled, f"redlock.compiled is {redlock.compiled}"),
    )
    if stage == "bare":
        checks.run("no redis-py is installed, and importing redlock imported none", _no_redis_py)
        checks.run("URLs are parsed without redis-py", _urls_without_redis_py)
        checks.run("a master that is not a URL is a TypeError naming it", _not_a_url)
        checks.run("redlock.fencing says which extra brings redis-py", _fencing_hint)
    with _masters() as urls:
        if stage != "redis-floor":
            checks.run("a lock cycle on local masters", lambda: _lock_cycle(urls))
            checks.run("an asyncio lock cycle", lambda: _async_lock_cycle(urls))
            checks.run("a lock cycle through `redlock exec`", lambda: _cli_lock_cycle(urls))
        checks.run("`redlock doctor` finds the local masters fit", lambda: _doctor(urls))
        if stage != "bare":
            import importlib.metadata  # noqa: PLC0415

            redis_py = importlib.metadata.version("redis")
            checks.run(
                f"redis-py {redis_py}'s clients are accepted as masters, and FencedStore", lambda: _clients(urls)
            )
    return 1 if checks.failed else 0


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


@contextlib.contextmanager
def _masters() -> Iterator[list[str]]:
    from redlock.servers import LocalMasters  # noqa: PLC0415

    with LocalMasters(3) as masters:
        yield list(masters.urls)


def _no_redis_py() -> None:
    import importlib.util  # noqa: PLC0415

    import redlock.asyncio  # noqa: PLC0415
    import redlock.fencing  # noqa: F401, PLC0415

    _expect(importlib.util.find_spec("redis") is None, "redis-py is installed")
    _expect("redis" not in sys.modules, "a module named redis was imported")


def _urls_without_redis_py() -> None:
    import redlock  # noqa: PLC0415

    rl = redlock.Redlock(["redis://u:p%40ss@127.0.0.1:1/2", "rediss://[::1]:2?ssl_cert_reqs=none", "unix:///tmp/x"])
    try:
        plain, tls, unix = rl.masters
        _expect((plain.host, plain.port, plain.credentials.password) == ("127.0.0.1", 1, "p@ss"), str(plain))
        _expect(plain.credentials.db == 2 and tls.tls and tls.host == "::1", f"{plain}, {tls}")
        _expect(unix.path == "/tmp/x", str(unix))
    finally:
        rl.close()


def _not_a_url() -> None:
    import redlock  # noqa: PLC0415

    try:
        redlock.Redlock([object()])
    except TypeError as error:
        wanted = "masters[0] must be a redis:// URL or a redis.Redis client, got object"
        _expect(str(error) == wanted, f"the message was {error}")
    else:
        raise AssertionError("no TypeError")


def _fencing_hint() -> None:
    from redlock.fencing import FencedStore  # noqa: PLC0415

    try:
        FencedStore(object(), "key")  # type: ignore[arg-type]
    except TypeError as error:
        _expect("[redis] extra" in str(error), f"the message was {error}")
    else:
        raise AssertionError("no TypeError")


def _lock_cycle(urls: list[str]) -> None:
    import redlock  # noqa: PLC0415

    with redlock.Redlock(urls) as rl:
        lock = rl.lock("smoke:sync", ttl=5.0)
        _expect(lock.acquire(timeout=5.0), "not acquired")
        _expect(lock.extend() > 0, "no validity after extend")
        _expect(not rl.lock("smoke:sync", ttl=5.0).acquire(blocking=False), "acquired twice")
        lock.release()
        _expect(rl.inspect("smoke:sync").holder is None, "still held after the release")


def _async_lock_cycle(urls: list[str]) -> None:
    import asyncio  # noqa: PLC0415

    import redlock.asyncio  # noqa: PLC0415

    async def cycle() -> None:
        rl = redlock.asyncio.Redlock(urls)
        try:
            async with rl.lock("smoke:async", ttl=5.0) as lock:
                _expect(lock.locked(), "not held inside the block")
        finally:
            await rl.aclose()

    asyncio.run(cycle())


def _cli_lock_cycle(urls: list[str]) -> None:
    redlock_script = pathlib.Path(sys.prefix) / "bin" / "redlock"
    probe = "import os, sys; sys.exit(os.environ['REDLOCK_NAME'] != 'smoke:cli')"
    masters = ",".join(urls)
    _run([redlock_script, "exec", "--masters", masters, "smoke:cli", "--", sys.executable, "-c", probe])
    status = _spawn([redlock_script, "status", "--masters", masters, "smoke:cli"])
    _expect(status.returncode == 1, f"`redlock status` exited {status.returncode}, not 1 (free): {status.stderr}")


def _doctor(urls: list[str]) -> None:
    redlock_script = pathlib.Path(sys.prefix) / "bin" / "redlock"
    done = _spawn([redlock_script, "doctor", "--json", "--masters", ",".join(urls)])
    _expect(done.returncode == 0, f"`redlock doctor` exited {done.returncode}, not 0 (fit): {done.stderr}")
    report = json.loads(done.stdout)
    _expect(report["verdict"] == "fit", f"`redlock doctor` said {report['verdict']!r}, not 'fit'")


def _clients(urls: list[str]) -> None:
    import redis  # noqa: PLC0415
    import redis.asyncio  # noqa: PLC0415

    import redlock  # noqa: PLC0415
    import redlock.asyncio  # noqa: PLC0415
    from redlock.fencing import FencedStore  # noqa: PLC0415

    clients = [redis.Redis.from_url(url) for url in urls]
    try:
        with redlock.Redlock(clients) as rl, rl.lock("smoke:clients", ttl=5.0, fencing=True) as lock:
            store = FencedStore(clients[0], "smoke:store")
            _expect(store.write(b"done", lock.fencing_token), "the fenced write was refused")
    finally:
        for client in clients:
            client.close()
    rl_async = redlock.asyncio.Redlock([redis.asyncio.Redis.from_url(url) for url in urls])
    _expect(len(rl_async.masters) == len(urls), "not every asyncio client became a master")


# --- outside: build, check, install, run --------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--dist", type=pathlib.Path, help="where to leave the sdist and wheel (default: a temporary dir)"
    )
    parser.add_argument(
        "--compiled",
        action="store_true",
        help="build with REDLOCK_COMPILE=1 (setup.py): the wheel must carry the mypyc-compiled core",
    )
    parser.add_argument("--inside", choices=["bare", "redis", "redis-floor"], help=argparse.SUPPRESS)
    parser.add_argument("--checkout", default=str(ROOT), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.inside:
        return inside(args.inside, args.checkout, args.compiled)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="wheel-smoke-") as scratch:
        checks = smoke(pathlib.Path(scratch), args.dist, args.compiled)
    print(f"wheel smoke took {time.monotonic() - started:.1f}s")
    print(f"wheel-smoke: {checks.passed} passed, {checks.failed} failed")
    return 1 if checks.failed else 0


def smoke(scratch: pathlib.Path, dist: pathlib.Path | None, compiled: bool = False) -> Checks:
    checks = Checks()
    dist = (dist or scratch / "dist").resolve()
    version = _checkout_version()
    if not checks.run("build the sdist, and the wheel from it", lambda: _build(dist, compiled)):
        return checks
    wheel = next(dist.glob(f"redlock_quorum-{version}-*.whl"))
    checks.run(
        "twine check --strict", lambda: _run([sys.executable, "-m", "twine", "check", "--strict", *_built(dist)])
    )
    checks.run("the wheel's metadata", lambda: _metadata(wheel, version))
    venv = scratch / "venv"
    if not checks.run("a fresh venv with the wheel and its dependencies", lambda: _install(venv, wheel)):
        return checks
    env = _clean_env(venv)
    python = venv / "bin" / "python"
    requires = _run([python, "-m", "pip", "show", "redlock-quorum"], env=env).stdout
    print("  " + next(line for line in requires.splitlines() if line.startswith("Requires:")))
    copy = scratch / "wheel_smoke.py"
    shutil.copy(__file__, copy)
    inside_command: list[str | os.PathLike[str]] = [python, "-I", copy, "--checkout", ROOT]
    if compiled:
        inside_command.append("--compiled")
    checks.run("inside the venv, without redis-py", lambda: _relay([*inside_command, "--inside", "bare"], scratch, env))
    checks.run("`redlock --version`", lambda: _version(venv, version, scratch, env))
    demo: Command = [python, "-m", "redlock.demo"]
    checks.run("the demo says which extra brings redis-py", lambda: _hint(demo, "local", scratch, env))
    chaos: Command = [venv / "bin" / "redlock-chaos", "list"]
    checks.run("`redlock-chaos` says which extra brings redis-py", lambda: _hint(chaos, "chaos", scratch, env))
    if not checks.run(
        "add the [redis] extra", lambda: _run([python, "-m", "pip", "install", "-q", f"{wheel}[redis]"], env=env)
    ):
        return checks
    checks.run("inside the venv, with redis-py", lambda: _relay([*inside_command, "--inside", "redis"], scratch, env))
    checks.run(
        "a chaos scenario, its power-loss shim built from the installed source", lambda: _chaos(venv, scratch, env)
    )
    floor = _redis_py_floor()
    if checks.run(
        f"redis-py {floor}, the [redis] extra's oldest",
        lambda: _run([python, "-m", "pip", "install", "-q", f"redis=={floor}.*"], env=env),
    ):
        redis_floor = [*inside_command, "--inside", "redis-floor"]
        checks.run("inside the venv, with the oldest redis-py", lambda: _relay(redis_floor, scratch, env))
    return checks


def _redis_py_floor() -> str:
    """The oldest redis-py the [redis] extra allows ("4.6" of "redis>=4.6")."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (requirement,) = extras["redis"]
    return str(requirement.removeprefix("redis>="))


def _checkout_version() -> str:
    text = (ROOT / "redlock" / "_version.py").read_text()
    match = re.search(r'^__version__ = "([^"]+)"$', text, re.MULTILINE)
    if match is None:
        raise SystemExit("redlock/_version.py has no __version__ line")
    return match.group(1)


def _built(dist: pathlib.Path) -> list[pathlib.Path]:
    return sorted([*dist.glob("redlock_quorum-*.tar.gz"), *dist.glob("redlock_quorum-*.whl")])


def _build(dist: pathlib.Path, compiled: bool) -> None:
    # Files of an earlier build would be checked and published beside the new ones.
    for old in _built(dist):
        old.unlink()
    env = {**os.environ, "REDLOCK_COMPILE": "1" if compiled else "0"}
    _run([sys.executable, "-m", "build", "--outdir", dist, ROOT], env=env)
    names = sorted(path.name for path in _built(dist))
    _expect(len(names) == 2, f"built {names}, not one sdist and one wheel")
    wheel = next(name for name in names if name.endswith(".whl"))
    # A compiled wheel is for this Python and platform; a pure one for any.
    _expect(wheel.endswith("-py3-none-any.whl") != compiled, f"built {wheel}")


def _metadata(wheel: pathlib.Path, version: str) -> None:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [name for name in archive.namelist() if name.endswith(".dist-info/METADATA")]
        metadata = archive.read(name).decode()
    fields = [line.split(": ", 1) for line in metadata.split("\n\n", 1)[0].splitlines() if ": " in line]
    requires = [value for key, value in fields if key == "Requires-Dist" and "extra ==" not in value]
    print(f"  runtime Requires-Dist: {requires}")
    _expect(requires == ["hiredis>=3.0"], f"the runtime needs {requires}, not hiredis alone")
    _expect(("Version", version) in [tuple(field) for field in fields], f"not version {version}")


def _clean_env(venv: pathlib.Path) -> dict[str, str]:
    """The environment, less whatever would let the checkout or the test venv in."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    here = pathlib.Path(sys.prefix, "bin").resolve()
    path = [entry for entry in env.get("PATH", "").split(os.pathsep) if entry and pathlib.Path(entry).resolve() != here]
    env["PATH"] = os.pathsep.join([str(venv / "bin"), *path])
    return env


def _install(venv: pathlib.Path, wheel: pathlib.Path) -> None:
    _run([sys.executable, "-m", "venv", venv])
    python = venv / "bin" / "python"
    _run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", wheel], env=_clean_env(venv))


def _relay(command: Command, cwd: pathlib.Path, env: dict[str, str]) -> None:
    """Runs the inside checks and shows their lines, indented under this one."""
    done = _spawn(command, cwd=cwd, env=env)
    for line in done.stdout.splitlines():
        print(f"  {line}")
    _expect(done.returncode == 0, f"exited {done.returncode}:\n{done.stderr.strip()}")


def _version(venv: pathlib.Path, version: str, cwd: pathlib.Path, env: dict[str, str]) -> None:
    done = _run([venv / "bin" / "redlock", "--version"], cwd=cwd, env=env)
    _expect(done.stdout == f"redlock {version}\n", f"printed {done.stdout!r}")


def _hint(command: Command, extra: str, cwd: pathlib.Path, env: dict[str, str]) -> None:
    """``command`` fails for want of redis-py with exit status 3 and one line naming ``extra``."""
    done = _spawn(command, cwd=cwd, env=env)
    _expect(done.returncode == 3, f"exited {done.returncode}, not 3:\n{done.stderr}")
    _expect("Traceback" not in done.stderr, done.stderr)
    _expect(f"[{extra}] extra" in done.stderr and "redis-py" in done.stderr, done.stderr)


def _chaos(venv: pathlib.Path, scratch: pathlib.Path, env: dict[str, str]) -> None:
    cache = scratch / "cache"  # an empty cache: the shim is compiled now, from the installed source
    out = scratch / "chaos-out"
    command: list[str | os.PathLike[str]] = [
        venv / "bin" / "redlock-chaos",
        "run",
        "power-loss-always",
        "--quick",
        "--seed",
        "1",
        "--no-plot",
    ]
    _run([*command, "-q", "--out", out], cwd=scratch, env={**env, "XDG_CACHE_HOME": str(cache)})
    summary = json.loads((out / "summary.json").read_text())
    _expect(summary["passed"] is True, f"the scenario failed: {summary}")
    (source,) = venv.glob("lib/python*/site-packages/redlock_chaos/powerloss.c")
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    built = sorted(path.name for path in (cache / "redlock-chaos").glob("*.so"))
    _expect(built == [f"powerloss-{digest}.so"], f"the shims built: {built}, not one from {source}")


if __name__ == "__main__":
    raise SystemExit(main())
