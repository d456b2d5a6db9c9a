"""What people expect of a command line: -h, --version, completion of names, did-you-mean."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from aksgpu.cli.app import app
from aksgpu.cli.arguments import environment_names, preset_names, stack_targets

runner = CliRunner()


@pytest.mark.parametrize("args", [["-h"], ["plan", "-h"], ["ci", "-h"], ["presets", "show", "-h"],
                                  ["backend", "-h"]])
def test_h_is_help_everywhere(args: list[str]) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 0 and result.output.startswith("Usage: aksgpu")


def test_version() -> None:
    from importlib.metadata import version

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output == f"aksgpu {version('aksgpu')}\n"


def test_the_console_script_answers_version_without_loading_typer_or_the_commands() -> None:
    """`aksgpu --version` alone is answered by cli/entry.py (fast), with the app's very line."""
    import subprocess
    import sys

    code = ("import sys; sys.argv = ['aksgpu', '--version']; from aksgpu.cli.entry import main; main(); "
            "print(sorted(m for m in sys.modules if m == 'typer' or m.startswith('aksgpu.cli.app')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout == runner.invoke(app, ["--version"]).output + "[]\n"


def test_completion_of_environments_presets_and_stack_files(project: Path) -> None:
    (project / "stacks" / "Pulumi.adhoc.yaml").write_text("config: {}\n")
    assert environment_names() == ["adhoc", "dev", "prod"]
    assert environment_names("p") == ["prod"]
    assert preset_names("in") == ["inference"]
    assert stack_targets("stacks/Pulumi.d") == ["stacks/Pulumi.dev.yaml"]


def test_completion_in_a_broken_project_completes_nothing(project: Path) -> None:
    (project / "stacks" / "environments.yaml").write_text("environments: [unclosed\n")
    assert environment_names() == []


def test_a_misspelt_stack_gets_did_you_mean(project: Path) -> None:
    result = runner.invoke(app, ["plan", "prd"])
    assert result.exit_code == 2 and 'did you mean "prod"?' in result.output
