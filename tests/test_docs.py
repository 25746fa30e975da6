"""The documentation is tested like code: every Python example runs, the references are current.

Each ```python block of docs/*.md and README.md runs against real masters, the blocks of
one page in order and in one namespace (a page reads top to bottom, and later examples
may use names an earlier one defined). Examples name masters as a reader would
(``redis://10.0.0.1:6379``, the docker-compose ports 7001-7005, ...); before a block runs,
each distinct ``redis://host:port`` in it is pointed at a local master, in order of first
appearance in the block, and ``REDLOCK_MASTERS`` names the same servers; a URL whose host
starts with ``resource`` (the thing a lock protects, such as a fenced store) is pointed at a
server of its own instead. The namespace also
provides ``urls`` (the masters) and ``do_work`` (a stand-in for the reader's own work).

A block whose first line is ``# docs: not run (reason)`` is skipped; keep those rare, for
text that only looks like Python.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import inspect
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest
import redis

import redlock
from redlock.cli import ENV_MASTERS, ENV_SERVERS_PID, EXIT_CODES
from redlock.servers import LocalMasters

from .cli_helpers import closed_ports

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [*sorted(DOCS.glob("*.md")), ROOT / "README.md"]

SKIP_MARK = "# docs: not run"
MASTERS = 5
#: Servers beyond the masters, for examples that also name a resource (a fenced store).
EXTRA_SERVERS = 1

_FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_URL = re.compile(r"redis://[A-Za-z0-9.\-]+:\d+")


@dataclass(frozen=True)
class Block:
    page: pathlib.Path
    line: int
    code: str

    @property
    def skipped(self) -> bool:
        return self.code.startswith(SKIP_MARK)


def python_blocks(page: pathlib.Path) -> list[Block]:
    text = page.read_text()
    return [Block(page, text.count("\n", 0, match.start(1)) + 1, match.group(1)) for match in _FENCE.finditer(text)]


@pytest.fixture(scope="module")
def servers() -> Iterator[list[str]]:
    """Local servers of the docs' own, so that examples may use any key and leave it held.

    Open (owner_only=False): FLUSHALL empties them between pages."""
    with LocalMasters(MASTERS + EXTRA_SERVERS, owner_only=False) as started:
        yield started.urls


def do_work(*args: Any, **kwargs: Any) -> None:
    """What the reader would do while holding the lock."""


def _mapped(mapping: dict[str, str], match: re.Match[str]) -> str:
    return mapping[match.group(0)]


#: Pages whose examples a test of their own runs: they need frameworks in processes of their own.
RUN_ELSEWHERE = {DOCS / "recipes.md": "tests/test_recipes.py, each recipe in the processes its framework needs"}
RUN_PAGES = [page for page in PAGES if page not in RUN_ELSEWHERE]


def run_page(page: pathlib.Path, servers: list[str]) -> int:
    namespace: dict[str, Any] = {"__name__": "__docs__", "urls": servers[:MASTERS], "do_work": do_work}
    ran = 0
    for block in python_blocks(page):
        if block.skipped:
            continue
        mapping: dict[str, str] = {}
        pools = {"master": list(servers[:MASTERS]), "resource": list(servers[MASTERS:])}
        if block.code.count("redis://") != len(_URL.findall(block.code)):
            pytest.fail(f"{page.name}:{block.line}: write master URLs as literal redis://host:port")
        for url in _URL.findall(block.code):
            if url not in mapping:
                kind = "resource" if url.removeprefix("redis://").startswith("resource") else "master"
                if not pools[kind]:
                    pytest.fail(f"{page.name}:{block.line}: more {kind} URLs than the test has servers for")
                mapping[url] = pools[kind].pop(0)
        code = _URL.sub(functools.partial(_mapped, mapping), block.code)
        # Padded so that a traceback points at the line in the page.
        exec(compile("\n" * block.line + code, str(page), "exec"), namespace)
        ran += 1
    return ran


@pytest.mark.parametrize("page", RUN_PAGES, ids=[str(page.relative_to(ROOT)) for page in RUN_PAGES])
def test_python_examples_run(
    page: pathlib.Path, servers: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    monkeypatch.setenv(ENV_MASTERS, ",".join(servers[:MASTERS]))
    monkeypatch.chdir(tmp_path)  # an example that writes a file writes it here
    try:
        run_page(page, servers)
    finally:
        for url in servers:
            with redis.Redis.from_url(url) as client:
                client.flushall()


def test_pages_have_examples_and_opt_outs_are_rare() -> None:
    blocks = [block for page in PAGES for block in python_blocks(page)]
    assert len(blocks) >= 15
    skipped = [block for block in blocks if block.skipped]
    assert len(skipped) <= 2, [f"{b.page.name}:{b.line}" for b in skipped]
    for block in skipped:
        assert re.match(rf"{SKIP_MARK} \(.+\)", block.code), f"{block.page.name}:{block.line}: say why it is not run"


# --- the API reference is generated from the docstrings ---------------------------------------


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_api", DOCS / "gen_api.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_api_reference_is_current() -> None:
    generated = load_generator().render()
    assert (DOCS / "api.md").read_text() == generated, "docs/api.md is stale: run `.venv/bin/python docs/gen_api.py`"


def test_every_public_name_is_documented() -> None:
    reference = (DOCS / "api.md").read_text()
    for name in redlock.__all__:
        obj = getattr(redlock, name)
        assert inspect.getdoc(obj), f"redlock.{name} has no docstring"
        assert re.search(rf"^### `(class )?redlock\.{name}\b", reference, re.MULTILINE), f"redlock.{name}"


# --- other references that must match the code -------------------------------------------------


def test_cli_page_lists_every_exit_code() -> None:
    page = (DOCS / "cli.md").read_text()
    for code, meaning in EXIT_CODES:
        assert f"| {code} | {meaning} |" in page, code


def test_relative_links_resolve() -> None:
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


#: Dotted names docstrings mention that are not Python objects: OpenTelemetry's names.
_NOT_OBJECTS = re.compile(
    r"redlock\.(outcome|round|lock|master|acquire|release|extend|validity|lost|node|votes|attempts|quorum|masters|connection)\b"
)


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attribute in parts[split:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def test_dotted_names_in_docstrings_resolve() -> None:
    """A docstring that names ``redlock._protocol.core.failure_status`` after it moved sends its
    reader nowhere: every dotted name of the package or the harness must import."""
    import ast  # noqa: PLC0415

    missing = []
    for source in sorted([*(ROOT / "redlock").rglob("*.py"), *(ROOT / "chaos").glob("*.py")]):
        tree = ast.parse(source.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for dotted in re.findall(r"(?<![\w./-])((?:redlock|chaos)(?:\.\w+)+)", ast.get_docstring(node) or ""):
                if not _NOT_OBJECTS.match(dotted) and not _resolves(dotted):
                    missing.append(f"{source.name}: {dotted}")
    assert not missing, "docstrings name what does not exist:\n" + "\n".join(missing)


#: What a variable in the docs' inline code stands for: ``lock.validity`` is read on these.
_DOC_VARIABLES: dict[str, tuple[str, ...]] = {
    "rl": ("redlock.Redlock", "redlock.asyncio.Redlock"),
    "lock": ("redlock.Lock", "redlock.asyncio.Lock"),
    "sem": ("redlock.Semaphore", "redlock.asyncio.Semaphore"),
    "election": ("redlock.Election", "redlock.asyncio.Election"),
    "info": ("redlock.LockInfo",),
}
#: Keywords the docs name as other libraries': redis-py's ``Lock.extend(replace_ttl=True)``.
_FOREIGN_KEYWORDS = {"replace_ttl"}
#: Dotted names in the docs that are telemetry's (span, metric and attribute names), not objects.
_TELEMETRY_NAMES = re.compile(rf"{_NOT_OBJECTS.pattern}|redlock\.finding\b")


def _public_parameters() -> set[str]:
    """Every parameter name of every public callable of both APIs (and their methods)."""
    import redlock.asyncio  # noqa: PLC0415

    names: set[str] = set()
    for module in (redlock, redlock.asyncio):
        for exported in module.__all__:
            obj = getattr(module, exported)
            members = [obj, *(m for _, m in inspect.getmembers(obj, callable))] if inspect.isclass(obj) else [obj]
            for member in members:
                with contextlib.suppress(TypeError, ValueError):
                    names |= set(inspect.signature(member).parameters)
    return names


def _object(dotted: str) -> Any:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_every_public_attribute_of_a_client_is_in_the_reference() -> None:
    """What a user can reach on ``rl`` without an underscore is in api.md: the settings it
    was made with and its methods; the machinery (its driver class, its lock specs, its clock
    and random source) is private."""
    import redlock.asyncio  # noqa: PLC0415

    reference = (DOCS / "api.md").read_text()
    with redlock.Redlock(closed_ports(3)) as rl:
        public = {name for name in [*dir(rl), *vars(rl)] if not name.startswith("_")}
    public |= {name for name in dir(redlock.asyncio.Redlock) if not name.startswith("_")}
    missing = sorted(name for name in public if not re.search(rf"\b{name}\b", reference))
    assert not missing, f"public attributes of Redlock that docs/api.md never names: {missing}"


def test_every_attribute_and_keyword_the_docs_name_exists() -> None:
    """``lock.validity``, ``rl.inspect(name)``, ``replace_ttl=True``, ``redlock.fencing.FencedStore``:
    what README, usage.md, api.md and operations.md name in inline code is there to be used."""
    keywords = _public_parameters() | _FOREIGN_KEYWORDS
    missing = []
    for page in (ROOT / "README.md", DOCS / "usage.md", DOCS / "api.md", DOCS / "operations.md"):
        for span in re.findall(r"`([^`\n]+)`", page.read_text()):
            for variable, attribute in re.findall(r"(?<![\w.])([a-z]+)\.([a-z_]\w*)", span):
                classes = _DOC_VARIABLES.get(variable, ())
                if classes and not any(hasattr(_object(cls), attribute) for cls in classes):
                    missing.append(f"{page.name}: {variable}.{attribute} (on {' or '.join(classes)})")
            for dotted in re.findall(r"(?<![\w./-])(redlock(?:\.\w+)+)", span):
                if not _TELEMETRY_NAMES.match(dotted) and not _resolves(dotted):
                    missing.append(f"{page.name}: {dotted}")
            called = re.match(r"@?(?:await )?(?:with )?([a-z]+)\.", span)
            if span.split("=")[0].isidentifier() or (called and called.group(1) in _DOC_VARIABLES):
                for keyword in re.findall(r"(?<![\w.])([a-z_]\w*)=(?!=)", span):
                    if keyword not in keywords:
                        missing.append(f"{page.name}: keyword {keyword}= in `{span}`")
    assert not missing, "the docs name what does not exist:\n" + "\n".join(missing)


def test_safety_page_lists_every_chaos_scenario() -> None:
    scenarios = pytest.importorskip("chaos.scenarios")
    page = (DOCS / "safety.md").read_text()
    rows = {
        match.group(1): (match.group(2), match.group(3))
        for match in re.finditer(r"^\| (\w+) \| ([\w-]+) \| [^|]* \| (?:\*\*)?([A-Z]+)", page, re.MULTILINE)
    }
    for scenario in scenarios.CATALOGUE:
        assert rows.get(scenario.number) == (scenario.name, scenario.expected), scenario.number


# --- every shell command runs too ------------------------------------------------------------------
#
# Each ```sh block of README.md and docs/*.md runs in bash, as a reader would run it: in a copy
# of the checkout whose .venv is the environment the tests run in, with the venv's scripts NOT
# on PATH (the README's set-up does not activate it), except on a page that says its commands
# assume "the venv activated", where the block runs after `. .venv/bin/activate`. Masters are
# the test's own: $REDLOCK_MASTERS names them, and each redis://host:port in a block is pointed
# at one as for the Python blocks. A `./name` the page runs but does not create is an
# executable stub. Every command must succeed, except one whose comment says `exits N`: it
# must exit N.
#
# A few commands cannot run inside the suite, and a few take minutes; each is listed below
# with where it runs instead, and each list is checked against the pages, so that an entry
# cannot outlive its command.

_SH_FENCE = re.compile(r"^```sh\n(.*?)^```", re.MULTILINE | re.DOTALL)
_EXITS = re.compile(r"#.*\bexits (\d+)\b")
_STUB = re.compile(r"(?<![\w./-])\./([\w.-]+)")
ACTIVATED = "with the venv activated"

#: Commands the suite does not run, and where they are run or checked instead.
NOT_RUN_HERE = {
    "python3 -m venv .venv": "CI's set-up: .ci/run runs it before the tests",
    ".venv/bin/pip install -q -c constraints.txt -e '.[dev]'": "CI's set-up: .ci/run runs it before the tests",
    ".ci/refresh-constraints": "reaches the package index for the newest releases; .ci/run's last step installs them",
    ".venv/bin/python -m pytest -q": "CI's test command: .ci/run runs it, and it runs this very test",
    "REDLOCK_TEST_DOCKER=1 .venv/bin/python -m pytest -q": "this very suite again, on masters in containers",
    "docker compose up -d": "needs a Docker engine and ports 7001-7005; tests/test_compose.py checks the file",
    ".venv/bin/python tests/wheel_smoke.py --dist dist": "CI: .ci/run runs it after the tests (test_packaging.py too)",
    ".venv/bin/python -m peers install": "reaches the package registries; CI: .ci/run runs it before the tests",
}
#: `pip install` of an extra would change the environment the tests run in: they are checked
#: to name extras that pyproject.toml declares, and [dev], which the tests run with, has them all.
_PIP_INSTALL = re.compile(r"^\.venv/bin/pip install (?:-q )?(?:-c constraints\.txt )?-e '\.\[([\w,]+)\]'$")

#: Commands too long for the default run, run in the chaos tier (`-m chaos` or REDLOCK_CHAOS=1).
SLOW = {
    r"-m chaos run --all": "the catalogue (test_chaos_scenarios.py runs each scenario in quick mode, most in -m slow)",
    r"-m chaos run kill-majority --duration 30": "30 s of workload",
    r"benchmarks/bench\.py": "about a minute (test_packaging.py runs it with --quick, without matplotlib)",
    r"-m chaos (explore|sweep) ": "seconds of faults each (test_chaos_explore.py runs both, and replay)",
    r"-m chaos trial ": "minutes per client (test_chaos_trial.py puts each installed client through a short trial)",
}


@dataclass(frozen=True)
class ShellBlock:
    page: pathlib.Path
    line: int
    code: str

    @property
    def commands(self) -> list[str]:
        """Each command: a line's `&&`-chained parts, without comments."""
        found = []
        for line in _logical_lines(self.code):
            text = _command_text(line)
            if text:
                found += [part.strip() for part in text.split(" && ")]
        return found


