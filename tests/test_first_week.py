"""The first week's findings (issue 26): each test fails without its fix.

Symbolic links that loop, inputs too large to read, YAML tab errors, a stale preset description,
two `aksgpu init` at once, Ctrl-C during start-up, --quiet and NO_COLOR, tables that fit."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from aksgpu.cli.app import app
from aksgpu.project.yaml_input import YamlProblem, parse_yaml
from tests.helpers import EXAMPLE

runner = CliRunner()
ADMIN = "11111111-1111-1111-1111-111111111111"


@pytest.fixture
def empty_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copy(EXAMPLE / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def example_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    project = tmp_path / "project"
    shutil.copytree(EXAMPLE, project)
    monkeypatch.chdir(project)
    return project


def test_environments_file_linked_to_itself_is_a_user_error(empty_project: Path) -> None:
    stacks = empty_project / "stacks"
    stacks.mkdir()
    (stacks / "environments.yaml").symlink_to("environments.yaml")
    for args in (["validate", "dev"], ["init", "dev", "--preset", "dev", "--admin-group", ADMIN]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert "environments.yaml is a symbolic link" in result.output
        assert "internal error" not in result.output


def test_stack_file_linked_to_itself_is_a_user_error(example_project: Path) -> None:
    stack = example_project / "stacks" / "Pulumi.dev.yaml"
    stack.unlink()
    stack.symlink_to("Pulumi.dev.yaml")
    result = runner.invoke(app, ["render", "dev"])
    assert result.exit_code == 2, result.output
    assert "Pulumi.dev.yaml is a symbolic link" in result.output


def test_an_environments_file_over_a_mebibyte_is_refused_at_once(example_project: Path) -> None:
    path = example_project / "stacks" / "environments.yaml"
    path.write_text(path.read_text() + "# " + "x" * (1024 * 1024) + "\n")
    result = runner.invoke(app, ["validate", "dev"])
    assert result.exit_code == 2, result.output
    assert "environments.yaml is larger than 1 MiB" in result.output


@pytest.mark.parametrize("text, line, column", [("a:\n\tb: 1\n", 2, 1), ("a:\n  b: 1\n  \tc: 2\n", 3, 3)])
def test_a_tab_in_yaml_is_named(text: str, line: int, column: int) -> None:
    with pytest.raises(YamlProblem) as caught:
        parse_yaml(text)
    message = str(caught.value)
    assert f"a tab character at line {line} column {column}: YAML indents with spaces" in message
    assert "Fix: replace tabs with spaces" in message


def test_fleet_preset_description_names_the_nat_gateway_it_sets() -> None:
    from aksgpu.environments.presets import load_preset

    preset = load_preset("fleet")
    assert preset.spec["network"]["outbound"] == "userAssignedNATGateway"
    assert "managed NAT gateway" not in preset.description
    assert "user-assigned NAT gateway" in preset.description
