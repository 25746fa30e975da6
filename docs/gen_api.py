"""Generate docs/api.md, the API reference, from the public API's docstrings.

    .venv/bin/python docs/gen_api.py           rewrite docs/api.md
    .venv/bin/python docs/gen_api.py --check   exit 1 if docs/api.md is not what the docstrings say

The docstrings are the source; api.md is a rendering of them, checked in so it can be read
on any forge. tests/test_docs.py fails when the two drift apart, as httpcore's CI does for
its generated sync code: change a docstring, then run this script.

Docstrings are reStructuredText-ish; the rendering maps only what they use: ``code``,
:role:`~targets`, literal blocks after ``::`` and doctest lines (both shown as text, not
run: the runnable examples live in the other docs pages, which the tests execute).
"""

from __future__ import annotations

import argparse
import enum
import importlib
import inspect
import pathlib
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

API_MD = pathlib.Path(__file__).resolve().parent / "api.md"

#: What a section documents: its module's ``__all__``, or only the names that are its own
#: (not those of redlock._api.exports, which both clients export and the redlock section shows).
ALL, OWN = "all", "own"

#: (module, the names to document, or ALL / OWN), in page order.
SECTIONS: tuple[tuple[str, tuple[str, ...] | str], ...] = (
    ("redlock", ALL),
    ("redlock.asyncio", OWN),
    ("redlock.fencing", ("FencedStore",)),
    ("redlock.cli", ("main", "release_token", "ExitCode")),
)

#: Documented first in their module's section, in this order; the rest follow alphabetically.
LEAD = ("Redlock", "Lock", "Semaphore")

#: Classes that callers get from a factory rather than construct: no constructor is shown.
MADE_BY = {
    "Lock": "Redlock.lock()",
    "Semaphore": "Redlock.semaphore()",
    "ReadWriteLock": "Redlock.rwlock()",
    "Election": "Redlock.election()",
}

#: Public-looking members that are plumbing between the two clients, not API.
HIDDEN_MEMBERS = frozenset({"lock_spec"})

_ROLE = re.compile(r":[a-z]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`")


def render() -> str:
    """The whole of api.md, as the docstrings say it today."""
    parts = [
        "# API reference\n",
        "Generated from the docstrings by `.venv/bin/python docs/gen_api.py`; do not edit by hand "
        "(tests/test_docs.py checks that it is current). Examples inside docstrings are shown "
        "as text; the runnable examples are in the other pages.\n",
    ]
    for module_name, _ in SECTIONS:
        parts.append(_render_module(module_name))
    return "\n".join(parts).rstrip() + "\n"


def documented_names(module_name: str) -> list[str]:
    """The names of ``module_name`` that the reference documents."""
    module = importlib.import_module(module_name)
    shared = importlib.import_module("redlock._api.exports").__all__
    for name, names in SECTIONS:
        if name == module_name:
            if names == ALL:
                chosen = list(module.__all__)
            elif names == OWN:
                chosen = [name for name in module.__all__ if name not in shared]
            else:
                chosen = list(names)
            return sorted(chosen, key=lambda n: (n not in LEAD, LEAD.index(n) if n in LEAD else 0, n.lower()))
    raise KeyError(module_name)


def undocumented_options() -> list[str]:
    """The lock options (redlock._api.options, shown in the factories' signatures) that no
    ``lock()`` docstring explains: each is explained once, there."""
    options = importlib.import_module("redlock._api.options")
    explained = "".join(
        inspect.getdoc(importlib.import_module(module).Redlock.lock) or "" for module in ("redlock", "redlock.asyncio")
    )
    # (As ``name`` or ``name=value``.)
    return [name for name in options.DEFAULTS if not re.search(f"``{name}(=[^`]*)?``", explained)]


# --- modules, classes, functions ---------------------------------------------------------------


def _render_module(module_name: str) -> str:
    module = importlib.import_module(module_name)
    lines = [f"## `{module_name}`\n", _markdown(module.__doc__)]
    if module_name == "redlock":
        # The exception tree is drawn in redlock.exceptions; its names are exported here.
        lines.append(_markdown(importlib.import_module("redlock.exceptions").__doc__))
    for name in documented_names(module_name):
        obj = getattr(module, name)
        lines.append(_render_object(module_name, name, obj))
    return "\n".join(lines)


def _render_object(module_name: str, name: str, obj: Any) -> str:
    qualified = f"{module_name}.{name}"
    if inspect.isclass(obj):
        return _render_class(qualified, obj)
    if callable(obj):
        return f"### `{qualified}{_signature(obj)}`\n\n{_markdown(obj.__doc__)}"
    return f"### `{qualified}`\n\n`{obj!r}`\n"


def _render_class(qualified: str, cls: type) -> str:
    name = qualified.rsplit(".", 1)[1]
    # Bases worth naming: the public exception tree and builtins, not internal mixins.
    bases = [base.__name__ for base in cls.__bases__ if base.__module__ in ("builtins", "redlock.exceptions")]
    if issubclass(cls, enum.Enum):
        lines = [f"### `class {qualified}`\n", _markdown(cls.__doc__), "| member | value |", "| --- | --- |"]
        lines += [f"| `{member.name}` | `{member.value!r}` |" for member in cls]
        lines.append("")
    elif issubclass(cls, BaseException):
        lines = [f"### `class {qualified}({', '.join(bases)})`\n", _markdown(cls.__doc__)]
    elif name in MADE_BY:
        lines = [f"### `class {qualified}`\n", f"Made by `{MADE_BY[name]}`.\n", _markdown(cls.__doc__)]
    else:
        lines = [f"### `class {qualified}{_signature(cls)}`\n", _markdown(cls.__doc__)]
    for member_name, member in _members(cls):
        lines.append(_render_member(member_name, member))
    return "\n".join(lines)