def _logical_lines(code: str) -> list[str]:
    # A command continued with `\` is one command: skipping only its first line would run the
    # rest as a command of its own.
    return re.sub(r"\s*\\\n\s*", " ", code).splitlines()


def _command_text(line: str) -> str:
    # A comment starts at a `#` after whitespace, outside quotes (the pages keep it that simple).
    match = re.search(r"(^|\s)#", line)
    return (line[: match.start()] if match else line).strip()


def shell_blocks(page: pathlib.Path) -> list[ShellBlock]:
    text = page.read_text()
    return [ShellBlock(page, text.count("\n", 0, m.start(1)) + 1, m.group(1)) for m in _SH_FENCE.finditer(text)]


SHELL_PAGES = [page for page in RUN_PAGES if shell_blocks(page)]


def _skipped(command: str, skip_slow: bool) -> str | None:
    """Why ``command`` does not run here, or None."""
    if command in NOT_RUN_HERE:
        return NOT_RUN_HERE[command]
    if _PIP_INSTALL.match(command):
        return "installs into the environment the tests run in"
    if skip_slow:
        for pattern, reason in SLOW.items():
            if re.search(pattern, command):
                return reason
    return None


def _runnable(line: str, skip_slow: bool) -> str:
    """``line`` with each command that does not run here replaced by `true`."""
    text = _command_text(line)
    if not text:
        return line
    parts = [part.strip() for part in text.split(" && ")]
    if not any(_skipped(part, skip_slow) for part in parts):
        return line
    return " && ".join("true" if _skipped(part, skip_slow) else part for part in parts)


