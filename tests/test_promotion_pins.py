"""The pins of health-gated promotion in the spec and the plan: promotion (canary pool, rules,
snapshots) and nodePools[].pins, their rules, and the Snapshot and AgentPool bodies they add,
each checked against Azure's OpenAPI spec for Microsoft.ContainerService 2025-09-01."""

from __future__ import annotations

from typing import Any

import pytest

from aksgpu.spec import SpecError, parse_cluster_spec
from tests.helpers import SHARED, SUBSCRIPTION, base_spec, edit, shared_plan
from tests.oracles.azure_openapi import AksOpenApi

SNAPSHOT_ID = (f"{SUBSCRIPTION}/resourceGroups/rg-images/providers/Microsoft.ContainerService/snapshots/"
               "a100-202610")


def promoted_spec() -> dict[str, Any]:
    """A canary pool a100c, and a100 pinned to a snapshot taken from it."""
    spec = edit(base_spec(), "nodePools.0.name", "a100c")
    spec = edit(spec, "nodePools.1", {"name": "a100", "kind": "gpu", "vmSize": "Standard_NC24ads_A100_v4",
                                      "minCount": 0, "maxCount": 4, "pins": {"nodeImageSnapshot": "a100-202611"}})
    spec = edit(spec, "promotion", {"canaryPool": "a100c",
                                    "snapshots": [{"name": "a100-202611", "sourcePool": "a100c"}]})
    return edit(edit(spec, "controlPlane.nodeOsUpgradeChannel", "None"), "controlPlane.upgradeChannel", "none")


def _problems(spec: dict[str, Any]) -> list[tuple[str, str, str]]:
    try:
        _, issues = parse_cluster_spec(spec)
    except SpecError as error:
        issues = error.problems
    return [(i.path, i.severity, i.rule) for i in issues if i.path != "network.policy"]


def test_a_promoted_spec_is_valid() -> None:
    assert _problems(promoted_spec()) == []


@pytest.mark.parametrize(("path", "value", "where", "fragment"), [
    ("promotion.canaryPool", "system", "promotion.canaryPool", "must name a GPU pool"),
    ("nodePools.1.pins.nodeImageSnapshot", "nope", "nodePools[1].pins.nodeImageSnapshot",
     "must name a snapshot in promotion.snapshots"),
    ("promotion.snapshots.0.sourcePool", "a100", "nodePools[1].pins.nodeImageSnapshot", "must come before"),
    ("promotion.snapshots.0.sourcePool", "gone", "promotion.snapshots[0].sourcePool", "must name a node pool"),
    ("nodePools.1.pins.driverVersion", "580.105.08", "nodePools[1].pins.driverVersion", "gpu.driver None"),
    ("promotion.snapshots.0.name", "-bad", "promotion.snapshots[0].name", "letters, digits"),
    ("nodePools.0.perZone", True, "promotion.canaryPool", "names a perZone pool"),
])
def test_pin_rules(path: str, value: Any, where: str, fragment: str) -> None:
    found = _problems(edit(promoted_spec(), path, value))
    assert any(p == where and s == "error" and fragment in rule for p, s, rule in found), found


def test_pins_on_a_cpu_pool_are_refused() -> None:
    spec = edit(promoted_spec(), "nodePools.2", {"name": "cpu", "vmSize": "Standard_D8ds_v5", "count": 1,
                                                 "pins": {"nodeImageSnapshot": SNAPSHOT_ID}})
    assert ("nodePools[2].pins", "error", "pins only a GPU pool's stack") in _problems(spec)


def test_an_existing_snapshot_id_pins_and_the_node_image_channel_warns() -> None:
    spec = edit(promoted_spec(), "nodePools.1.pins.nodeImageSnapshot", SNAPSHOT_ID)
    assert _problems(spec) == []
    # Any upgrade without a snapshot ID moves a pinned pool to the latest image (node-pool-snapshot.md).
    for channel in ("NodeImage", "SecurityPatch"):
        found = _problems(edit(spec, "controlPlane.nodeOsUpgradeChannel", channel))
        assert [(p, s) for p, s, _ in found] == [("controlPlane.nodeOsUpgradeChannel", "warning")], channel
    found = _problems(edit(spec, "controlPlane.upgradeChannel", "patch"))
    assert [(p, s) for p, s, _ in found] == [("controlPlane.upgradeChannel", "warning")]
    assert _problems(edit(spec, "controlPlane.nodeOsUpgradeChannel", "Unmanaged")) == []


