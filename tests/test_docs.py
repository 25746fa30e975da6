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

import functools
import importlib.util
import inspect
import pathlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest
import redis

import redlock
from redlock.cli import ENV_MASTERS, EXIT_CODES
from redlock.servers import LocalMasters

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
    """Local servers of the docs' own, so that examples may use any key and leave it held."""
    with LocalMasters(MASTERS + EXTRA_SERVERS) as started:
        yield started.urls


def do_work(*args: Any, **kwargs: Any) -> None:
    """What the reader would do while holding the lock."""


def _mapped(mapping: dict[str, str], match: re.Match[str]) -> str:
    return mapping[match.group(0)]


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


@pytest.mark.parametrize("page", PAGES, ids=[str(page.relative_to(ROOT)) for page in PAGES])
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
    assert (DOCS / "api.md").read_text() == generated, "docs/api.md is stale: run `python docs/gen_api.py`"


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


def test_safety_page_lists_every_chaos_scenario() -> None:
    scenarios = pytest.importorskip("chaos.scenarios")
    page = (DOCS / "safety.md").read_text()
    rows = {
        match.group(1): (match.group(2), match.group(3))
        for match in re.finditer(r"^\| (\w+) \| ([\w-]+) \| [^|]* \| (?:\*\*)?([A-Z]+)", page, re.MULTILINE)
    }
    for scenario in scenarios.CATALOGUE:
        assert rows.get(scenario.number) == (scenario.name, scenario.expected), scenario.number
