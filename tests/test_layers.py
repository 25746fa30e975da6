"""The package's folders are its layers, they import one way, and the protocol does no I/O.

docs/architecture.md draws the layers; this test is what keeps the drawing true. Read from the
source (no import is run), so an upward import fails here even where it hides in a function
body or behind ``TYPE_CHECKING``: both are dependencies all the same, and the circles they
made before (a settings module importing the connection policy, telemetry importing the
client) were exactly of that kind.
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "redlock"

#: Lowest first: each entry is a folder of redlock/ (a subpackage) or one of its top-level
#: modules, and may import only from its own layer or the ones before it. Entries of one
#: layer do not import each other (checked too), but for the package's face, ``__init__``.
LAYERS: list[tuple[str, ...]] = [
    ("exceptions", "_version", "_compiled", "_extras", "_process", "_testing"),  # import nothing of redlock
    ("_protocol",),  # the protocol without I/O: arithmetic, scripts, kinds, flows, policy
    ("_io",),  # the drivers: sockets and threads, or an event loop
    ("_api",),  # what a lock is, for both APIs; the sync API's shell
    ("asyncio", "fencing", "servers", "__init__"),  # the public modules
    ("_cli",),  # the command line behind redlock.cli
    ("cli", "demo", "pytest_plugin"),  # what runs the public modules
    ("__main__",),
]

#: Inside each folder, its modules' layers, lowest first, by the same rules.
MODULES: dict[str, list[tuple[str, ...]]] = {
    "_protocol": [
        ("scripts",),  # the Lua every master runs
        ("core",),  # the protocol's vocabulary: arithmetic, commands, rounds, results
        ("kinds",),  # what each kind of lock sends, and its quorum
        ("flows",),  # the lock flows and the lease
        ("urls", "facts"),  # URLs read; what a master says at connect
        ("config",),  # checks, addresses, credentials, the drivers' settings
        ("topology",),  # whether the masters are what Redlock needs: the rules, check()'s report
        ("connection",),  # the connection policy
    ],
    "_io": [
        ("held_weakly",),  # what the sync driver holds weakly (never compiled)
        ("driver",),  # what both drivers do alike
        ("sync", "aio"),
    ],
    "_api": [
        ("options", "exports"),  # the lock options, defined once; the names both APIs export
        ("turns", "adoption", "verdicts"),  # a Lock's local turns, adoption by token, failures' words
        ("telemetry",),
        ("state",),  # a Lock's state and settings, for both APIs
        ("election", "locked", "rwlock"),
        ("sync",),  # the sync API's shell (redlock.asyncio is the asyncio one's)
    ],
    "_process": [("proc", "lifeline")],
    "_cli": [
        ("console",),
        ("supervisor", "common"),  # exec's supervisor; what every command shares
        ("status", "doctor", "servers"),
        ("tokens", "run"),  # acquire, extend, release; exec and leader
    ],
    "_testing": [("tls",)],
}

#: What no module of the protocol imports: I/O, a clock, processes, threads, TLS. Time and
#: replies are its inputs, and the drivers own the threads and the sockets.
IMPURE = frozenset({"socket", "select", "selectors", "asyncio", "subprocess", "time", "os", "io", "ssl", "threading"})
#: Where the protocol still imports one of them, and why. Each entry must still be needed
#: (checked), so the table only shrinks.
IMPURE_ALLOWED: dict[tuple[str, str], str] = {
    ("core", "threading"): "Handoff's guard: a releaser's thread and the waiter's race for one handover",
    ("flows", "threading"): "Lease's guard: the renewer's thread and the user's extend one lease at once",
    ("connection", "ssl"): "failure_status tells a TLS failure by its exception class (no ssl call is made)",
    ("config", "ssl"): "a rediss:// URL's SSLContext is made, and its CA files read, when the client is made",
    ("config", "os"): "a unix socket's path is resolved (os.path.realpath) to name its master",
}


def _entry_and_module(path: pathlib.Path) -> tuple[str, str]:
    """redlock/_protocol/core.py -> ("_protocol", "core"); redlock/cli.py -> ("cli", "")."""
    relative = path.relative_to(PACKAGE).with_suffix("")
    return (relative.parts[0], relative.parts[1]) if len(relative.parts) > 1 else (relative.parts[0], "")


SOURCES = sorted(PACKAGE.rglob("*.py"))
NAMES = [str(path.relative_to(PACKAGE)) for path in SOURCES]


def _imports(path: pathlib.Path) -> list[tuple[str, int]]:
    """Every module this file imports (absolute names), with its line."""
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            folder = PACKAGE.parent.joinpath(*node.module.split("."))
            if node.module.startswith("redlock") and folder.is_dir():
                # `from redlock._protocol import core` imports a module; `from redlock import Lock`,
                # the package's face.
                for alias in node.names:
                    module = (folder / f"{alias.name}.py").exists() or (folder / alias.name).is_dir()
                    found.append((f"{node.module}.{alias.name}" if module else node.module, node.lineno))
            else:
                found.append((node.module, node.lineno))
    return found


def _place(dotted: str) -> tuple[int, int] | None:
    """Where a module of the package stands: its entry's layer and its layer inside the entry."""
    parts = dotted.split(".")
    if parts[0] != "redlock":
        return None
    entry = parts[1] if len(parts) > 1 else "__init__"
    layer = next((index for index, layer in enumerate(LAYERS) if entry in layer), None)
    if layer is None:
        return None
    if len(parts) < 3 or entry not in MODULES:
        return layer, -1  # an entry, or a subpackage's own __init__
    inner = next((index for index, inside in enumerate(MODULES[entry]) if parts[2] in inside), None)
    return None if inner is None else (layer, inner)


