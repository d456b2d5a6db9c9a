"""Speed work must not change a plan: `aksgpu plan --json` of the example stacks and of a generated
100-pool spec (tests/benchmark_plan.py's generated_spec, the benchmark's largest) read byte for byte
as the golden files in tests/golden/plan/, written from main before the plan's speed work
(issue 28). AKSGPU_UPDATE_GOLDEN=1 rewrites them when a plan is meant to change (review the diff:
`zcat tests/golden/plan/NAME.json.gz`)."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from aksgpu.cli.app import app
from tests.benchmark_plan import generated_spec
from tests.helpers import EXAMPLE, EXAMPLES, copy_project

GOLDEN = Path(__file__).resolve().parent / "golden" / "plan"
GENERATED = {"bench100": generated_spec(99, 50)}


def _plan_json(project: Path, stack: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(project)
    result = CliRunner().invoke(app, ["plan", f"stacks/Pulumi.{stack}.yaml", "--json"])
    assert result.exit_code == 0, result.output[-3000:]
    return result.stdout


def _compare(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.json.gz"
    if os.environ.get("AKSGPU_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        # mtime=0: the same plan gives the same bytes on disk.
        path.write_bytes(gzip.compress(text.encode(), mtime=0))
    golden = gzip.decompress(path.read_bytes()).decode()
    if text != golden:
        differing = next(i for i, (a, b) in enumerate(zip(text.splitlines(), golden.splitlines(), strict=False))
                         if a != b) if text.splitlines()[:1] else 0
        pytest.fail(f"the plan of {name} differs from tests/golden/plan/{name}.json.gz, first at line "
                    f"{differing + 1}: {text.splitlines()[differing:differing + 1]} != "
                    f"{golden.splitlines()[differing:differing + 1]} (AKSGPU_UPDATE_GOLDEN=1 to accept)")


@pytest.mark.parametrize("stack", EXAMPLES)
def test_the_example_plans_read_as_their_golden_files(stack: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    _compare(stack, _plan_json(copy_project(EXAMPLE, tmp_path), stack, monkeypatch))


@pytest.mark.parametrize("stack", sorted(GENERATED))
def test_a_generated_large_plan_reads_as_its_golden_file(stack: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    project = copy_project(EXAMPLE, tmp_path)
    (project / "stacks" / f"Pulumi.{stack}.yaml").write_text(
        yaml.safe_dump({"config": {"aksgpu:cluster": GENERATED[stack]}}), encoding="utf-8")
    _compare(stack, _plan_json(project, stack, monkeypatch))
