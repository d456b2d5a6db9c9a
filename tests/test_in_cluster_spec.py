"""The spec sections of the in-cluster layer: each rule names the field, the value, the rule and a
fix; risky choices are warnings; hostile values are refused, never passed to the cluster."""

from __future__ import annotations

import pytest

from aksgpu.spec import SpecError, parse_cluster_spec
from tests.helpers import SUBSCRIPTION, base_spec, edit

ACTION_GROUP = f"{SUBSCRIPTION}/resourceGroups/r/providers/Microsoft.Insights/actionGroups/oncall"

# (id, edits [(path, value)], expected path, fragment of the rule)
ERRORS = [
    ("login mode", [("inCluster.login", "devicecode")], "inCluster.login", "must be one of"),
    ("device plugin version", [("gpuSoftware.devicePlugin.version", "v0.20.0; rm -rf /")],
     "gpuSoftware.devicePlugin.version", "image tag or chart version"),
    ("operator chart version", [("gpuSoftware.gpuOperator.chartVersion", "")], "gpuSoftware.gpuOperator.chartVersion",
     "image tag or chart version"),
    ("gate image", [("gpuHealth.gate.image", "Not An Image")], "gpuHealth.gate.image", "container image reference"),
    ("gate command empty", [("gpuHealth.gate.command", [])], "gpuHealth.gate.command", "at least 1"),
    ("gate timeout", [("gpuHealth.gate.timeoutSeconds", 10)], "gpuHealth.gate.timeoutSeconds", "at least 60"),
    ("recheck schedule", [("gpuHealth.recheck.schedule", "every 6 hours")], "gpuHealth.recheck.schedule",
     "cron schedule of five fields"),
    ("recheck nodes", [("gpuHealth.recheck.nodesPerPool", 0)], "gpuHealth.recheck.nodesPerPool", "at least 1"),
    ("scraper enum", [("gpuHealth.metrics.scraper", "datadog")], "gpuHealth.metrics.scraper", "must be one of"),
    ("managed scraper needs managed prometheus", [("gpuHealth.metrics.scraper", "managedPrometheus")],
     "gpuHealth.metrics.scraper", "managed Prometheus is off"),
    ("bundled needs an ordinary pool", [("gpuHealth.metrics.scraper", "bundled")], "gpuHealth.metrics.scraper",
     "needs a pool that runs ordinary pods"),
    ("action group id", [("monitoring.managedPrometheus", True), ("gpuHealth.metrics.scraper", "managedPrometheus"),
                         ("gpuHealth.alerts.actionGroupIds", ["oncall"])], "gpuHealth.alerts.actionGroupIds[0]",
     "resource ID of an Azure Monitor action group"),
    ("action groups need managed prometheus", [("gpuHealth.alerts.actionGroupIds", [ACTION_GROUP])],
     "gpuHealth.alerts.actionGroupIds", "need scraper managedPrometheus"),
    ("balloons negative", [("nodePools.0.balloonNodes", -1)], "nodePools[0].balloonNodes", "at least 0"),
    ("kueue timeout", [("gangScheduling.podsReadyTimeoutMinutes", 0)], "gangScheduling.podsReadyTimeoutMinutes",
     "at least 1"),
    ("kueue needs the in-cluster layer", [("access.teams", [{"name": "vision"}]), ("gangScheduling.enabled", True),
                                          ("inCluster.enabled", False)], "gangScheduling.enabled",
     "installed by the in-cluster layer"),
    ("read-only groups need entra id", [("access.aad.enabled", False), ("access.localAccounts", True),
                                        ("access.readOnlyGroupObjectIds", ["33333333-3333-3333-3333-333333333333"])],
     "access.readOnlyGroupObjectIds", "granted to Entra ID groups"),
    ("read-only group is a guid", [("access.readOnlyGroupObjectIds", ["auditors"])], "access.readOnlyGroupObjectIds[0]",
     "Entra ID object ID"),
]


