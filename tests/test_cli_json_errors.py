"""A command that fails under --json prints its error as a JSON document on stdout (and the usual
line on stderr): a script that reads stdout gets JSON whether the command worked or not. The
document's problems carry path, value, rule and fix (aksgpu.errors.error_document)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from aksgpu.cli.app import app

runner = CliRunner()


def _json_commands() -> list[tuple[list[str], Any]]:
    """Every command with a --json option, as (its words, the command)."""
    found: list[tuple[list[str], Any]] = []

    # Typer runs on its own copy of click (typer._click): commands are recognised by shape.
    def walk(words: list[str], command: Any) -> None:
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                walk([*words, name], sub)
        elif any("--json" in getattr(param, "opts", ()) for param in command.params):
            found.append((words, command))

    walk([], typer.main.get_command(app))
    return found


def _error_document(stdout: str) -> dict[str, Any]:
    document = json.loads(stdout)
    assert set(document) == {"error"}, stdout
    return dict(document["error"])


def test_every_json_command_that_fails_prints_a_json_error_document(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Run in a folder with no project and an environment that does not exist: the commands that
    need a project fail, and each prints the error as JSON on stdout with its own exit code."""
    monkeypatch.chdir(tmp_path)
    failed = []
    for words, command in _json_commands():
        arguments = ["nosuch" for param in command.params
                     if param.param_type_name == "argument" and param.required]
        result = runner.invoke(app, [*words, *arguments, "--json"])
        if result.exit_code == 0:
            json.loads(result.stdout)  # a command that worked printed its own document
            continue
        failed.append(" ".join(words))
        error = _error_document(result.stdout)
        assert error["exitCode"] == result.exit_code, (words, result.stdout)
        assert error["message"] and error["message"] in result.stderr.replace("error: ", "", 1), words
    # The commands that need a project (plan, cost, validate, outputs, ...) all took the failing path.
    assert {"plan", "cost", "validate"} <= set(failed), failed


def test_a_spec_error_under_json_lists_each_problem_with_path_value_rule_and_fix(project: Path) -> None:
    stack = project / "stacks" / "Pulumi.dev.yaml"
    document = yaml.safe_load(stack.read_text())
    document["config"]["aksgpu:cluster"]["kubernetesVersion"] = "one.two"
    stack.write_text(yaml.safe_dump(document))
    result = runner.invoke(app, ["plan", str(stack), "--json"])
    assert result.exit_code == 1
    error = _error_document(result.stdout)
    assert error["exitCode"] == 1 and "Pulumi.dev.yaml" in error["source"]
    [problem] = [p for p in error["problems"] if p["path"] == "kubernetesVersion"]
    assert problem["value"] == "one.two" and problem["set"] is True
    assert problem["rule"] and problem["fix"] and problem["severity"] == "error"
    # stderr keeps the usual text: the source, the count, one line per problem.
    assert "kubernetesVersion" in result.stderr


def test_a_usage_error_under_json_is_a_json_document_too() -> None:
    result = runner.invoke(app, ["plan", "dev", "--json", "--no-such-option"])
    assert result.exit_code == 2
    assert "--no-such-option" in _error_document(result.stdout)["message"]


def test_json_after_a_double_dash_is_an_argument_not_the_option(project: Path) -> None:
    result = runner.invoke(app, ["plan", "--", "--json"])
    assert result.exit_code == 2 and result.stdout == ""


def test_a_bug_under_json_is_a_json_document_with_exit_70(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import aksgpu.project.stackfile as stackfile

    def broken(*_: object, **__: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(stackfile, "resolve_stack", broken)
    monkeypatch.delenv("AKSGPU_DEBUG", raising=False)
    result = runner.invoke(app, ["plan", "dev", "--json"])
    assert result.exit_code == 70
    error = _error_document(result.stdout)
    assert error["exitCode"] == 70 and "RuntimeError: boom" in error["message"]


def test_a_failure_without_json_prints_nothing_on_stdout(project: Path) -> None:
    result = runner.invoke(app, ["plan", "nosuch"])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith('error: STACK argument = "nosuch": no stack of that name')


def test_an_error_about_one_setting_carries_it_as_a_problem(project: Path) -> None:
    """Not only a spec's problems: a bad --backend is one problem with its field, value and fix."""
    result = runner.invoke(app, ["preview", "dev", "--backend", "s3://bucket", "--json"])
    assert result.exit_code == 2
    [problem] = _error_document(result.stdout)["problems"]
    assert (problem["path"], problem["value"], problem["source"]) == ("backend", "s3://bucket", "from --backend")
    assert problem["fix"].startswith("use file://")