def _checkout(tmp_path: pathlib.Path) -> pathlib.Path:
    """A copy of the checkout, as a reader's would be after the README's set-up."""
    copy = tmp_path / "checkout"
    ignore = shutil.ignore_patterns(
        ".git", ".venv", "__pycache__", "*.egg-info", "build", "dist", ".*_cache", ".hypothesis", "chaos-out", "out"
    )
    shutil.copytree(ROOT, copy, ignore=ignore)
    (copy / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    return copy


def run_shell_page(page: pathlib.Path, servers: list[str], tmp_path: pathlib.Path, *, skip_slow: bool) -> None:
    checkout = _checkout(tmp_path)
    scripts = pathlib.Path(sysconfig.get_path("scripts")).resolve()
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and pathlib.Path(p).resolve() != scripts]
    base_env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", ENV_SERVERS_PID)}
    base_env.update({"PATH": os.pathsep.join(path), ENV_MASTERS: ",".join(servers[:MASTERS])})
    activated = ACTIVATED in page.read_text()
    failures = []
    for index, block in enumerate(shell_blocks(page)):
        pools = {"master": list(servers[:MASTERS]), "resource": list(servers[MASTERS:])}
        mapping: dict[str, str] = {}
        for url in _URL.findall(block.code):
            if url not in mapping:
                kind = "resource" if url.removeprefix("redis://").startswith("resource") else "master"
                mapping[url] = pools[kind].pop(0)
        code = _URL.sub(functools.partial(_mapped, mapping), block.code)
        for name in _STUB.findall(code):
            stub = checkout / name
            if not stub.exists():
                stub.write_text('#!/bin/sh\necho "$0 $*" >> "$(dirname "$0")/stub-calls.log"\n')
                stub.chmod(0o755)
        errors = tmp_path / f"errors-{index}"
        leftover = tmp_path / f"servers-{index}"
        prologue = [
            f"trap 'echo \"$LINENO $?\" >> {errors}' ERR",
            # Masters a block started in the background are stopped even if it failed.
            f"trap 'echo \"${{{ENV_SERVERS_PID}:-}}\" > {leftover}' EXIT",
            ". .venv/bin/activate" if activated else ":",
        ]
        lines = [_runnable(line, skip_slow) for line in _logical_lines(code)]
        script = checkout / f".block-{index}.sh"
        script.write_text("\n".join([*prologue, *lines]) + "\n")
        try:
            done = subprocess.run(
                ["bash", str(script)],
                cwd=checkout,
                env=base_env,
                capture_output=True,
                text=True,
                timeout=300 if skip_slow else 3600,
                check=False,
            )
        finally:
            if leftover.exists() and leftover.read_text().strip():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(leftover.read_text()), signal.SIGTERM)
        failed = {}
        if errors.exists():
            for entry in errors.read_text().split("\n"):
                if entry:
                    number, status = map(int, entry.split())
                    failed[number - len(prologue)] = status
        for number, line in enumerate(lines, start=1):
            expected = _EXITS.search(line)
            want = int(expected.group(1)) if expected else 0
            if failed.get(number, 0) != want:
                where = f"{page.relative_to(ROOT)}:{block.line + number - 1}"
                failures.append(f"{where}: `{line.strip()}` exited {failed.get(number, 0)}, not {want}")
        if failures:
            pytest.fail("\n".join([*failures, "stdout:", done.stdout, "stderr:", done.stderr]))


