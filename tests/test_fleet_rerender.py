"""Re-rendering a fleet's shared stack refuses, as a cluster's does, a change Azure cannot make in
place: the fleet's identity (name, location, resource group), its hub (fleets.json 2024-05-02-preview:
FleetHubProfile's fields are x-ms-mutability read/create) and its registry's name (issue 26)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from aksgpu import catalog
from aksgpu.cli.app import app
from aksgpu.environments.file import load_environments
from aksgpu.environments.render import plan_renders
from aksgpu.spec.fleet import FleetSpec
from aksgpu.stack_config import FLEET_KEY

SHARED = "Pulumi.training.yaml"
runner = CliRunner()


def _edit_fleet(project: Path, **fleet: Any) -> None:
    path = project / "stacks" / "environments.yaml"
    document = yaml.safe_load(path.read_text())
    document["environments"]["training"]["fleet"].update(fleet)
    path.write_text(yaml.safe_dump(document, sort_keys=False))


def test_a_hub_added_to_a_rendered_hubless_fleet_is_refused_with_the_fleet_setting_that_keeps_it(
        fleet_project: Path) -> None:
    before = (fleet_project / "stacks" / SHARED).read_text()
    _edit_fleet(fleet_project, hub={"enabled": True, "dnsPrefix": "gpu-hub"})
    result = runner.invoke(app, ["render", "training"])
    assert result.exit_code == 2, result.output
    assert (fleet_project / "stacks" / SHARED).read_text() == before, "nothing written"
    assert "Fleet hubProfile: hub.enabled: false -> true" in result.output
    assert "a new fleet: every member joins it again" in result.output
    snippet = result.output.split("render again:\n", 1)[1].split("\nor, to replace", 1)[0]
    keep = yaml.safe_load(snippet)["environments"]["training"]
    assert keep == {"fleet": {"hub": {"enabled": False, "dnsPrefix": None}}}
    assert "training's fleet)" in result.output


@pytest.mark.parametrize(("field", "value", "line"), [
    ("location", "westus3", "Fleet location: location: eastus2 -> westus3"),
    ("resourceGroup", "rg-other", "Fleet resourceGroupName: resourceGroup: rg-gpu-training-fleet -> rg-other"),
    ("registry", {"name": "othername1"}, "Registry registryName: registry.name: gputrainingacr -> othername1"),
])
def test_a_change_to_the_fleets_identity_or_registry_name_is_refused(
        fleet_project: Path, field: str, value: Any, line: str) -> None:
    _edit_fleet(fleet_project, **{field: value})
    shared = plan_renders(load_environments(fleet_project), "training")[0]
    assert line in shared.refusal()
    result = runner.invoke(app, ["render", "training", "--allow-replace"])
    assert result.exit_code == 0, result.output


def test_an_unchanged_fleet_and_its_legacy_registry_name_re_render_without_a_refusal(fleet_project: Path) -> None:
    """The example's shared stack records the suffix-less registry name a fleet rendered before had;
    a file that still says null there is the same registry, not a rename."""
    path = fleet_project / "stacks" / SHARED
    document = yaml.safe_load(path.read_text())
    assert document["config"][FLEET_KEY]["registry"]["name"] == "gputrainingacr"
    document["config"][FLEET_KEY]["registry"]["name"] = None
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    shared = plan_renders(load_environments(fleet_project), "training")[0]
    assert shared.impact.replaced == () and shared.refusal() == ""


def test_every_fleet_row_names_a_fleet_spec_field() -> None:
    fields = {info.alias or name for name, info in FleetSpec.model_fields.items()}
    for path in catalog.load("replacement")["fleetReplaced"]:
        assert path.split(".")[0] in fields, path
