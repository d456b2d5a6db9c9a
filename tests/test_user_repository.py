"""The CI a user renders passes in the user's repository, set up the way the README and the docs say.

The repository is set up step by step as the docs describe it: the environments guide's own
`init` command (read from docs/guides/environments.md), the placeholder admin group replaced, a shared backend under
`defaults:`, `aksgpu ci github`. Then every step of the rendered checks workflow runs; each must
be one this test knows how to run (no step may run aksgpu's own test suite, which is about
aksgpu, not about the user's stacks) and each aksgpu step must pass.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from aksgpu.cli.app import app
from tests.docs_pages import docs_page

runner = CliRunner()
PLACEHOLDER_GROUP = "11111111-1111-1111-1111-111111111111"
TEAM_GROUP = "5f0c4a8e-2b7d-4c1e-9a3f-6d8b1e2c7a90"
# Steps of the checks workflow that set up the runner or move files, not checks of the stacks.
RUNNER_STEPS = ("python -m venv .venv && .venv/bin/pip install -e .", "cat aksgpu-summary.md",
                "mkdir -p aksgpu-comment")


def _readme_command(prefix: str) -> list[str]:
    """The docs' command that starts with `prefix` (continuation lines joined), as arguments."""
    text = docs_page("guides/environments.md")
    match = re.search(rf"^{re.escape(prefix)}.*?(?<!\\)$", text, re.MULTILINE | re.DOTALL)
    assert match, f"the environments guide shows no `{prefix}` command"
    command = match.group(0).replace("\\\n", " ")
    return shlex.split(command.split("#")[0])[1:]  # without the leading aksgpu


def _ok(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, f"aksgpu {' '.join(args)}:\n{result.output}"
    return result.output


def _set_up_as_the_readme_says(project: Path) -> None:
    _ok(_readme_command("aksgpu init staging"))
    environments = project / "stacks" / "environments.yaml"
    text = environments.read_text().replace(PLACEHOLDER_GROUP, TEAM_GROUP)
    text = text.replace("defaults:\n", "defaults:\n  backend: azblob://pulumi-state?storage_account=stpulumistate01\n"
                        "  secretsProvider: azurekeyvault://kv-pulumi-state.vault.azure.net/keys/pulumi-secrets\n", 1)
    environments.write_text(text)
    _ok(["render"])
    _ok(["ci", "github"])


def test_the_rendered_checks_pass_in_a_repository_set_up_as_the_readme_says(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _set_up_as_the_readme_says(project)
    assert PLACEHOLDER_GROUP not in (project / "stacks" / "Pulumi.staging.yaml").read_text()
    workflow = yaml.safe_load((project / ".github" / "workflows" / "aksgpu-checks.yml").read_text())
    monkeypatch.setenv("GITHUB_SHA", "0123abc")
    ran = []
    for job in workflow["jobs"].values():
        for step in job["steps"]:
            command = step.get("run")
            if command is None:
                continue
            command = command.strip()
            if command.startswith(".venv/bin/aksgpu "):
                args = shlex.split(command.replace('"$GITHUB_SHA"', "0123abc"))[1:]
                _ok(args)
                ran.append(args[0] if args[0] != "ci" else f"ci {args[1]}")
            else:
                assert command.startswith(RUNNER_STEPS), f"a checks step this test cannot vouch for: {command}"
    assert ran == ["render", "validate", "ci summary"]
    summary = (project / "aksgpu-summary.md").read_text()
    assert "| `staging` |" in summary and "❌" not in summary