def _chaos_tier(config: pytest.Config) -> bool:
    return "chaos" in (config.getoption("markexpr", "") or "") or os.environ.get("REDLOCK_CHAOS") == "1"


#: Pages whose examples take more than a few seconds to run: the slow tier runs them.
LONG_PAGES = {"README.md", "docs/simulation.md", "docs/chaos-results.md", "docs/cli.md"}


@pytest.mark.parametrize(
    "page",
    [
        pytest.param(page, marks=pytest.mark.slow) if str(page.relative_to(ROOT)) in LONG_PAGES else page
        for page in SHELL_PAGES
    ],
    ids=[str(page.relative_to(ROOT)) for page in SHELL_PAGES],
)
def test_shell_examples_run(page: pathlib.Path, servers: list[str], tmp_path: pathlib.Path) -> None:
    try:
        run_shell_page(page, servers, tmp_path, skip_slow=True)
    finally:
        for url in servers:
            with redis.Redis.from_url(url) as client:
                client.flushall()


SLOW_PAGES = [
    page
    for page in SHELL_PAGES
    if any(
        re.search(pattern, command) for block in shell_blocks(page) for command in block.commands for pattern in SLOW
    )
]


@pytest.mark.chaos
@pytest.mark.parametrize("page", SLOW_PAGES, ids=[str(page.relative_to(ROOT)) for page in SLOW_PAGES])
def test_shell_examples_run_in_full(
    page: pathlib.Path, servers: list[str], tmp_path: pathlib.Path, request: pytest.FixtureRequest
) -> None:
    if not _chaos_tier(request.config):
        pytest.skip("the long commands (chaos tier): run with -m chaos or REDLOCK_CHAOS=1")
    try:
        run_shell_page(page, servers, tmp_path, skip_slow=False)
    finally:
        for url in servers:
            with redis.Redis.from_url(url) as client:
                client.flushall()


