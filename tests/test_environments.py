"""environments.yaml: merging presets and overrides, override paths, `--set`, and bad files."""

from __future__ import annotations

from pathlib import Path

import pytest

from aksgpu.environments.file import load_environments
from aksgpu.environments.overrides import (
    assignment_overrides,
    check_override_keys,
    describe_overrides,
    merge,
    user_path,
)
from aksgpu.errors import UserError


def test_mappings_merge_key_by_key_and_scalars_and_plain_lists_replace() -> None:
    base = {"controlPlane": {"tier": "Free", "upgradeChannel": "patch"}, "systemPool": {"zones": ["1", "2", "3"]}}
    override = {"controlPlane": {"tier": "Premium"}, "systemPool": {"zones": ["1"]}}
    merged = merge(base, override)
    assert merged == {"controlPlane": {"tier": "Premium", "upgradeChannel": "patch"}, "systemPool": {"zones": ["1"]}}
    assert base["controlPlane"]["tier"] == "Free", "the base is not changed"


def test_named_items_merge_by_name_append_new_ones_and_can_be_removed() -> None:
    base = {"nodePools": [{"name": "a100", "maxCount": 20, "zones": ["1"]}, {"name": "cpu", "maxCount": 5}]}
    override = {"nodePools": [{"name": "a100", "maxCount": 8}, {"name": "cpu", "_remove": True},
                              {"name": "h100", "vmSize": "Standard_ND96isr_H100_v5"}]}
    assert merge(base, override)["nodePools"] == [
        {"name": "a100", "maxCount": 8, "zones": ["1"]},
        {"name": "h100", "vmSize": "Standard_ND96isr_H100_v5"},
    ]


def test_maintenance_windows_merge_by_schedule() -> None:
    base = {"maintenanceWindows": [{"schedule": "autoUpgrade", "durationHours": 4},
                                   {"schedule": "nodeOsUpgrade", "durationHours": 4}]}
    merged = merge(base, {"maintenanceWindows": [{"schedule": "nodeOsUpgrade", "durationHours": 6}]})
    assert merged["maintenanceWindows"][1] == {"schedule": "nodeOsUpgrade", "durationHours": 6}
    assert merged["maintenanceWindows"][0]["durationHours"] == 4


def test_removing_an_item_the_base_does_not_have_is_a_no_op() -> None:
    assert merge({}, {"nodePools": [{"name": "x", "_remove": True}]}) == {"nodePools": []}


def test_misspelt_override_paths_are_named_where_the_user_wrote_them() -> None:
    issues = check_override_keys({"controlPlane": {"teir": "Premium"}, "nodePools": [{"name": "a", "vmsize": "x"}]},
                                 "environments.dev.overrides")
    assert [i.path for i in issues] == ["environments.dev.overrides.controlPlane.teir",
                                        "environments.dev.overrides.nodePools[name=a].vmsize"]
    assert 'did you mean "tier"' in issues[0].fix and 'did you mean "vmSize"' in issues[1].fix


def test_set_assignments_become_overrides_with_list_items_by_name() -> None:
    overrides = assignment_overrides(["controlPlane.tier=Premium", "nodePools.a100.maxCount=8",
                                      "nodePools.a100.zones=[\"1\"]", "tags.team=ml",
                                      "controlPlane.maintenanceWindows.nodeOsUpgrade.durationHours=6"])
    assert overrides == {
        "controlPlane": {"tier": "Premium",
                         "maintenanceWindows": [{"schedule": "nodeOsUpgrade", "durationHours": 6}]},
        "nodePools": [{"name": "a100", "maxCount": 8, "zones": ["1"]}],
        "tags": {"team": "ml"},
    }


@pytest.mark.parametrize(("assignment", "message"), [
    ("controlPlane.teir=Premium", 'did you mean "tier"'),
    ("controlPlane.tier", "must be PATH=VALUE"),
    ("nodePools.a100=3", "name a field of nodePools item 'a100'"),
    ("bogus=1", '"bogus" is not a field at (top level)'),
])
def test_bad_set_assignments_are_one_clear_message(assignment: str, message: str) -> None:
    with pytest.raises(UserError, match="Fix:") as caught:
        assignment_overrides([assignment])
    assert message in str(caught.value)


