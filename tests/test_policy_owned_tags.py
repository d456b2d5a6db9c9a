"""Tags Azure Policy owns (policyOwnedTags): ignored in diffs on every Azure resource aksgpu tags,
so a Modify/Append policy's tag is no drift; their names follow Azure's rules and are not also
aksgpu's own tags (issue 26)."""

from __future__ import annotations

import pytest

from aksgpu.components.policy_tags import tag_path
from aksgpu.spec import SpecError, parse_cluster_spec
from tests.helpers import base_spec, edit, shared_plan

OWNED = ["costCenter", "created.On"]


def test_every_tagged_azure_resource_ignores_the_policy_owned_tags() -> None:
    plan = shared_plan(edit(base_spec(), "policyOwnedTags", OWNED))
    tagged = [r for r in plan.resources if r.type.startswith("azure-native:") and r.inputs.get("tags")]
    types = {r.type for r in tagged}
    assert {"azure-native:containerservice:ManagedCluster", "azure-native:containerservice:AgentPool",
            "azure-native:resources:ResourceGroup"} <= types, types
    for resource in tagged:
        ignored = resource.options["ignoreChanges"]
        assert 'tags["costCenter"]' in ignored and 'tags["created.On"]' in ignored, (resource.urn, ignored)
    cluster = next(r for r in tagged if r.type.endswith(":ManagedCluster"))
    assert "agentPoolProfiles" in cluster.options["ignoreChanges"], "the component's own entries are kept"


def test_without_policy_owned_tags_no_tag_is_ignored() -> None:
    plan = shared_plan(base_spec())
    assert not [r.urn for r in plan.resources if any(path.startswith("tags[") for path in r.options["ignoreChanges"])]


def test_a_tag_path_quotes_the_name() -> None:
    assert tag_path('a"b') == 'tags["a\\"b"]'


@pytest.mark.parametrize(("owned", "tags", "rule"), [
    (["cost/center"], {}, "without <>%&\\?/"),
    ([""], {}, "1-512 characters"),
    (["CostCenter"], {"costcenter": "ml"}, "is set by aksgpu"),
    (["Managed-By"], {}, "is set by aksgpu"),
    (["owner", "OWNER"], {}, "listed twice"),
])
def test_bad_policy_owned_tags_are_named(owned: list[str], tags: dict[str, str], rule: str) -> None:
    spec = edit(edit(base_spec(), "policyOwnedTags", owned), "tags", tags)
    with pytest.raises(SpecError) as error:
        parse_cluster_spec(spec)
    assert any(issue.path.startswith("policyOwnedTags[") and rule in issue.rule for issue in error.value.errors), \
        [str(issue) for issue in error.value.errors]