def test_commands_not_run_here_are_run_or_checked_elsewhere() -> None:
    commands = [command for page in SHELL_PAGES for block in shell_blocks(page) for command in block.commands]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    for command, reason in NOT_RUN_HERE.items():
        assert command in commands, f"NOT_RUN_HERE names {command!r}, which no page runs any more"
        if "CI" in reason:
            assert command in ci, f"{command!r}: .ci/run does not run it as written"
    for pattern in SLOW:
        assert any(re.search(pattern, command) for command in commands), f"SLOW names {pattern!r}, which no page runs"
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for command in commands:
        installing = _PIP_INSTALL.match(command)
        if installing:
            for extra in installing.group(1).split(","):
                assert extra in declared, f"{command!r}: pyproject.toml has no [{extra}] extra"
        elif "pip install" in command:
            pytest.fail(f"{command!r}: install an extra from the checkout as `.venv/bin/pip install -e '.[extra]'`")


def test_commands_name_the_venv_unless_the_page_says_it_is_activated() -> None:
    bare = re.compile(r"^(?:\w+=\S+ )*(?:python|pip|redlock|redlock-chaos|pytest)\b")
    for page in PAGES:
        text = page.read_text()
        if ACTIVATED in text:
            continue
        for block in shell_blocks(page):
            for command in block.commands:
                assert not bare.match(command), f"{page.name}: `{command}` needs .venv/bin/ (or say {ACTIVATED!r})"
        # In the prose too, a command to type names the venv; `redlock status NAME` and the
        # like name a command, with placeholders, rather than give one to type.
        for span in re.findall(r"`([^`\n]+)`", text):
            assert not re.match(r"(?:python|pip|pytest) ", span), f"{page.name}: `{span}` needs .venv/bin/"


