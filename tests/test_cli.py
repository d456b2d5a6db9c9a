"""The CLI through Typer's runner: plans print, JSON is the documented document, and every user
error is one clear message with the right exit code and no traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from aksgpu.cli.app import app
from tests.helpers import base_spec

runner = CliRunner()


def _write_stack(project: Path, name: str, spec: object) -> None:
    (project / "stacks" / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump({"config": {"aksgpu:cluster": spec}}))


def test_plan_text(project: Path) -> None:
    result = runner.invoke(app, ["plan", "dev"])
    assert result.exit_code == 0, result.output
    assert "Plan for stack dev (stacks/Pulumi.dev.yaml)" in result.output
    assert "ManagedCluster gpu-dev-cluster-aks" in result.output
    assert "t4spot  User    Standard_NC4as_T4_v3  1" in result.output
    assert "At full scale: 4 nodes, 3 GPUs." in result.output
    assert "Warnings (4):" in result.output
    assert "kubeconfig: [secret]" in result.output


def test_plan_json_document(project: Path) -> None:
    result = runner.invoke(app, ["plan", "stacks/Pulumi.prod.yaml", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["formatVersion"] == 1 and document["stack"] == "prod" and document["offline"] is True
    assert document["summary"]["maxGpus"] == 248
    resources = document["resources"]
    assert {"type", "name", "urn", "parent", "custom", "dependencies", "options", "inputs", "provider"} == \
        set(resources[0])
    pool = next(r for r in resources if r["name"] == "gpu-prod-pools-h100")
    assert pool["provider"] is None
    [provider] = [r for r in resources if r["type"] == "pulumi:providers:kubernetes"]
    device_plugin = next(r for r in resources if r["name"] == "gpu-prod-gpu-software-device-plugin")
    assert device_plugin["provider"] == provider["urn"]
    pools = {p["name"]: p for p in document["summary"]["pools"]}
    assert pools["h100"]["gpuSoftware"] == ["GPU Operator"]
    assert pools["a1001"]["gpuSoftware"] == ["NVIDIA device plugin"]
    assert pool["options"]["deleteBeforeReplace"] is True
    assert pool["urn"].startswith("urn:pulumi:prod::gpu-clusters::")  # the project name in Pulumi.yaml
    assert document["outputs"]["kubeconfig"] == "[secret]"


def test_unknown_stack(project: Path) -> None:
    result = runner.invoke(app, ["plan", "staging"])
    assert result.exit_code == 2
    assert 'STACK argument = "staging": no stack of that name' in result.output
    assert "use one of: dev, prod" in result.output
    assert "Traceback" not in result.output


def test_bad_yaml_names_the_line(project: Path) -> None:
    (project / "stacks" / "Pulumi.broken.yaml").write_text("config:\n  aksgpu:cluster:\n    name: [unclosed\n")
    result = runner.invoke(app, ["plan", "broken"])
    assert result.exit_code == 2
    assert "is not valid YAML: line 3, column 11" in result.output and "Traceback" not in result.output


def test_stack_without_cluster(project: Path) -> None:
    (project / "stacks" / "Pulumi.empty.yaml").write_text("config: {}\n")
    result = runner.invoke(app, ["plan", "empty"])
    assert result.exit_code == 2 and "config.aksgpu:cluster = (not set) (Pulumi.empty.yaml)" in result.output


def test_spec_errors_exit_1_with_every_problem(project: Path) -> None:
    spec = base_spec()
    spec["nodePools"][0]["name"] = "A100"
    spec["controlPlane"]["tier"] = "Gold"
    _write_stack(project, "bad", spec)
    for command in (["plan", "bad"], ["validate", "bad"]):
        result = runner.invoke(app, command)
        assert result.exit_code == 1
        assert "aksgpu:cluster in Pulumi.bad.yaml has 2 problems" in result.output
        assert 'nodePools[0].name = "A100"' in result.output and "Fix: " in result.output
        assert "Traceback" not in result.output


def test_validate_reports_warnings(project: Path) -> None:
    result = runner.invoke(app, ["validate", "dev"])
    assert result.exit_code == 0
    assert "warning: controlPlane.tier" in result.output and "environment dev: valid (4 warnings)" in result.output
    result = runner.invoke(app, ["validate", "stacks/Pulumi.dev.yaml"])
    assert result.exit_code == 0 and "Pulumi.dev.yaml: valid (4 warnings)" in result.output


def test_outside_a_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["plan", "dev"])
    assert result.exit_code == 2 and "no Pulumi.yaml" in result.output


def test_the_program_itself_refuses_a_bad_spec_without_a_traceback(project: Path) -> None:
    """`pulumi up` runs __main__.py directly: it must give the same message as a RunError."""
    import pulumi

    from aksgpu.plan.planner import plan_stack
    from aksgpu.project.stackfile import StackFile

    spec = base_spec()
    spec["controlPlane"]["tier"] = "Gold"
    with pytest.raises(pulumi.RunError, match=r"controlPlane.tier = \"Gold\": must be one of"):
        plan_stack(StackFile(project, project / "stacks" / "Pulumi.x.yaml", "x", {"aksgpu:cluster": spec}))
