"""Re-rendering after an aksgpu upgrade: a preset default that moves a field Azure cannot change in
place (the cluster's dnsPrefix, a pool's maxPods) must not be written silently as "updated"; the
system pool, which AKS reads at create only, gets a note naming the fields (issue 26)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from aksgpu import catalog
from aksgpu.cli.app import app
from aksgpu.environments import presets
from aksgpu.environments.file import load_environments
from aksgpu.environments.render import plan_render, write_rendered
from aksgpu.environments.replacement import render_impact
from aksgpu.errors import UserError

runner = CliRunner()


@pytest.fixture
def upgraded(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The example project after an aksgpu upgrade whose inference preset moved dnsPrefix, the cpu
    pool's maxPods and the system pool's VM size (prod uses the inference preset)."""
    folder = tmp_path / "presets-upgraded"
    shutil.copytree(presets.PRESETS_DIR, folder)
    document = yaml.safe_load((folder / "inference.yaml").read_text())
    document["spec"]["dnsPrefix"] = "gpu-new"
    next(pool for pool in document["spec"]["nodePools"] if pool["name"] == "cpu")["maxPods"] = 60
    document["spec"]["systemPool"]["vmSize"] = "Standard_D16ds_v5"
    (folder / "inference.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    monkeypatch.setattr(presets, "PRESETS_DIR", folder)
    return project


def test_render_refuses_a_change_that_replaces_and_prints_what_keeps_it(upgraded: Path) -> None:
    before = (upgraded / "stacks" / "Pulumi.prod.yaml").read_text()
    result = runner.invoke(app, ["render", "prod"])
    assert result.exit_code == 2, result.output
    assert (upgraded / "stacks" / "Pulumi.prod.yaml").read_text() == before, "nothing written"
    assert "updated" not in result.output
    assert "ManagedCluster dnsPrefix: dnsPrefix: null -> gpu-new" in result.output
    assert "AgentPool maxPods: nodePools.cpu.maxPods: null -> 60" in result.output
    assert "--allow-replace" in result.output
    # The system pool is a note, not a refusal: AKS would not apply it.
    assert "systemPool.vmSize" not in result.output.split("Fix:")[0]


def test_render_check_reports_the_replacement_too(upgraded: Path) -> None:
    result = runner.invoke(app, ["render", "--check"])
    assert result.exit_code == 1
    assert "nodePools.cpu.maxPods: null -> 60" in result.output
    assert "systemPool.vmSize (Standard_D8ds_v5 -> Standard_D16ds_v5) take effect only on a new cluster" \
        in result.output


def test_the_printed_override_re_renders_with_no_replacement(upgraded: Path) -> None:
    environments = load_environments(upgraded)
    refused = plan_render(environments, "prod")
    with pytest.raises(UserError) as error:
        write_rendered(refused)
    snippet = str(error.value).split("render again:\n", 1)[1].split("\nor, to replace", 1)[0]
    keep = yaml.safe_load(snippet)["environments"]["prod"]["overrides"]
    assert keep == {"dnsPrefix": None, "nodePools": [{"name": "cpu", "maxPods": None}]}
    # Apply it as a user would: merged into prod's overrides.
    path = upgraded / "stacks" / "environments.yaml"
    document = yaml.safe_load(path.read_text())
    overrides = document["environments"]["prod"]["overrides"]
    overrides["dnsPrefix"] = None
    next(pool for pool in overrides["nodePools"] if pool["name"] == "cpu")["maxPods"] = None
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    again = plan_render(load_environments(upgraded), "prod")
    assert again.impact.replaced == () and again.refusal() == ""
    assert [change.dotted for change in again.impact.not_applied] == ["systemPool.vmSize"]
    write_rendered(again)
    result = runner.invoke(app, ["render", "prod"])
    assert result.exit_code == 0 and "unchanged" in result.output


def test_allow_replace_writes_it(upgraded: Path) -> None:
    result = runner.invoke(app, ["render", "prod", "--allow-replace"])
    assert result.exit_code == 0, result.output
    assert "stacks/Pulumi.prod.yaml: updated" in result.output
    cluster = yaml.safe_load((upgraded / "stacks" / "Pulumi.prod.yaml").read_text())["config"]["aksgpu:cluster"]
    assert cluster["dnsPrefix"] == "gpu-new"
    assert "systemPool.vmSize" in result.output and "az aks nodepool add --mode System" in result.output


def test_the_plan_says_system_pool_edits_after_the_first_up_are_not_applied(example_plans) -> None:
    from aksgpu.plan.report import render_text

    text = render_text(example_plans["prod"], [])
    assert "System pool system: inside the cluster resource, read by AKS at create only" in text
    assert "az aks nodepool add --mode System" in text


def test_the_pull_request_check_names_the_system_pool_fields_and_the_replacement(upgraded: Path) -> None:
    from aksgpu.plan.summary import check_environments

    notes = check_environments(["prod"])[0].notes
    assert any("systemPool.vmSize (Standard_D8ds_v5 -> Standard_D16ds_v5) take effect only on a new cluster" in note
               for note in notes), notes
    assert any("nodePools.cpu.maxPods: null -> 60" in note for note in notes), notes


def test_the_upgrade_guide_commands_run_as_shown(upgraded: Path) -> None:
    """docs/guides/upgrade.md: each aksgpu command of its sh blocks runs, in order, on a project after
    an upgrade, with the outcome the guide says (preview asks Azure: only its arguments are checked)."""
    import re

    from tests.docs_pages import docs_page

    text = docs_page("guides/upgrade.md")
    commands = [line.strip() for block in re.findall(r"```sh\n(.*?)```", text, re.S)
                for line in block.splitlines() if line.strip()]
    assert commands[0] == ".venv/bin/pip install -r requirements.txt"
    expected = {"render --check": 1, "render prod": 2, "render prod --allow-replace": 0, "plan prod": 0}
    ran = []
    for command in commands[1:]:
        words = command.split()
        assert words[0] == "aksgpu", command
        if words[1] == "preview":
            assert runner.invoke(app, [*words[1:], "--help"]).exit_code == 0
            continue
        result = runner.invoke(app, words[1:])
        assert result.exit_code == expected[" ".join(words[1:])], (command, result.output)
        ran.append(" ".join(words[1:]))
    assert ran == list(expected)


def _stack(access: str, vnet_integration: bool | None) -> dict:
    api: dict = {"access": access}
    if vnet_integration is not None:
        api["vnetIntegration"] = vnet_integration
    return {"config": {"aksgpu:cluster": {"name": "gpu", "controlPlane": {"apiServer": api}}}}


@pytest.mark.parametrize(("before", "after", "replaced"), [
    (("public", True), ("private", True), False),  # AKS adds or removes public access in place
    (("private", True), ("public", True), False),
    (("public", False), ("private", False), True),  # a private cluster is chosen at create
    (("public", None), ("private", None), True),
    (("public", False), ("private", True), True),  # integration turned on in the same change: not assumed
])
def test_private_api_server_is_in_place_only_with_vnet_integration_on_both_sides(
        before: tuple[str, bool | None], after: tuple[str, bool | None], replaced: bool) -> None:
    """api-server-vnet-integration.md: with API Server VNet Integration, public access can be added
    or removed after provisioning; catalog/replacement.yaml inPlaceWhen says so."""
    impact = render_impact(_stack(*before), _stack(*after))
    assert bool([c for c in impact.replaced if c.dotted == "controlPlane.apiServer.access"]) is replaced


def test_every_in_place_condition_names_a_replaced_row_and_a_source() -> None:
    table = catalog.load("replacement")
    for path, condition in table["inPlaceWhen"].items():
        assert path in table["replaced"], path
        assert {"when", "equals", "source"} <= condition.keys() and "learn.microsoft.com" in condition["source"]
