"""A fleet's own fields take the rules of the same fields of a cluster (issue 27, "Input rules"): its
location, resource group and hub, and its members' clusters, regions, stacks and groups. One hostile
value per rule, each refused (or warned) with one message naming the field, the value, the rule and
the fix, where it was written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from aksgpu.environments.file import load_environments
from aksgpu.environments.fleet import effective_fleet
from aksgpu.project.stackfile import resolve_stack
from aksgpu.spec import SpecError, parse_cluster_spec
from aksgpu.spec.fleet import parse_fleet_spec, parse_fleet_upgrades_spec
from tests.helpers import FLEET_EXAMPLE, base_spec, copy_project, edit

HUB = {"enabled": True}


def _shared_raw() -> dict[str, Any]:
    return resolve_stack("training", cwd=FLEET_EXAMPLE).fleet


def _refused(raw: dict[str, Any], path: str, rule: str) -> Any:
    """The one error at `path`, whose rule holds `rule`; it names the value and a fix."""
    with pytest.raises(SpecError) as error:
        parse_fleet_spec(raw, source="stacks/Pulumi.training.yaml (aksgpu:fleet)")
    found = [issue for issue in error.value.errors if issue.path == path]
    assert len(found) == 1 and rule in found[0].rule, [str(issue) for issue in error.value.errors]
    assert found[0].fix, found[0]
    assert error.value.source == "stacks/Pulumi.training.yaml (aksgpu:fleet)"
    return found[0]


@pytest.mark.parametrize(("path", "value", "rule"), [
    # The fleet's region: the cluster's rule and region table.
    ("location", "", "must be an Azure region name in lowercase without spaces"),
    ("location", "East US 2", "must be an Azure region name in lowercase without spaces"),
    ("location", "eastsu2", "is not an Azure region, but is close to one"),
    # The fleet's resource group: the cluster's rule.
    ("resourceGroup", "", "must be 1-90 letters, digits"),
    ("resourceGroup", "r" * 91, "must be 1-90 letters, digits"),
    ("resourceGroup", "rg-fleet.", "not ending in '.'"),
    ("resourceGroup", "rg/fleet", "must be 1-90 letters, digits"),
    # The members: a cluster's name and region, a stack's name, Fleet Manager's member and group names.
    ("members[0].clusterName", "", "must be 1-63 letters, digits, '-' or '_'"),
    ("members[0].clusterName", "g" * 64, "must be 1-63 letters, digits, '-' or '_'"),
    ("members[0].clusterName", "gpu canary", "must be 1-63 letters, digits, '-' or '_'"),
    ("members[0].clusterName", "-gpu", "starting and ending with a letter or digit"),
    ("members[0].location", "westus33", "is not an Azure region, but is close to one"),
    ("members[0].location", "WestUS3", "must be an Azure region name in lowercase"),
    ("members[0].stack", "", "a Pulumi stack name"),
    ("members[0].stack", "s" * 65, "a Pulumi stack name"),
    ("members[0].stack", "training-canary.yaml", "a Pulumi stack name"),
    ("members[0].stack", "training/canary", "a Pulumi stack name"),
    ("members[0].name", "", "1-50 lowercase letters"),
    ("members[0].name", "Canary", "1-50 lowercase letters"),
    ("members[0].group", "g" * 51, "1-50 lowercase letters"),
    ("members[0].group", "canary_", "1-50 lowercase letters"),
])
def test_a_fleet_field_breaking_the_clusters_rule_is_refused(path: str, value: Any, rule: str) -> None:
    issue = _refused(edit(_shared_raw(), path.replace("[", ".").replace("]", ""), value), path, rule)
    assert issue.value == value


def test_a_close_region_names_the_nearest_one() -> None:
    issue = _refused(edit(_shared_raw(), "location", "eastsu2"), "location", "close to one")
    assert 'did you mean "eastus2"?' in issue.fix
    issue = _refused(edit(_shared_raw(), "members.2.location", "westus33"), "members[2].location", "close to one")
    assert 'did you mean "westus3"?' in issue.fix


def test_a_region_the_table_lacks_is_a_warning_naming_the_table() -> None:
    spec, warnings = parse_fleet_spec(edit(_shared_raw(), "location", "marsnorth1"))
    assert spec.location == "marsnorth1"
    assert [(w.path, w.severity) for w in warnings] == [("location", "warning")]
    assert "azure_regions.yaml" in warnings[0].rule


@pytest.mark.parametrize(("hub", "path", "rule"), [
    ({"dnsPrefix": "-hub"}, "hub.dnsPrefix", "must be 1-54 letters, digits or '-'"),
    ({"dnsPrefix": "h" * 55}, "hub.dnsPrefix", "must be 1-54 letters, digits or '-'"),
    ({"dnsPrefix": "hub_prefix"}, "hub.dnsPrefix", "must be 1-54 letters, digits or '-'"),
    ({"dnsPrefix": ""}, "hub.dnsPrefix", "must be 1-54 letters, digits or '-'"),
    ({"vmSize": ""}, "hub.vmSize", "at least 1 character"),
    ({"vmSize": "D4s_v5"}, "hub.vmSize", "is not an Azure VM size name"),
    ({"vmSize": "Standard_D4s_v55"}, "hub.vmSize", "is not in aksgpu's VM size table"),
    ({"vmSize": "Standard_B2s"}, "hub.vmSize", "B-series sizes are not supported"),
    ({"vmSize": "Standard_NC24ads_A100_v4"}, "hub.vmSize", "not GPU work"),
])
def test_hub_settings_take_the_clusters_rules(hub: dict[str, Any], path: str, rule: str) -> None:
    _refused(edit(_shared_raw(), "hub", {**HUB, **hub}), path, rule)


def test_an_unlisted_hub_size_names_the_nearest_and_the_way_past_the_table() -> None:
    issue = _refused(edit(_shared_raw(), "hub", {**HUB, "vmSize": "Standard_D4s_v55"}), "hub.vmSize", "table")
    assert 'did you mean "Standard_D4s_v5"?' in issue.fix and "hub.vmSizeNotInCatalog: true" in issue.fix
    spec, warnings = parse_fleet_spec(edit(_shared_raw(), "hub", {**HUB, "vmSize": "Standard_D4s_v55",
                                                                  "vmSizeNotInCatalog": True}))
    assert spec.hub.vm_size == "Standard_D4s_v55"
    assert [w.path for w in warnings] == ["hub.vmSize"] and warnings[0].severity == "warning"
    parse_fleet_spec(edit(_shared_raw(), "hub", {**HUB, "vmSize": "Standard_D4s_v5", "dnsPrefix": "gpu-hub"}))


def test_the_stack_a_fleet_names_is_a_pulumi_stack_name() -> None:
    upgrades = resolve_stack("training-upgrades", cwd=FLEET_EXAMPLE).fleet_upgrades
    with pytest.raises(SpecError) as error:
        parse_fleet_upgrades_spec(edit(upgrades, "stack", "training fleet"))
    assert [issue.path for issue in error.value.errors] == ["stack"]
    membership = {"stack": "training/shared", "member": "canary", "group": "canary"}
    with pytest.raises(SpecError) as error:
        parse_cluster_spec(edit(base_spec(), "fleet", membership))
    assert "fleet.stack" in [issue.path for issue in error.value.errors]


# --- where environments.yaml sets them ---------------------------------------------------------


def _fleet_project(tmp_path: Path, **fleet: Any) -> Path:
    project = copy_project(FLEET_EXAMPLE, tmp_path)
    path = project / "stacks" / "environments.yaml"
    document = yaml.safe_load(path.read_text())
    document["environments"]["training"]["fleet"].update(fleet)
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return project


@pytest.mark.parametrize(("fleet", "path", "rule"), [
    ({"location": "eastsu2"}, "environments.training.fleet.location", "close to one"),
    ({"location": "East US"}, "environments.training.fleet.location", "lowercase without spaces"),
    ({"resourceGroup": "rg."}, "environments.training.fleet.resourceGroup", "not ending in '.'"),
    ({"hub": {"enabled": True, "vmSize": "Standard_B2s"}}, "environments.training.fleet.hub.vmSize", "B-series"),
    ({"hub": {"enabled": True, "dnsPrefix": "hub."}}, "environments.training.fleet.hub.dnsPrefix", "1-54"),
])
def test_environments_yaml_fleet_fields_are_refused_where_written(tmp_path: Path, fleet: dict[str, Any], path: str,
                                                                   rule: str) -> None:
    project = _fleet_project(tmp_path, **fleet)
    with pytest.raises(SpecError) as error:
        effective_fleet(load_environments(project), "training")
    assert [issue.path for issue in error.value.errors] == [path], [str(i) for i in error.value.errors]
    assert rule in error.value.errors[0].rule
    assert "fleet environment training" in (error.value.source or "")


def test_a_members_unlisted_region_is_warned_once_where_it_was_written(tmp_path: Path) -> None:
    project = copy_project(FLEET_EXAMPLE, tmp_path)
    path = project / "stacks" / "environments.yaml"
    document = yaml.safe_load(path.read_text())
    document["environments"]["training"]["fleet"].pop("location")  # the fleet takes the first member's region
    document["environments"]["training"]["fleet"]["members"][0]["overrides"]["location"] = "marsnorth1"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    fleet = effective_fleet(load_environments(project), "training")
    assert fleet.spec.location == "marsnorth1"
    assert not [str(w) for w in fleet.warnings if "marsnorth1" in str(w.value)]  # the member's own warning says it
    member = fleet.member("canary")
    assert [w.path for w in member.warnings if w.value == "marsnorth1"] == [
        "environments.training.fleet.members[name=canary].overrides.location"]
