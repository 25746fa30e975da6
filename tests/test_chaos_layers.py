"""The harness's modules form the layers its package docstring lists, and import no circle.

The map is chaos/__init__.py's docstring itself (one bullet per layer, bottom up), so that
the page a newcomer reads and the rule that is checked are one text. Read from the source
(no import is run), as tests/test_layers.py reads redlock's: an import inside a function or
behind ``TYPE_CHECKING`` is a dependency all the same, and the two circles chaos.sim had
(``compiled`` -> ``world`` -> ``model`` -> ``compiled``; ``search`` -> ``points`` ->
``search``) ran through function-level imports.
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "chaos"


def _name_of(path: pathlib.Path, package: pathlib.Path = PACKAGE) -> str:
    """chaos/sim/world.py -> ``chaos.sim.world``; chaos/sim/__init__.py -> ``chaos.sim``."""
    parts = [package.name, *path.relative_to(package).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(package: pathlib.Path = PACKAGE) -> dict[str, pathlib.Path]:
    return {_name_of(path, package): path for path in sorted(package.rglob("*.py"))}


def _imports(path: pathlib.Path, name: str, known: set[str]) -> list[tuple[str, int]]:
    """The modules of ``known`` that the file ``path`` (module ``name``) imports, with their
    lines. ``from package import module`` is the module, ``from package import name`` the
    package; the parents a module's import loads first are not counted (Python's, not the
    module's choice)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            source = ".".join([*base, *([node.module] if node.module else [])])
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                found.append((submodule if submodule in known else source, node.lineno))
    return [(imported, line) for imported, line in found if imported in known and imported != name]


def _graph(package: pathlib.Path = PACKAGE) -> dict[str, list[tuple[str, int]]]:
    modules = _modules(package)
    return {name: _imports(path, name, set(modules)) for name, path in modules.items()}


def _layers(docstring: str) -> list[list[str]]:
    """The docstring's bullets, bottom up, each as the modules named before its first ``: ``."""
    bullets = re.findall(r"^\* (.*?)(?=^\* |^$|\Z)", docstring, re.MULTILINE | re.DOTALL)
    return [re.findall(r":mod:`(chaos[\w.]*)`", bullet.partition(": ")[0]) for bullet in bullets]


def _unit(name: str) -> str:
    """Where a module stands in the map: itself, or the subpackage it belongs to."""
    return ".".join(name.split(".")[:2])


LAYERS = _layers(ast.get_docstring(ast.parse((PACKAGE / "__init__.py").read_text())) or "")
LAYER_OF = {module: index for index, layer in enumerate(LAYERS) for module in layer}
GRAPH = _graph()


def test_the_map_names_every_module_once() -> None:
    named = [module for layer in LAYERS for module in layer]
    assert len(named) == len(set(named)), "a module is in two layers of chaos/__init__.py's docstring"
    units = {_unit(name) for name in GRAPH} - {"chaos"}
    assert set(named) == units, "a module was added or removed: give it its bullet in chaos/__init__.py's docstring"


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_imports_point_down(module: str) -> None:
    if module == "chaos":
        # The package is the command's entry point, above everything (the docstring says so).
        return
    mine = LAYER_OF[_unit(module)]
    wrong = [
        f"line {line}: {imported} ({'the package' if imported == 'chaos' else f'layer {LAYER_OF[_unit(imported)]}'}"
        f", this module is in layer {mine})"
        for imported, line in GRAPH[module]
        if _unit(imported) != _unit(module) and (imported == "chaos" or LAYER_OF[_unit(imported)] >= mine)
    ]
    assert not wrong, f"{module} imports upward or sideways:\n" + "\n".join(wrong)


def _circle(graph: dict[str, list[tuple[str, int]]]) -> list[str] | None:
    """An import circle of ``graph``, as the modules along it, or None."""
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return None
        path.append(module)
        for imported, _ in graph[module]:
            if (circle := visit(imported)) is not None:
                return circle
        path.pop()
        done.add(module)
        return None

    for module in sorted(graph):
        if (circle := visit(module)) is not None:
            return circle
    return None


def test_no_import_circle_in_the_harness() -> None:
    """Inside the subpackages too, where the map above does not reach."""
    circle = _circle(GRAPH)
    assert circle is None, "import circle: " + " -> ".join(circle or [])


def test_the_checks_see_a_function_level_circle(tmp_path: pathlib.Path) -> None:
    """The checks themselves work: a relative import inside a function, upward in the map
    and closing a circle, is found."""
    package = tmp_path / "chaos"
    (package / "sim").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "history.py").write_text("def f():\n    from .sim import world\n")
    (package / "sim" / "__init__.py").write_text("from . import world as _world\n")
    (package / "sim" / "world.py").write_text("from .. import history\nfrom ..history import f\n")
    graph = _graph(package)
    assert graph["chaos.history"] == [("chaos.sim.world", 2)]
    assert graph["chaos.sim"] == [("chaos.sim.world", 1)]
    assert graph["chaos.sim.world"] == [("chaos.history", 1), ("chaos.history", 2)]
    assert _circle(graph) == ["chaos.history", "chaos.sim.world", "chaos.history"]
    layers = _layers("Map:\n\n* :mod:`chaos.history`: the events;\n* :mod:`chaos.sim`, :mod:`chaos.x`: the\n  rest.\n")
    assert layers == [["chaos.history"], ["chaos.sim", "chaos.x"]]
