"""The benchmarks run: each one's quick mode, in a fresh process, exits 0 and prints its figures
(not timed: the figures are for people; this only keeps the scripts from rotting as the spec
rules grow, issue 28). The GPU benchmarks need a GPU and are left out."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.helpers import REPO

RATIO = re.compile(r"\d+\.\d\dx")


def _quick(script: str, *args: str) -> str:
    result = subprocess.run([sys.executable, str(REPO / "tests" / script), "--quick", *args], cwd=REPO,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{script} --quick failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
    return result.stdout


@pytest.mark.slow
def test_the_plan_benchmark_runs_and_prints_its_ratio_to_the_floor() -> None:
    out = _quick("benchmark_plan.py")
    assert re.search(r"plan 10 pools, \d+ nodes .* \d+\.\d\dx the floor", out), out
    assert re.search(r"plan/floor ratios \(wall\): 10 pools \d+\.\d\dx", out), out


@pytest.mark.slow
def test_the_real_program_benchmark_runs_and_prints_the_aliases_cost() -> None:
    out = _quick("benchmark_real_program.py")
    row = next(line for line in out.splitlines() if line.startswith("10 pools"))
    assert RATIO.search(row), out
    assert "deferred/dropped" in out, out


@pytest.mark.slow
def test_the_training_pool_benchmark_runs() -> None:
    out = _quick("benchmark_training_pool.py")
    assert "declared:" in out and RATIO.search(out), out


@pytest.mark.slow
def test_the_fleet_benchmark_runs() -> None:
    out = _quick("benchmark_fleet.py")
    assert re.search(r"^\s+2\s+10,000\s", out, re.MULTILINE), out


@pytest.mark.slow
def test_the_validate_benchmark_runs() -> None:
    out = _quick("benchmark_validate.py")
    assert re.search(r"50 generated specs in \d+\.\d\d s", out), out
    assert RATIO.search(out) and "one stack after another" in out, out


def test_a_failing_command_fails_the_benchmark(tmp_path) -> None:
    """The benchmarks' runner ends with a non-zero exit when a measured command fails (the bare floor
    failed on the prod example and the benchmark printed its figure anyway)."""
    code = ("import sys; sys.path.insert(0, 'tests'); from benchmark_plan import _run_once; "
            "_run_once([sys.executable, '-c', 'import sys; sys.exit(3)'], __import__('pathlib').Path('.'))")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert result.returncode != 0 and "exited with status 3" in result.stderr, result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(path.name for path in (REPO / "tests").glob("benchmark_*.py")))
def test_every_benchmark_answers_help_and_refuses_an_unknown_option(script: str) -> None:
    """`--help` prints the usage and runs nothing (the fleet benchmark once ran in full on it)."""
    command = [sys.executable, str(REPO / "tests" / script)]
    helped = subprocess.run([*command, "--help"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert helped.returncode == 0 and helped.stdout.startswith("usage:"), helped.stdout + helped.stderr
    refused = subprocess.run([*command, "--no-such-option"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "unrecognized arguments: --no-such-option" in refused.stderr, refused.stderr
