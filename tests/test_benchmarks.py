"""The benchmark's network section (benchmarks/bench_network.py) keeps working:
a tiny run of its command, every case and variant present, no figure judged (speed belongs in
the benchmark itself)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from chaos import netns

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_network import BUILD_CASES, BUILDS, HANDOFF, HANDOFF_CASE  # noqa: E402


@pytest.mark.servers
def test_the_network_section_runs_every_case_with_and_without_each_piece(tmp_path: pathlib.Path) -> None:
    reason = netns.unavailable()
    if reason is not None:
        pytest.skip(f"the network section needs network namespaces: {reason}")
    out = tmp_path / "out"
    command = [sys.executable, str(ROOT / "benchmarks" / "bench.py"), "--quick", "--only", "network"]
    command += ["--rtt", "0.2", "--rounds", "1", "--out", str(out)]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as run:
        _, stderr = run.communicate(timeout=600)
    assert run.returncode == 0, stderr
    # Its namespaces (named after its pid) are gone with it.
    assert not [name for name in netns._list_namespaces() if name.startswith(f"{netns.PREFIX}-{run.pid}-")]
    result = json.loads((out / "bench.json").read_text())["network"]
    if "skipped" in result:
        pytest.skip(result["skipped"])
    assert set(result["rtts"]) == {"0.2"}
    measured = result["rtts"]["0.2"]
    assert measured["rtt_p50_ms"] > 0
    assert set(measured["cases"]) == {*BUILD_CASES, HANDOFF_CASE}
    for case in BUILD_CASES:
        assert {*BUILDS, "ratio"} == set(measured["cases"][case])
        # The sources ran where asked (REDLOCK_PURE=1); the interpreter here may be pure too.
        assert not measured["cases"][case]["pure"]["compiled"]
        assert measured["cases"][case]["pure"]["p50_ms"]["median"] > 0
    handover = measured["cases"][HANDOFF_CASE]
    assert {*HANDOFF, "ratio"} == set(handover)
    # The switch took: the lock kind offered the handover in one run and not in the other.
    assert handover["handover on"]["hands_over"]
    assert not handover["handover off"]["hands_over"]
    assert all(handover[side]["ops_per_s"]["median"] > 0 for side in HANDOFF)
