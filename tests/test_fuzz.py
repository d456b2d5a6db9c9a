"""Hundreds of generated hostile specs: every one ends in a message and a documented exit code.

Seeded (tests/fuzz.py), so a failing case is reproducible: the assertion names the seed, the
case number and how the case was made.
"""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
from typer.testing import CliRunner

from aksgpu.cli.app import app
from tests.fuzz import Generator, handled_outcome, write_case

pytestmark = pytest.mark.slow  # thousands of generated inputs through the CLI

runner = CliRunner()
SEED = 20261124
CASES = 250


def test_no_generated_input_escapes_the_error_handling(project: Path) -> None:
    environments = (project / "stacks" / "environments.yaml").read_bytes()
    exit_codes: collections.Counter[int] = collections.Counter()
    for number, case in enumerate(Generator(SEED).cases(CASES)):
        (project / "stacks" / "environments.yaml").write_bytes(environments)
        (project / "stacks" / "Pulumi.fuzz.yaml").unlink(missing_ok=True)
        commands = [write_case(case, project)]
        if case.kind == "environments":
            commands += [["render", "--check"], ["diff", "dev", "prod"]]
        for command in commands:
            result = runner.invoke(app, command)
            where = f"seed {SEED} case {number} ({case.kind}: {case.how}), aksgpu {' '.join(command)}"
            exit_codes[handled_outcome(result, where)] += 1
    # The generator must reach every outcome, or it has stopped exercising the error paths.
    assert set(exit_codes) == {0, 1, 2}, exit_codes