def test_the_same_field_set_twice_is_refused() -> None:
    with pytest.raises(UserError, match="nodePools.a100.maxCount is already set by an earlier --set"):
        assignment_overrides(["nodePools.a100.maxCount=1", "nodePools.a100.maxCount=2"])


def test_describe_overrides_says_what_is_added_and_removed() -> None:
    base = {"nodePools": [{"name": "a100", "maxCount": 2}], "controlPlane": {"tier": "Free"}}
    paths = describe_overrides({"controlPlane": {"tier": "Premium"},
                                "nodePools": [{"name": "a100", "maxCount": 4}, {"name": "h100", "kind": "gpu"},
                                              {"name": "old", "_remove": True}]}, base)
    assert paths == ["controlPlane.tier", "nodePools.a100.maxCount", "nodePools.h100 (added)",
                     "nodePools.old (removed)"]


def _project(tmp_path: Path, environments: str) -> Path:
    (tmp_path / "Pulumi.yaml").write_text("name: aksgpu\nruntime: python\nstackConfigDir: stacks\n")
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "environments.yaml").write_text(environments)
    return tmp_path


def test_unknown_keys_in_environments_yaml_are_reported_with_their_path(tmp_path: Path) -> None:
    project = _project(tmp_path, "environments:\n  dev:\n    preset: dev\n    overides: {}\n")
    with pytest.raises(UserError) as caught:
        load_environments(project)
    assert "environments.dev.overides" in str(caught.value) and 'did you mean "overrides"' in str(caught.value)


def test_bad_environment_names_are_rejected(tmp_path: Path) -> None:
    project = _project(tmp_path, "environments:\n  'prod env':\n    preset: dev\n")
    with pytest.raises(UserError, match="a Pulumi stack name"):
        load_environments(project)


def test_unknown_environment_suggests_the_closest(tmp_path: Path) -> None:
    project = _project(tmp_path, "environments:\n  staging:\n    preset: dev\n")
    with pytest.raises(UserError, match='did you mean "staging"'):
        load_environments(project).get("stagin")


def test_environment_settings_fall_back_to_defaults(tmp_path: Path) -> None:
    project = _project(tmp_path, "defaults:\n  backend: azblob://state?storage_account=acct\n"
                                 "environments:\n  a: {preset: dev}\n  b: {preset: dev, backend: file:///tmp/x}\n")
    environments = load_environments(project)
    assert environments.get("a").backend == "azblob://state?storage_account=acct"
    assert environments.get("b").backend == "file:///tmp/x"


def test_bad_yaml_in_environments_yaml_names_the_line(tmp_path: Path) -> None:
    project = _project(tmp_path, "environments:\n  dev:\n    preset: [dev\n")
    with pytest.raises(UserError, match=r"environments.yaml is not valid YAML: line 3, column 13"):
        load_environments(project)


def test_user_path_names_the_layer_and_item_that_wrote_a_value() -> None:
    preset = {"nodePools": [{"name": "a", "maxCount": 4, "zones": ["1"]}], "tags": {"x.y/z": "1"}}
    shared = {"tags": {"x.y/z": "2"}}
    own = {"nodePools": [{"name": "b", "kind": "gpu"}, {"name": "a", "zones": ["1", "9"]}]}
    merged = merge(merge(preset, shared), own)
    layers = [("environments.prod.overrides", own), ("defaults.overrides", shared)]
    assert user_path("nodePools[0].zones[1]", merged,
                     layers) == "environments.prod.overrides.nodePools[name=a].zones[1]"
    assert user_path("nodePools[0].maxCount", merged, layers) == "nodePools[name=a].maxCount"  # the preset's
    assert user_path("tags.x.y/z", merged, layers) == "defaults.overrides.tags.x.y/z"
    assert user_path("nodePools[1].vmSize", merged, layers) == "nodePools[name=b].vmSize"
    assert user_path("nodePools[1].vmSize", merged, layers, missing=True) == \
        "environments.prod.overrides.nodePools[name=b].vmSize"
    assert user_path("nodePools[7].name", merged, layers) == "nodePools[7].name"  # no such item: as given
