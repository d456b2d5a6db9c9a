"""A fleet's shared registry name is unique across all of Azure, as a cluster's is: two fleets named
gpu-training (two resource groups, two teams) must not both ask for gputrainingacr, and no aksgpu
upgrade may rename the registry of a fleet that exists (aksgpu issue 26, for fleets)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from aksgpu.cli.app import app
from aksgpu.environments.file import load_environments
from aksgpu.environments.render import plan_renders, write_rendered
from aksgpu.environments.stack_text import value_digest
from aksgpu.plan.fleet import fleet_facts, fleet_lines, plan_fleet
from aksgpu.project.stackfile import resolve_stack
from aksgpu.spec import names
from aksgpu.spec.fleet import fleet_global_suffix, parse_fleet_spec
from aksgpu.stack_config import DIGEST_KEY, FLEET_KEY
from tests.helpers import FLEET_EXAMPLE, VALIDATE_COMMANDS

REGISTRY = "Microsoft.ContainerRegistry/registries"
runner = CliRunner()


def _document(project: Path) -> dict[str, Any]:
    return yaml.safe_load((project / "stacks" / "environments.yaml").read_text())


def _write(project: Path, document: dict[str, Any]) -> None:
    (project / "stacks" / "environments.yaml").write_text(yaml.safe_dump(document, sort_keys=False))


def _second_fleet(project: Path, environment: str, **fleet: Any) -> None:
    """Another fleet environment like the example's training, named gpu-training too, with `fleet` changed."""
    document = _document(project)
    other = copy.deepcopy(document["environments"]["training"])
    other["fleet"].update(fleet)
    for member in other["fleet"]["members"]:  # clusters of their own
        member["overrides"]["resourceGroup"] = {"name": f"{member['overrides']['resourceGroup']['name']}-b"}
    document["environments"][environment] = other
    _write(project, document)


def _registry(project: Path, environment: str) -> str:
    shared = plan_renders(load_environments(project), environment)[0]
    name = yaml.safe_load(shared.text)["config"][FLEET_KEY]["registry"]["name"]
    assert isinstance(name, str)
    return name


def test_two_fleets_with_one_name_in_two_resource_groups_get_two_registries(fleet_project: Path) -> None:
    (fleet_project / "stacks" / "Pulumi.training.yaml").unlink()  # both new: neither has a registry yet
    _second_fleet(fleet_project, "training-b", resourceGroup="rg-gpu-training-team-b")
    first, second = _registry(fleet_project, "training"), _registry(fleet_project, "training-b")
    assert first != second
    assert first.startswith("gputrainingacr") and second.startswith("gputrainingacr")
    assert first == "gputrainingacr" + fleet_global_suffix("rg-gpu-training-fleet", "eastus2", "gpu-training")
    assert all(names.obeys(REGISTRY, name) for name in (first, second))


def test_the_fleet_suffix_is_pinned_and_apart_from_a_clusters() -> None:
    # Pinned: a new derivation would rename the registry of a fleet whose stack file is lost.
    assert fleet_global_suffix("rg-gpu-training-fleet", "eastus2", "gpu-training") == "hqotic"
    assert fleet_global_suffix("RG-GPU-TRAINING-FLEET", "EastUS2", "gpu-training") == "hqotic"
    # A cluster of the same name in the same group gets another registry name.
    assert fleet_global_suffix("rg", "eastus2", "gpu") != names.global_suffix("rg", "eastus2", "gpu")


def test_an_existing_rendered_fleet_keeps_its_registry(fleet_project: Path) -> None:
    # The example's shared stack was rendered before names were recorded: its registry is gputrainingacr.
    path = fleet_project / "stacks" / "Pulumi.training.yaml"
    document = yaml.safe_load(path.read_text())
    document["config"][FLEET_KEY]["registry"]["name"] = None  # as an aksgpu before this change wrote it
    document["config"][DIGEST_KEY] = value_digest(document["config"][FLEET_KEY])
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    assert _registry(fleet_project, "training") == "gputrainingacr"
    result = runner.invoke(app, ["render", "training"])
    assert result.exit_code == 0, result.output
    assert "name: gputrainingacr\n" in path.read_text()
    # Recorded now: a later change of the resource group (which derives the suffix) does not move it.
    document = _document(fleet_project)
    document["environments"]["training"]["fleet"]["resourceGroup"] = "rg-elsewhere"
    _write(fleet_project, document)
    assert _registry(fleet_project, "training") == "gputrainingacr"


def test_an_unreadable_shared_stack_keeps_the_suffix_less_name(fleet_project: Path) -> None:
    (fleet_project / "stacks" / "Pulumi.training.yaml").write_text("config: [not: a, spec\n")
    assert _registry(fleet_project, "training") == "gputrainingacr"


def test_a_new_fleet_renders_and_plans_its_suffixed_registry(fleet_project: Path) -> None:
    (fleet_project / "stacks" / "Pulumi.training.yaml").unlink()
    for rendered in plan_renders(load_environments(fleet_project), "training"):
        write_rendered(rendered)
    again = plan_renders(load_environments(fleet_project), "training")[0]
    assert again.state == "current"  # the same name on every render
    plan = plan_fleet(resolve_stack("training", cwd=fleet_project))
    registries = plan.shared.by_type("azure-native:containerregistry:Registry")
    assert [r.inputs["registryName"] for r in registries] == ["gputrainingacrhqotic"]
    facts = fleet_facts(plan)
    assert facts["globalNames"]["training"] == ["registry gputrainingacrhqotic"]
    text = "\n".join(fleet_lines(facts))
    assert "Global names (unique across Azure" in text and "training: registry gputrainingacrhqotic" in text
    assert "set fleet.registry.name" in text


@pytest.mark.parametrize("command", VALIDATE_COMMANDS)
def test_validate_warns_when_a_fleet_and_a_cluster_ask_for_one_registry(fleet_project: Path,
                                                                         command: list[str]) -> None:
    document = _document(fleet_project)
    document["environments"]["solo"] = {"preset": "dev", "overrides": {
        "name": "gpu-solo", "location": "eastus2", "resourceGroup": {"name": "rg-solo"},
        "registry": {"name": "GPUTrainingACR"}}}
    _write(fleet_project, document)
    output = runner.invoke(app, command).output
    assert "asks Azure for the registry name" in output and "gputrainingacr" in output.lower(), output
    assert "set registry.name in one of them" in output or "set fleet.registry.name in one of them" in output
    # Another name: no warning.
    document["environments"]["solo"]["overrides"]["registry"] = {"name": "gpusoloacr"}
    _write(fleet_project, document)
    assert "asks Azure for the registry name" not in runner.invoke(app, command).output


def test_a_fleet_stack_file_validated_alone_reports_its_global_name() -> None:
    from aksgpu.environments.validation import validate_targets

    reports = validate_targets([str(FLEET_EXAMPLE / "stacks" / "Pulumi.training.yaml")], cwd=FLEET_EXAMPLE)
    assert [tuple(name) for name in reports[0].global_names] == [("registry", "gputrainingacr",
                                                                    "fleet.registry.name")]
    spec, _ = parse_fleet_spec(resolve_stack("training", cwd=FLEET_EXAMPLE).fleet)
    assert spec.registry_name == "gputrainingacr"