def test_safety_page_names_and_links_the_debate_it_cites() -> None:
    page = (DOCS / "safety.md").read_text()
    for author, title, url in (
        (
            "Kleppmann",
            "How to do distributed locking",
            "https://martin.kleppmann.com/2016/02/08/how-to-do-distributed-locking.html",
        ),
        ("antirez", "Is Redlock safe?", "http://antirez.com/news/101"),
    ):
        assert author in page
        assert f"[{title}]({url})" in page
    # Each K case the page uses is defined where the debate is named.
    debate = page[page.index("Redlock debate") :]
    for case in sorted(set(re.findall(r"\bK[1-5]\b", page))):
        assert f"({case})" in debate[:1500], case


def test_chaos_results_tell_the_writes_of_the_partitioned_scenarios_in_their_order() -> None:
    # tests/test_chaos_scenarios.py checks the same order in the histories the harness records.
    page = " ".join((DOCS / "chaos-results.md").read_text().split())
    assert "c1 writes its increment first" in page
    assert "c1's increment is the one lost" in page
    assert "overwrites c2's increment" not in page


def _default_out_directories(parser: argparse.ArgumentParser) -> set[str]:
    """The default ``--out`` of ``parser`` and of each of its subcommands."""
    found: set[str] = set()
    for action in parser._actions:
        if "--out" in action.option_strings and isinstance(action.default, str):
            found.add(action.default)
        if isinstance(action, argparse._SubParsersAction):
            for subparser in action.choices.values():
                found |= _default_out_directories(subparser)
    return found


def test_every_default_output_directory_is_ignored_and_untracked() -> None:
    """A documented `python -m chaos` command run in the checkout without --out leaves nothing
    for `git status` to show: its directory is ignored, and git tracks nothing in it (a
    tracked file there would be overwritten by the next run, as chaos-selftest/'s were)."""
    from chaos.__main__ import _parser as chaos_parser  # noqa: PLC0415
    from chaos.sim.cli import _parser as sim_parser  # noqa: PLC0415

    defaults = _default_out_directories(chaos_parser()) | _default_out_directories(sim_parser())
    assert defaults, "the harness's commands have no --out default any more: update this test"
    tracked = sorted(defaults & {pathlib.PurePath(path).parts[0] for path in _tracked_files()})
    assert not tracked, f"generated output committed: git rm -r {' '.join(tracked)}"
    # --no-index: whether a file written there would be ignored, tracked or not.
    check = ["git", "check-ignore", "--no-index", "--verbose", "--non-matching", *(f"{d}/out.json" for d in defaults)]
    done = subprocess.run(check, cwd=ROOT, capture_output=True, text=True, check=False)
    unignored = sorted(line.split("\t")[1].split("/")[0] for line in done.stdout.splitlines() if line.startswith("::"))
    assert done.returncode in (0, 1), done.stderr
    assert not unignored, f"add these to .gitignore: {unignored}"


def _tracked_files() -> list[str]:
    done = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"not a git checkout: {done.stderr.strip()}")
    return done.stdout.splitlines()


# --- what the pages state about the code is computed from the code ---------------------------------
#
# "the 35 scenarios" (53 by then), "about 290 tests" (701), a scenario table that stopped at
# 31: a count written by hand goes stale the day the code grows. A page states a count of the
# code's things only where a counter below computes it, and for the things without a counter
# (tests, modules: pytest and `ls` say how many) it states none.

_NUMBER_WORDS = {
    word: value
    for value, word in enumerate(
        [
            *("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"),
            *("eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen"),
            *("nineteen", "twenty"),
        ]
    )
}
_NUMBER_WORDS.update({"thirty": 30, "forty": 40, "fifty": 50, "sixty": 60})


def _catalogue(expected: str | None = None) -> int:
    scenarios = pytest.importorskip("chaos.scenarios")
    return sum(1 for scenario in scenarios.CATALOGUE if expected in (None, scenario.expected))


def _layers() -> int:
    from .test_layers import LAYERS  # noqa: PLC0415

    return len(LAYERS)


def _fault_sets() -> int:
    from chaos.schedule import FAULT_SETS  # noqa: PLC0415

    return len(FAULT_SETS)