@pytest.mark.parametrize(("edits", "path", "fragment"), [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_errors_name_the_field_the_rule_and_a_fix(edits: list, path: str, fragment: str) -> None:
    spec = base_spec()
    for field, value in edits:
        spec = edit(spec, field, value)
    with pytest.raises(SpecError) as error:
        parse_cluster_spec(spec)
    matching = [issue for issue in error.value.errors if issue.path == path]
    assert matching, f"no error at {path}: {error.value}"
    assert fragment in matching[0].rule and matching[0].fix


WARNINGS = [
    ("gate off", [("gpuHealth.gate.enabled", False)], "gpuHealth.gate.enabled", "before anything checked"),
    ("metrics nobody collects", [("gpuHealth", {})], "gpuHealth.metrics.scraper", "nothing collects them"),
    ("private api server", [("controlPlane.apiServer", {"access": "private"})], "controlPlane.apiServer.access",
     "only inside its VNet"),
    ("no gpu software", [("inCluster.enabled", False)], "inCluster.enabled", "installs none"),
]


@pytest.mark.parametrize(("edits", "path", "fragment"), [w[1:] for w in WARNINGS], ids=[w[0] for w in WARNINGS])
def test_warnings(edits: list, path: str, fragment: str) -> None:
    spec = base_spec()
    for field, value in edits:
        spec = edit(spec, field, value)
    _, warnings = parse_cluster_spec(spec)
    matching = [issue for issue in warnings if issue.path == path]
    assert matching and fragment in matching[0].rule, [str(w) for w in warnings]


def test_the_defaults_turn_every_part_of_the_layer_on() -> None:
    spec, _ = parse_cluster_spec(base_spec())
    assert spec.in_cluster.enabled and spec.in_cluster.login == "azurecli"
    assert spec.gpu_health.gate.enabled and spec.gpu_health.recheck.enabled and spec.gpu_health.metrics.enabled
    assert spec.gpu_health.gate.image.startswith("nvcr.io/nvidia/cloud-native/dcgm:")
    assert not spec.gang_scheduling.enabled, "Kueue needs teams, so it is opted into"
    managed, _ = parse_cluster_spec(edit(edit(base_spec(), "monitoring.managedPrometheus", True), "gpuHealth", {}))
    assert managed.gpu_health.effective_scraper(True) == "managedPrometheus"


@pytest.mark.parametrize(("schedule", "valid"), [
    ("17 */6 * * *", True), ("0 2 * * mon-fri", True), ("*/15 0-6,22,23 1 jan,jul 0", True), ("@daily", True),
    ("a b c d e", False), ("60 * * * *", False), ("* 24 * * *", False), ("* * 0 * *", False), ("* * * 13 *", False),
    ("*/0 * * * *", False), ("5-1 * * * *", False), ("* * * *", False), ("@sometimes", False),
])
def test_recheck_schedules_are_checked_field_by_field(schedule: str, valid: bool) -> None:
    spec = edit(base_spec(), "gpuHealth.recheck.schedule", schedule)
    if valid:
        parse_cluster_spec(spec)
    else:
        with pytest.raises(SpecError, match="gpuHealth.recheck.schedule"):
            parse_cluster_spec(spec)


def test_mig_pools_with_the_default_dcgm_check_are_warned() -> None:
    _, warnings = parse_cluster_spec(edit(base_spec(), "nodePools.0.gpu", {"migProfile": "MIG3g"}))
    assert any(w.path == "nodePools[0].gpu.migProfile" and "MIG mode" in w.rule for w in warnings)
    custom = edit(edit(base_spec(), "nodePools.0.gpu", {"migProfile": "MIG3g"}), "gpuHealth.gate.command", ["true"])
    assert not any(w.path == "nodePools[0].gpu.migProfile" for w in parse_cluster_spec(custom)[1])