def test_a_driver_pin_on_an_operator_pool_is_valid() -> None:
    spec = edit(promoted_spec(), "nodePools.1.gpu", {"driver": "None"})
    assert [p for p in _problems(edit(spec, "nodePools.1.pins.driverVersion", "580.105.08")) if p[1] == "error"] == []


SHARED_SPECS = pytest.mark.skipif(not (SHARED / "specs").is_dir(), reason="../shared/specs is not beside the repo")


@SHARED_SPECS
def test_the_snapshot_and_the_pinned_pool_validate_against_azure() -> None:
    oracle = AksOpenApi.load(SHARED)
    plan = shared_plan(promoted_spec())
    [snapshot] = plan.by_type("azure-native:containerservice:Snapshot")
    assert snapshot.inputs["resourceName"] == "a100-202611"
    assert oracle.validate_put("Snapshots_CreateOrUpdate", snapshot.inputs, frozenset({"location", "tags"})) == []
    pools = {p.name.rsplit("-", 1)[1]: p for p in plan.by_type("azure-native:containerservice:AgentPool")}
    assert "creationData" not in pools["a100c"].inputs, "the canary follows AKS's images"
    assert set(pools["a100"].inputs["creationData"]) == {"sourceResourceId"}
    # Sent at create only: a changed creationData does not move an existing pool's image (AKS moves it
    # through a node-image-only upgrade with the snapshot ID: node-pool-snapshot.md), so a plan must not
    # show it as if it did.
    assert "creationData" in pools["a100"].options["ignoreChanges"]
    assert "creationData" not in pools["a100c"].options["ignoreChanges"]
    for pool in pools.values():
        assert oracle.validate_agent_pool(pool.inputs) == [], pool.name
    # The snapshot is of the canary pool, and the pinned pool is created from the snapshot.
    assert pools["a100c"].urn in snapshot.dependencies
    assert snapshot.urn in pools["a100"].dependencies
    external = shared_plan(edit(promoted_spec(), "nodePools.1.pins.nodeImageSnapshot", SNAPSHOT_ID))
    pinned = [p for p in external.by_type("azure-native:containerservice:AgentPool") if p.name.endswith("-a100")]
    assert pinned[0].inputs["creationData"] == {"sourceResourceId": SNAPSHOT_ID}


@SHARED_SPECS
def test_the_oracle_would_catch_a_wrong_snapshot_body() -> None:
    oracle = AksOpenApi.load(SHARED)
    [snapshot] = shared_plan(promoted_spec()).by_type("azure-native:containerservice:Snapshot")
    assert oracle.validate_put("Snapshots_CreateOrUpdate", {**snapshot.inputs, "snapshotType": "Cluster"},
                               frozenset({"location", "tags"}))
    assert oracle.validate_put("Snapshots_CreateOrUpdate", {**snapshot.inputs, "nodeImageVersion": "x"},
                               frozenset({"location", "tags"}))


def test_the_plan_shows_each_gpu_pools_promotion_state() -> None:
    from aksgpu.plan.report import render_text, summary
    spec = edit(promoted_spec(), "nodePools.2", {"name": "a100b", "kind": "gpu", "vmSize": "Standard_NC24ads_A100_v4",
                                                 "minCount": 0, "maxCount": 2})
    plan = shared_plan(spec)
    states = {row["name"]: row.get("promotion") for row in summary(plan)["pools"]}
    assert states == {"system": None, "a100c": "canary", "a100": "pinned to a100-202611", "a100b": "following"}
    table = render_text(plan, []).split("Node pools:\n", 1)[1].splitlines()
    assert table[0].split()[-1] == "promotion" and table[2].split()[-3:] == ["pinned", "to", "a100-202611"]
    [canary] = [p for p in plan.by_type("azure-native:containerservice:AgentPool") if p.name.endswith("-a100c")]
    assert canary.inputs["nodeLabels"]["aksgpu.io/promotion-role"] == "canary"