def _extras() -> int:
    return len(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])


#: What a count may be stated of, and how the test computes it (None: it may not be stated).
#: The pattern is the words after the number, the first that matches counting.
STATED_COUNTS: dict[str, Any] = {
    r"SAFE scenarios": functools.partial(_catalogue, "SAFE"),
    r"UNSAFE scenarios": functools.partial(_catalogue, "UNSAFE"),
    r"(?:[A-Za-z-]+\s+)?scenarios": _catalogue,
    r"(?:[A-Za-z-]+\s+)?layers": _layers,
    r"(?:[A-Za-z-]+\s+)?fault sets": _fault_sets,
    r"(?:[A-Za-z-]+\s+)?extras": _extras,
    r"(?:[A-Za-z-]+\s+)?exit codes": lambda: len(EXIT_CODES),
    r"(?:[A-Za-z-]+\s+)?(?:variants|broken clients)": None,
    r"(?:[A-Za-z-]+\s+)?(?:test files|tests|test cases)": None,
    r"(?:[A-Za-z-]+\s+)?modules": None,
}

#: Counts that are not of the code as it is: of a past run, or of a subset the sentence names.
#: Each entry must still be on its page (so that none outlives its sentence).
COUNTS_OF_SOMETHING_ELSE = {
    ("chaos-results.md", "four scenarios"): "the runs of 7a to 8b, which the sentence names",
    ("chaos-results.md", "Two self-test variants"): "the two that break a shared Lock, named in the sentence",
    ("chaos-results.md", "25 scenarios"): "the catalogue as it was when that self-test ran",
    ("chaos-results.md", "6 variants"): "the variants as they were when that self-test ran",
    ("chaos-results.md", "two variants"): "the two of a shared Lock, named in the sentence",
    ("chaos-results.md", "six older variants"): "the six the table below names",
    ("chaos-results.md", "12 scenarios"): "the scenarios in which a self-test run caught no-drift, listed after it",
    ("chaos-results.md", "22 scenarios"): "those both networks could play in that run",
    ("simulation.md", "two self-test variants"): "the two of a shared Lock and reentrancy, named in the sentence",
}

_NUMBER = rf"\b(\d[\d,]*|{'|'.join(_NUMBER_WORDS)})"


def _stated_counts(text: str) -> list[tuple[str, int, str]]:
    """Each (phrase, number, noun pattern) in ``text`` that counts one of STATED_COUNTS's things."""
    found: dict[int, tuple[str, int, str]] = {}
    for pattern in STATED_COUNTS:
        # (?!/): "-n 0 tests/" and a file name is an option and a path, not a count.
        for match in re.finditer(rf"{_NUMBER}\s+(?:{pattern})\b(?!/)", text, re.IGNORECASE):
            number = match.group(1).lower()
            value = int(number.replace(",", "")) if number[0].isdigit() else _NUMBER_WORDS[number]
            if value != 1 and match.start() not in found:  # "one scenario, by name": an article
                found[match.start()] = (" ".join(match.group(0).split()), value, pattern)
    return [found[start] for start in sorted(found)]


def test_stated_counts_come_from_the_code() -> None:
    wrong = []
    for page in PAGES:
        name = page.name
        excused = [phrase for (where, phrase) in COUNTS_OF_SOMETHING_ELSE if where == name]
        for phrase, value, pattern in _stated_counts(page.read_text()):
            counter = STATED_COUNTS[pattern]
            if any(phrase.startswith(other) or other.startswith(phrase) for other in excused):
                continue
            if counter is None:
                wrong.append(f"{name}: {phrase!r}: state no count of these (it goes stale), or add a counter here")
            elif counter() != value:
                wrong.append(f"{name}: {phrase!r}, but the code has {counter()}")
    assert not wrong, "\n".join(wrong)


def test_counts_of_something_else_are_still_on_their_pages() -> None:
    for (page, phrase), reason in COUNTS_OF_SOMETHING_ELSE.items():
        assert phrase in " ".join((DOCS / page).read_text().split()), f"{page}: {phrase!r} ({reason}) is gone: drop it"


def test_the_count_check_catches_what_it_must() -> None:
    """The stale counts the README once stated are found, and the numbers of a configuration are not."""
    text = "the 35 scenarios; about 290 tests; 16 UNSAFE scenarios; 8 clients; one scenario"
    found = [(phrase, value) for phrase, value, _ in _stated_counts(text)]
    assert found == [("35 scenarios", 35), ("290 tests", 290), ("16 UNSAFE scenarios", 16)]
    assert _stated_counts("16 UNSAFE scenarios")[0][2] == "UNSAFE scenarios"


