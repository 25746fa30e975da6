"""The package's modules form layers that import one way, and the pure ones do no I/O.

Read from the source (no import is run), so an upward import fails here even where it hides
in a function body or behind ``TYPE_CHECKING``: both are dependencies all the same, and
the circles they made before (a settings module importing the connection policy, telemetry
importing the client) were exactly of that kind.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "redlock"

#: Lowest first; a module may import only from its own layer or the ones before it. Within
#: a layer, modules do not import each other (checked too).
LAYERS: list[tuple[str, ...]] = [
    (
        "exceptions",
        "_scripts",
        "_extras",
        "_version",
        "_lifeline",
        "_testing_tls",
        "_proc",
        "_compiled",
        "_held_weakly",
        "_console",
        "_options",
    ),
    ("_core",),  # the protocol's vocabulary: arithmetic, commands, rounds, results
    ("_kinds",),  # what each kind of lock sends, and its quorum
    ("_flows",),  # the lock flows and the lease
    ("_urls", "_facts"),  # URLs read; what a master says at connect
    ("_config",),  # checks, addresses, credentials, the drivers' settings
    ("_topology",),  # whether the masters are what Redlock needs: the rules, check()'s report
    ("_exports",),  # the public names both clients export
    ("_connection",),  # the connection policy
    ("_driver",),  # what both drivers do alike: the lowest layer with I/O
    ("_telemetry",),
    ("_lock",),
    ("_election", "_locked", "_rwlock"),
    ("_sync", "_aio"),
    ("_client", "asyncio"),
    ("fencing", "servers", "_supervisor", "__init__"),
    ("cli", "demo", "pytest_plugin"),
    ("__main__",),
]

#: The core and the policy never do I/O, and never read a clock: time and replies are inputs.
PURE = ("_core", "_kinds", "_flows", "_urls", "_facts", "_topology", "_connection")
IO_MODULES = frozenset({"socket", "select", "selectors", "asyncio", "subprocess", "time", "os", "io", "ssl.socket"})


def _layer_of() -> dict[str, int]:
    return {module: index for index, layer in enumerate(LAYERS) for module in layer}


def _imports(path: pathlib.Path) -> list[tuple[str, int]]:
    """Every module this file imports (absolute names), with its line."""
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module == "redlock" and node.level == 0:
            # `from redlock import _scripts` imports a module; `from redlock import Lock`, the package.
            for alias in node.names:
                submodule = (PACKAGE / f"{alias.name}.py").exists()
                found.append((f"redlock.{alias.name}" if submodule else "redlock", node.lineno))
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            found.append((node.module, node.lineno))
    return found


def _own_module(name: str) -> str | None:
    """``redlock._core`` -> ``_core``; the bare package -> ``__init__``; others -> None."""
    if name == "redlock":
        return "__init__"
    if name.startswith("redlock."):
        return name.split(".")[1]
    return None


def test_every_module_has_a_layer() -> None:
    modules = {path.stem for path in PACKAGE.glob("*.py")}
    assert modules == set(_layer_of()), "a module was added or removed: give it its layer in LAYERS"


@pytest.mark.parametrize("module", sorted(path.stem for path in PACKAGE.glob("*.py")))
def test_imports_point_down(module: str) -> None:
    layers = _layer_of()
    mine = layers[module]
    upward = []
    for name, line in _imports(PACKAGE / f"{module}.py"):
        target = _own_module(name)
        if target is None or target == module or target not in layers:
            continue
        if layers[target] > mine or (layers[target] == mine and module != "__init__"):
            upward.append(f"line {line}: {name} (layer {layers[target]}, this module is in layer {mine})")
    assert not upward, f"redlock.{module} imports upward or sideways:\n" + "\n".join(upward)


@pytest.mark.parametrize("module", PURE)
def test_the_core_and_the_policy_do_no_io(module: str) -> None:
    io = sorted(
        {
            name
            for name, _ in _imports(PACKAGE / f"{module}.py")
            if name.split(".")[0] in IO_MODULES or name in IO_MODULES
        }
    )
    assert not io, f"redlock.{module} is pure (no I/O, no clock) but imports {', '.join(io)}"


def test_the_check_sees_an_upward_import(tmp_path: pathlib.Path) -> None:
    """The check itself works: a function-level upward import is found."""
    source = tmp_path / "_core.py"
    source.write_text("def f():\n    from redlock._lock import LockState\n    import redlock\n")
    names = [name for name, _ in _imports(source)]
    assert names == ["redlock._lock", "redlock"]