def test_a_plan_without_promotion_has_no_promotion_column() -> None:
    from aksgpu.plan.report import render_text, summary
    plan = shared_plan(base_spec())
    assert all("promotion" not in row for row in summary(plan)["pools"])
    assert "promotion" not in render_text(plan, []).split("Node pools:\n", 1)[1].splitlines()[0]


def test_a_driver_pin_is_an_nvidiadriver_on_that_pool_alone() -> None:
    from pathlib import Path

    import yaml

    from tests.oracles.kubernetes import template_value_paths, unknown_value_paths, validate_object

    spec = edit(edit(promoted_spec(), "nodePools.1.gpu", {"driver": "None"}), "nodePools.1.pins.driverVersion",
                "580.105.08")
    spec = edit(spec, "nodePools.2", {"name": "h100", "kind": "gpu", "vmSize": "Standard_NC40ads_H100_v5",
                                      "minCount": 0, "maxCount": 2, "gpu": {"driver": "None"}})
    plan = shared_plan(spec)
    drivers = [r.inputs for r in plan.resources if r.type == "kubernetes:nvidia.com/v1alpha1:NVIDIADriver"]
    assert [(d["metadata"]["name"], d["spec"]["version"], d["spec"]["nodeSelector"]) for d in drivers] == [
        ("aksgpu-a100", "580.105.08", {"kubernetes.azure.com/agentpool": "a100"})], "the unpinned h100 has none"
    for driver in drivers:
        assert validate_object(driver, "1.35") == []
    assert validate_object({**drivers[0], "spec": {**drivers[0]["spec"], "pinned": True}}, "1.35"), "strict"
    [release] = [r.inputs for r in plan.by_type("kubernetes:helm.sh/v3:Release") if r.inputs["chart"] == "gpu-operator"]
    assert release["values"]["driver"]["nvidiaDriverCRD"] == {"enabled": True, "deployDefaultCR": True}
    data = Path(__file__).resolve().parent / "data" / "gpu-operator"
    templates = template_value_paths([p.read_text() for p in (data / "templates").glob("*.yaml")])
    chart_values = yaml.safe_load((data / "values.yaml").read_text())
    assert unknown_value_paths(release["values"], chart_values, templates, skip=("node-feature-discovery",)) == []
    from aksgpu.plan.report import summary
    states = {row["name"]: row.get("promotion") for row in summary(plan)["pools"]}
    assert states["a100"] == "pinned to a100-202611, driver 580.105.08" and states["h100"] == "following"
    # The driver DaemonSet tolerates only nvidia.com/gpu and the NVIDIADriver's tolerations
    # (gpu-operator v26.7.0 manifests/state-driver/0500_daemonset.yaml): the gate's startup taint must be there.
    tolerated = {t["key"] for t in drivers[0]["spec"]["tolerations"]}
    assert "startup-taint.cluster-autoscaler.kubernetes.io/aksgpu-gpu-check" in tolerated
    # The hand-over to NVIDIADriver objects comes with the promotion section, not with the first pin: a
    # first pin would otherwise replace the driver pod of every operator node (state_manager.go, v26.7.0).
    unpinned = shared_plan(edit(spec, "nodePools.1.pins", {"nodeImageSnapshot": "a100-202611"}))
    [release] = [r.inputs for r in unpinned.by_type("kubernetes:helm.sh/v3:Release")
                 if r.inputs["chart"] == "gpu-operator"]
    assert release["values"]["driver"]["nvidiaDriverCRD"] == {"enabled": True, "deployDefaultCR": True}
    without = edit(edit(spec, "nodePools.1.pins", None), "promotion", None)
    [release] = [r.inputs for r in shared_plan(without).by_type("kubernetes:helm.sh/v3:Release")
                 if r.inputs["chart"] == "gpu-operator"]
    assert "nvidiaDriverCRD" not in release["values"]["driver"], "no promotion, the ClusterPolicy's driver as before"