def test_every_docs_page_is_linked_from_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    unlinked = [page.name for page in sorted(DOCS.glob("*.md")) if f"](docs/{page.name}" not in readme]
    assert not unlinked, f"README.md links to no docs/{unlinked}"


def test_the_readme_cites_scenarios_with_their_verdicts() -> None:
    """The README's guarantees cite scenarios by name: those in "holds while" are SAFE, those
    in "breaks when" UNSAFE. Its list of them is `chaos list` and docs/safety.md (checked by
    test_safety_page_lists_every_chaos_scenario), not a table of its own that goes stale."""
    scenarios = pytest.importorskip("chaos.scenarios")
    expected = {scenario.name: scenario.expected for scenario in scenarios.CATALOGUE}
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("| guarantee |") :].split("\n\n", 1)[0]
    cited: dict[str, set[str]] = {"SAFE": set(), "UNSAFE": set()}
    for row in table.splitlines()[2:]:
        _, holds, breaks = row.strip("| ").split(" | ")
        cited["SAFE"] |= set(re.findall(r"`([a-z]+(?:-[a-z]+)+)`", holds))
        cited["UNSAFE"] |= set(re.findall(r"`([a-z]+(?:-[a-z]+)+)`", breaks))
    for names in cited.values():
        assert names, "the guarantees table cites no scenario in a column any more: update this test"
    for verdict, names in cited.items():
        wrong = sorted(name for name in names if expected.get(name) != verdict)
        assert not wrong, f"cited as {verdict}, but the catalogue says {[expected.get(n) for n in wrong]}: {wrong}"
    assert not re.search(r"^\| \d+[a-e]? ", readme, re.MULTILINE), "a per-scenario table belongs in docs/safety.md"


def _bench_options() -> tuple[set[str], set[str]]:
    """The sections and the options of benchmarks/bench.py, read from its source."""
    import ast  # noqa: PLC0415

    tree = ast.parse((ROOT / "benchmarks" / "bench.py").read_text())
    sections: set[str] = set()
    options: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id in ("SECTIONS", "OPTIONAL_SECTIONS") for target in node.targets
        ):
            sections |= set(ast.literal_eval(node.value))
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            options |= {arg.value for arg in node.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str)}
    return sections, options


def test_every_benchmark_table_says_how_to_reproduce_it_and_when_it_ran() -> None:
    """docs/benchmarks.md: before each table, `Reproduce: <a command of benchmarks/bench.py
    that exists>` and `Run YYYY-MM-DD`, so that a figure can be checked and its age seen."""
    sections, options = _bench_options()
    text = (DOCS / "benchmarks.md").read_text()
    tables = [match.start() for match in re.finditer(r"^\|.*\|\n\| ---", text, re.MULTILINE)]
    assert tables, "docs/benchmarks.md has no table any more: update this test"
    previous = 0
    for start in tables:
        before = " ".join(text[previous:start].split())
        where = f"docs/benchmarks.md:{text.count(chr(10), 0, start) + 1}"
        # (An option's value may be a number or a path: --rtt 0.2, --compiled /tmp/venv/bin/python.)
        reproduce = r"Reproduce: `\.venv/bin/python (benchmarks/\w+\.py)((?: --?[\w-]+(?: [\w./-]+)?)*)`"
        command = re.search(reproduce, before)
        assert command, f"{where}: the table has no `Reproduce: .venv/bin/python benchmarks/bench.py ...` before it"
        assert (ROOT / command.group(1)).exists(), f"{where}: {command.group(1)} does not exist"
        for flag, value in re.findall(r"(--?[\w-]+)(?: ([\w./-]+))?", command.group(2)):
            assert flag in options, f"{where}: benchmarks/bench.py has no option {flag}"
            if flag == "--only":
                assert value in sections, f"{where}: benchmarks/bench.py has no section {value!r}"
        assert re.search(r"\bRun \d{4}-\d{2}-\d{2}\b", before), f"{where}: say when the table's run was made"
        previous = text.index("\n\n", start)


def test_the_architecture_page_draws_the_layers_the_tests_enforce() -> None:
    from .test_layers import LAYERS  # noqa: PLC0415

    page = (DOCS / "architecture.md").read_text()
    rows = re.findall(r"^\| (\d+) \| ([^|]+) \|", page, re.MULTILINE)
    drawn = [tuple(re.findall(r"`(\w+)/?`", modules)) for _, modules in rows]
    assert drawn == [tuple(layer) for layer in LAYERS], (
        "docs/architecture.md's layer table differs from tests/test_layers.py"
    )
    assert [int(number) for number, _ in rows] == list(range(1, len(LAYERS) + 1))
