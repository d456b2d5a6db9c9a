"""Tags Azure Policy owns (policyOwnedTags) on a fleet's shared resources: ignored in diffs on every
Azure resource the shared stack tags, as on a cluster's, so a Modify/Append policy's tag is no drift
in the shared stack either (issue 26); their names follow the cluster's rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from aksgpu.environments.file import load_environments
from aksgpu.environments.fleet import effective_fleet
from aksgpu.plan.planner import Plan, plan_stack
from aksgpu.project.stackfile import StackFile, resolve_stack
from aksgpu.spec import SpecError
from aksgpu.spec.fleet import parse_fleet_spec
from aksgpu.stack_config import FLEET_KEY
from tests.helpers import FLEET_EXAMPLE, copy_project, edit

OWNED = ["costCenter", "created.On"]


def _shared_raw() -> dict[str, Any]:
    return resolve_stack("training", cwd=FLEET_EXAMPLE).fleet


def _plan_shared(raw: dict[str, Any]) -> Plan:
    """The shared stack planned with the project's real program under Pulumi's mock runtime."""
    path = FLEET_EXAMPLE / "stacks" / "Pulumi.training.yaml"
    return plan_stack(StackFile(FLEET_EXAMPLE, path, "training", {FLEET_KEY: raw}), stack_outputs={})


def test_every_tagged_shared_resource_ignores_the_policy_owned_tags() -> None:
    plan = _plan_shared(edit(_shared_raw(), "policyOwnedTags", OWNED))
    tagged = [r for r in plan.resources if r.type.startswith("azure-native:") and r.inputs.get("tags")]
    types = {r.type for r in tagged}
    assert {"azure-native:containerservice:Fleet", "azure-native:containerregistry:Registry",
            "azure-native:containerregistry:Replication", "azure-native:operationalinsights:Workspace",
            "azure-native:monitor:AzureMonitorWorkspace", "azure-native:resources:ResourceGroup"} <= types, types
    for resource in tagged:
        ignored = resource.options["ignoreChanges"]
        assert 'tags["costCenter"]' in ignored and 'tags["created.On"]' in ignored, (resource.urn, ignored)


def test_without_policy_owned_tags_no_shared_tag_is_ignored() -> None:
    plan = _plan_shared(_shared_raw())
    assert not [r.urn for r in plan.resources if any(path.startswith("tags[") for path in r.options["ignoreChanges"])]


@pytest.mark.parametrize(("owned", "tags", "rule"), [
    (["cost/center"], {}, "without <>%&\\?/"),
    ([""], {}, "1-512 characters"),
    (["x" * 513], {}, "1-512 characters"),
    (["Env"], {"env": "training"}, "is set by aksgpu"),
    (["Managed-By"], {}, "is set by aksgpu"),
    (["owner", "OWNER"], {}, "listed twice"),
])
def test_bad_policy_owned_tags_of_a_fleet_are_named(owned: list[str], tags: dict[str, str], rule: str) -> None:
    raw = edit(edit(_shared_raw(), "policyOwnedTags", owned), "tags", tags)
    with pytest.raises(SpecError) as error:
        parse_fleet_spec(raw)
    assert any(issue.path.startswith("policyOwnedTags[") and rule in issue.rule for issue in error.value.errors), \
        [str(issue) for issue in error.value.errors]


def _set_fleet(project: Path, **settings: Any) -> None:
    path = project / "stacks" / "environments.yaml"
    document = yaml.safe_load(path.read_text())
    document["environments"]["training"]["fleet"].update(settings)
    path.write_text(yaml.safe_dump(document, sort_keys=False))


def test_the_environments_policy_owned_tags_reach_the_shared_stack(tmp_path: Path) -> None:
    project = copy_project(FLEET_EXAMPLE, tmp_path)
    path = project / "stacks" / "environments.yaml"
    document = yaml.safe_load(path.read_text())
    document["environments"]["training"]["overrides"]["policyOwnedTags"] = ["costCenter"]
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    fleet = effective_fleet(load_environments(project), "training")
    assert fleet.spec.policy_owned_tags == ["costCenter"]  # as every member's
    assert all(member.spec.policy_owned_tags == ["costCenter"] for member in fleet.members)
    _set_fleet(project, policyOwnedTags=["owner"])  # the fleet's own list wins for the shared stack
    assert effective_fleet(load_environments(project), "training").spec.policy_owned_tags == ["owner"]
    _set_fleet(project, policyOwnedTags=["env"])  # a tag the fleet sets itself
    with pytest.raises(SpecError) as error:
        effective_fleet(load_environments(project), "training")
    assert [issue.path for issue in error.value.errors] == ["environments.training.fleet.policyOwnedTags[0]"]
