"""Every file of the repository that a comment, a docstring or a page cites exists.

A citation is a path from the repository's root, ``docs/safety.md``, ``chaos/checkers.py``
or ``tests/test_layers.py`` (a trailing ``/`` for a directory), in any .py or .md file of
the checkout. A file that moves or goes leaves its citations behind, and a design text
outside the repository cited as if it were in it sends a reader nowhere: both fail here.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import tempfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

#: The repository's own top-level folders: a path that starts with one is a citation.
FOLDERS = ("redlock", "chaos", "tests", "docs", "peers", "benchmarks", "_build", ".ci")
#: What a citation names: a file with one of these endings, or a folder (ending in "/").
ENDINGS = ("py", "md", "c", "toml", "txt", "json", "yml", "yaml", "sh", "cfg", "ini", "png", "svg", "js", "go")
#: Not in the repository: what the checkout's tools and runs make.
SKIPPED = frozenset({".git", ".venv", "build", "dist", "node_modules", "__pycache__", ".hypothesis", "benchmarks/out"})

_FOLDER = "|".join(re.escape(folder) for folder in FOLDERS)
_ENDING = "|".join(ENDINGS)
# Not inside a longer path (build/sim-compiled/chaos/sim/ names the build, not chaos/sim/),
# and only the characters of a real path: a pattern (redlock/*.so) or a template
# (chaos/sim/{module}.py) names no one file.
CITATION = re.compile(rf"(?<![\w./-])(?:{_FOLDER})/(?:[\w.-]+/)*(?:[\w.-]*\.(?:{_ENDING}))?(?![\w/*{{]|\.\w)")


def _sources() -> list[pathlib.Path]:
    """The checkout's .py and .md files, without what its tools and runs made."""
    found = []
    for folder, subfolders, files in os.walk(ROOT):
        here = pathlib.Path(folder)
        subfolders[:] = [name for name in subfolders if not _made((here / name).relative_to(ROOT))]
        found += [here / name for name in files if name.endswith((".py", ".md"))]
    # (This file's own examples name missing files on purpose.)
    return sorted(path for path in found if path != pathlib.Path(__file__).resolve())


def _made(folder: pathlib.PurePath) -> bool:
    name = folder.name
    return folder.as_posix() in SKIPPED or name.startswith("chaos-") or name.endswith((".egg-info", "_cache"))


def citations(text: str) -> list[str]:
    """The repository paths ``text`` cites, in order."""
    return [match.group() for match in CITATION.finditer(text)]


def _ignored(paths: set[str]) -> set[str]:
    """Those of ``paths`` that git ignores: what a command writes (benchmarks/out/), not a
    file of the repository."""
    if not paths:
        return set()
    check = ["git", "check-ignore", "--no-index", *sorted(paths)]
    if (ROOT / ".git").exists():
        return set(subprocess.run(check, cwd=ROOT, capture_output=True, text=True, check=False).stdout.splitlines())
    # A copy of the files without the repository (CI's compiled tier): git reads the copy's
    # .gitignore all the same, given a repository of no history to work in.
    with tempfile.TemporaryDirectory() as empty:
        subprocess.run(["git", "init", "-q", empty], check=True)
        located = ["git", f"--git-dir={empty}/.git", f"--work-tree={ROOT}", *check[1:]]
        done = subprocess.run(located, cwd=ROOT, capture_output=True, text=True, check=False)
        return set(done.stdout.splitlines())


SOURCES = _sources()


@pytest.mark.parametrize("source", SOURCES, ids=[str(path.relative_to(ROOT)) for path in SOURCES])
def test_every_cited_file_exists(source: pathlib.Path) -> None:
    text = source.read_text(encoding="utf-8")
    absent = {cited for cited in citations(text) if not (ROOT / cited).exists()}
    missing = sorted(absent - _ignored(absent))
    assert not missing, f"{source.relative_to(ROOT)} cites what the repository does not hold: {missing}"


def test_the_citations_found_are_paths_and_only_paths() -> None:
    text = (
        "see docs/safety.md, chaos/checkers.py and tests/test_layers.py; the folder chaos/sim/;"
        " not build/sim-compiled/chaos/sim/, redlock/*.so, chaos/sim/{module}.py or docs/x.md.bak"
    )
    assert citations(text) == ["docs/safety.md", "chaos/checkers.py", "tests/test_layers.py", "chaos/sim/"]


def test_a_missing_file_is_found(tmp_path: pathlib.Path) -> None:
    """The check itself works: a citation of a file the repository lacks is one it reports."""
    cited = citations("# why: REDLOCK.md, as docs/redlock-spec.md says")
    assert cited == ["docs/redlock-spec.md"]
    assert not (ROOT / cited[0]).exists()