def _dotted(path: pathlib.Path) -> str:
    entry, module = _entry_and_module(path)
    if entry == "__init__":
        return "redlock"
    return f"redlock.{entry}" + (f".{module}" if module and module != "__init__" else "")


def test_every_module_has_a_layer() -> None:
    unplaced = [name for path, name in zip(SOURCES, NAMES, strict=True) if _place(_dotted(path)) is None]
    assert not unplaced, f"give each its layer in LAYERS or MODULES: {', '.join(unplaced)}"
    placed = {f"{entry}/{module}.py" for entry, layers in MODULES.items() for layer in layers for module in layer}
    assert placed <= set(NAMES), f"MODULES names modules that are gone: {sorted(placed - set(NAMES))}"


@pytest.mark.parametrize("source", SOURCES, ids=NAMES)
def test_imports_point_down(source: pathlib.Path) -> None:
    me = _dotted(source)
    mine = _place(me)
    assert mine is not None
    face = me == "redlock"
    upward = []
    for name, line in _imports(source):
        theirs = _place(name)
        if theirs is None or name == me or (name.startswith(f"{me}.") and source.name == "__init__.py"):
            continue
        same_entry = name.split(".")[:2] == me.split(".")[:2]
        if same_entry and len(me.split(".")) > 2:
            # Inside one folder: by its modules' layers (its __init__ is below them all).
            wrong = theirs[1] > mine[1] or (theirs[1] == mine[1] and theirs[1] != -1)
        else:
            wrong = theirs[0] > mine[0] or (theirs[0] == mine[0] and not face)
        if wrong:
            upward.append(f"line {line}: {name}")
    assert not upward, f"{me} imports upward or sideways (see LAYERS, MODULES):\n" + "\n".join(upward)


PROTOCOL = sorted((PACKAGE / "_protocol").glob("*.py"))


@pytest.mark.parametrize("source", PROTOCOL, ids=[path.stem for path in PROTOCOL])
def test_the_protocol_does_no_io(source: pathlib.Path) -> None:
    imported = {name.split(".")[0] for name, _ in _imports(source)} & IMPURE
    impure = sorted(name for name in imported if (source.stem, name) not in IMPURE_ALLOWED)
    assert not impure, f"redlock._protocol.{source.stem} is pure (no I/O, no clock) but imports {', '.join(impure)}"
    still_needed = {name for module, name in IMPURE_ALLOWED if module == source.stem}
    assert still_needed <= imported, f"IMPURE_ALLOWED lists what {source.stem} no longer imports: drop it"


def test_the_architecture_page_places_every_module_in_its_folder() -> None:
    """docs/architecture.md's table, row by row: the modules it lists under each folder are the folder's."""
    listed: dict[str, set[str]] = {}
    folder = ""
    for line in (PACKAGE.parent / "docs" / "architecture.md").read_text().splitlines():
        cells = [cell.strip() for cell in line.split("|")[1:-1]]
        if len(cells) != 3 or cells[0].startswith("---") or cells[0] == "layer":
            continue
        folder = cells[0].strip("`/") if cells[0] else folder
        listed.setdefault(folder, set()).update(re.findall(r"`([\w.]+)`", cells[1]))
    for entry, layers in MODULES.items():
        assert listed.get(entry) == {module for layer in layers for module in layer}, entry


def test_the_check_sees_an_upward_import(tmp_path: pathlib.Path) -> None:
    """The check itself works: function-level upward imports are found, modules told from names."""
    source = tmp_path / "core.py"
    source.write_text(
        "def f():\n    from redlock._api.state import LockState\n    import redlock\n"
        "    from redlock._io import sync\n    from redlock import Lock\n"
    )
    names = [name for name, _ in _imports(source)]
    assert names == ["redlock._api.state", "redlock", "redlock._io.sync", "redlock"]
    assert _place("redlock._api.state") > _place("redlock._protocol.core")  # type: ignore[operator]