def _members(cls: type) -> Iterator[tuple[str, Any]]:
    """Public methods and properties defined by this class or its bases in this package."""
    seen: set[str] = set()
    for klass in cls.__mro__:
        if not klass.__module__.startswith("redlock"):
            continue
        for member_name, member in vars(klass).items():
            if member_name.startswith("_") or member_name in HIDDEN_MEMBERS:
                continue
            if isinstance(member, property) or inspect.isfunction(member):
                seen.add(member_name)
    for member_name in sorted(seen):
        yield member_name, inspect.getattr_static(cls, member_name)


def _render_member(name: str, member: Any) -> str:
    if isinstance(member, property):
        doc = _markdown(member.__doc__) if member.__doc__ else ""
        return f"#### `.{name}` (property)\n\n{doc}".rstrip() + "\n"
    prefix = "async " if inspect.iscoroutinefunction(member) else ""
    doc = _markdown(member.__doc__) if member.__doc__ else ""
    return f"#### `{prefix}.{name}{_signature(member, drop_self=True)}`\n\n{doc}".rstrip() + "\n"


# --- signatures --------------------------------------------------------------------------------


def _signature(obj: Callable[..., Any], *, drop_self: bool = False) -> str:
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return "(...)"
    params = list(signature.parameters.values())
    if drop_self and params and params[0].name in ("self", "cls"):
        params = params[1:]
    rendered: list[str] = []
    keyword_only_marked = False
    for param in params:
        if param.kind is inspect.Parameter.KEYWORD_ONLY and not keyword_only_marked:
            rendered.append("*")
            keyword_only_marked = True
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            keyword_only_marked = True
            rendered.append(f"*{param.name}{_annotation(param.annotation)}")
            continue
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            rendered.append(f"**{param.name}{_annotation(param.annotation)}")
            continue
        text = f"{param.name}{_annotation(param.annotation)}"
        if param.default is not inspect.Parameter.empty:
            text += f" = {_default(param.default)}"
        rendered.append(text)
    result = ""
    if signature.return_annotation is not inspect.Signature.empty and not inspect.isclass(obj):
        result = f" -> {_type_text(signature.return_annotation)}"
    return f"({', '.join(rendered)}){result}"


def _annotation(annotation: Any) -> str:
    return "" if annotation is inspect.Parameter.empty else f": {_type_text(annotation)}"


def _type_text(annotation: Any) -> str:
    # With `from __future__ import annotations` they are the source text, which reads best.
    return annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)


def _default(value: Any) -> str:
    if callable(value) and hasattr(value, "__qualname__"):
        return f"{value.__module__}.{value.__qualname__}"
    return repr(value)


# --- docstring text ----------------------------------------------------------------------------


def _markdown(doc: str | None) -> str:
    """A docstring as markdown: inline roles and literals mapped, code blocks fenced as text."""
    if not doc:
        return ""
    lines = inspect.cleandoc(doc).splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped.startswith(">>>"):
            block, i = _take_block(lines, i, lambda text: text.strip() != "")
            out += ["```text", *_dedent(block), "```"]
            continue
        if stripped.endswith("::"):
            if stripped[:-2].strip():
                out.append(_inline(line.rstrip()[:-2].rstrip() + ":"))
            i += 1
            while i < len(lines) and not lines[i].strip():
                i += 1
            block, i = _take_block(lines, i, _indented_by(_indent(lines[i]) if i < len(lines) else 0))
            while block and not block[-1].strip():
                block.pop()
            if out and out[-1]:
                out.append("")
            out += ["```text", *_dedent(block), "```", ""]
            continue
        out.append(_inline(line))
        i += 1
    return "\n".join(out).strip() + "\n"


def _take_block(lines: list[str], start: int, belongs: Callable[[str], bool]) -> tuple[list[str], int]:
    end = start
    while end < len(lines) and belongs(lines[end]):
        end += 1
    return lines[start:end], end


def _indented_by(width: int) -> Callable[[str], bool]:
    return lambda text: not text.strip() or _indent(text) >= width


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _dedent(block: list[str]) -> list[str]:
    width = min((_indent(line) for line in block if line.strip()), default=0)
    return [line[width:] for line in block]


def _inline(line: str) -> str:
    def role(match: re.Match[str]) -> str:
        target = match.group(1)
        # :class:`~redlock.Lock` shows as `Lock`, :class:`redlock.Lock` in full.
        return f"`{target.rsplit('.', 1)[-1] if '~' in match.group(0) else target}`"

    return _ROLE.sub(role, line).replace("``", "`")


# --- command line ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate docs/api.md from the docstrings.")
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/api.md is not current")
    args = parser.parse_args(argv)
    undocumented = undocumented_options()
    if undocumented:
        print(f"lock options that no lock() docstring explains: {', '.join(undocumented)}", file=sys.stderr)
        return 1
    text = render()
    if args.check:
        if API_MD.exists() and API_MD.read_text() == text:
            return 0
        print(f"{API_MD} is not current: run `.venv/bin/python docs/gen_api.py`", file=sys.stderr)
        return 1
    API_MD.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
