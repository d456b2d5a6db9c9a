"""Every Kubernetes object the program declares, checked against references no one here wrote:
kubernetes-validate --strict for built-in kinds, the upstream CRDs for custom resources, the charts'
own values (schema, values.yaml, templates) for Helm releases, Azure's OpenAPI spec for the alert
rule group, a PromQL parser for the rules; and `aksgpu plan --manifests` writing them all out."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import promql_parser
import pytest
import yaml
from typer.testing import CliRunner

from aksgpu.cli.app import app
from aksgpu.environments.presets import preset_names
from aksgpu.plan.manifests import MARKER_FILE
from aksgpu.plan.planner import Plan
from aksgpu.spec import parse_cluster_spec
from tests.helpers import SUBSCRIPTION, base_spec, edit, kubernetes_manifests, preset_spec, shared_plan
from tests.oracles.azure_openapi import AksOpenApi
from tests.oracles.kubernetes import (
    DATA,
    go_json_fields,
    mapping_keys,
    template_value_paths,
    unknown_value_paths,
    validate_object,
)

runner = CliRunner()
# The Kubernetes versions to check a spec against when it leaves the choice to AKS: the minor
# versions AKS supports in late 2026 (the examples pin 1.33).
UNPINNED_VERSIONS = ("1.32", "1.33", "1.34", "1.35")

VARIANTS: dict[str, dict[str, Any]] = {
    "base": base_spec(),
    "kubernetes-rbac teams": edit(edit(base_spec(), "access.teams", [
        {"name": "vision", "groupObjectIds": ["22222222-2222-2222-2222-222222222222"],
         "quota": {"gpus": 4, "cpu": "64", "memory": "512Gi"}, "podSecurity": "restricted"}]),
        "access.readOnlyGroupObjectIds", ["33333333-3333-3333-3333-333333333333"]),
    "bundled prometheus": edit(edit(base_spec(), "gpuHealth.metrics.scraper", "bundled"),
                               "nodePools.1", {"name": "cpu", "vmSize": "Standard_D8ds_v5", "count": 1}),
    "gate and recheck off": edit(base_spec(), "gpuHealth", {"gate": {"enabled": False}, "recheck": {"enabled": False},
                                                            "metrics": {"scraper": "none"}}),
    "operator with balloons and kueue": edit(edit(edit(base_spec(), "nodePools.0", {
        "name": "h100", "kind": "gpu", "vmSize": "Standard_ND96isr_H100_v5", "zones": ["1"], "minCount": 0,
        "maxCount": 4, "gpu": {"driver": "None"}, "team": "research", "balloonNodes": 1}),
        "access.teams", [{"name": "research"}]), "gangScheduling.enabled", True),
    "repair act": edit(base_spec(), "gpuHealth.repair", {"enabled": True, "mode": "act"}),
    "repair dry-run": edit(base_spec(), "gpuHealth.repair", {"enabled": True}),
}


def _version(spec: dict[str, Any]) -> tuple[str, ...]:
    parsed, _ = parse_cluster_spec(spec)
    version = parsed.control_plane.kubernetes_version
    return (".".join(version.split(".")[:2]),) if version else UNPINNED_VERSIONS


@pytest.fixture(scope="module")
def specs_and_plans(example_plans: dict[str, Plan]) -> dict[str, tuple[tuple[str, ...], Plan]]:
    found = {f"variant {name}": (_version(spec), shared_plan(spec)) for name, spec in VARIANTS.items()}
    found |= {f"preset {name}": (UNPINNED_VERSIONS, shared_plan(preset_spec(name))) for name in preset_names()}
    found |= {f"example {name}": (("1.33",), plan) for name, plan in example_plans.items()}
    return found


@pytest.mark.slow
def test_every_kubernetes_object_validates_strictly(specs_and_plans: dict[str, tuple[tuple[str, ...], Plan]]) -> None:
    kinds: set[str] = set()
    checked: set[tuple[str, str]] = set()  # the same object in several plans is checked once per version
    for name, (versions, plan) in specs_and_plans.items():
        for obj in kubernetes_manifests(plan):
            kinds.add(obj["kind"])
            for version in versions:
                key = (json.dumps(obj, sort_keys=True), version)
                if key in checked:
                    continue
                checked.add(key)
                problems = validate_object(obj, version)
                assert not problems, f"{name}: {obj['kind']} {obj['metadata']['name']} on {version}: {problems}"
    # Every kind the layer declares was seen (so the loop above checked something of each).
    assert {"Namespace", "DaemonSet", "Deployment", "CronJob", "ConfigMap", "ServiceAccount", "ClusterRole",
            "ClusterRoleBinding", "RoleBinding", "ResourceQuota", "LimitRange", "PriorityClass", "ResourceFlavor",
            "ClusterQueue", "LocalQueue", "PodMonitor"} <= kinds


def test_the_oracle_rejects_what_the_api_server_would() -> None:
    plan = shared_plan(VARIANTS["operator with balloons and kueue"])
    objects = {(o["kind"], o["metadata"]["name"]): o for o in kubernetes_manifests(plan)}
    daemonset = json.loads(json.dumps(objects[("DaemonSet", "aksgpu-gpu-gate-operator-8gpu")]))
    daemonset["spec"]["template"]["spec"]["tolerations"][0]["opertor"] = "Exists"
    assert validate_object(daemonset, "1.33"), "an unknown field is an error in strict mode"
    flavor = json.loads(json.dumps(next(o for o in objects.values() if o["kind"] == "ResourceFlavor")))
    flavor["spec"]["nodeLables"] = {}
    assert validate_object(flavor, "1.33"), "an unknown CR field is an error too"
    queue = json.loads(json.dumps(objects[("ClusterQueue", "research-8gpu")]))
    queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "lots"
    assert validate_object(queue, "1.33"), "the CRD's patterns apply"


# --- Helm values ----------------------------------------------------------------------------


def _releases(plan: Plan, chart: str) -> list[dict[str, Any]]:
    return [r.inputs for r in plan.by_type("kubernetes:helm.sh/v3:Release") if r.inputs["chart"].endswith(chart)]


def _load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def test_gpu_operator_values_are_keys_the_chart_reads(specs_and_plans: dict[str, tuple[tuple[str, ...], Plan]]) -> None:
    chart_values = _load_yaml(DATA / "gpu-operator" / "values.yaml")
    templates = template_value_paths([p.read_text() for p in (DATA / "gpu-operator" / "templates").glob("*.yaml")])
    nfd_schema = json.loads((DATA / "gpu-operator" / "node-feature-discovery" / "values.schema.json").read_text())
    nfd_values = _load_yaml(DATA / "gpu-operator" / "node-feature-discovery" / "values.yaml")
    seen = 0
    for name, (_, plan) in specs_and_plans.items():
        for release in _releases(plan, "gpu-operator"):
            seen += 1
            values = release["values"]
            assert unknown_value_paths(values, chart_values, templates, skip=("node-feature-discovery",)) == [], name
            nfd = values["node-feature-discovery"]
            jsonschema.validate(nfd, nfd_schema)
            assert unknown_value_paths(nfd, nfd_values, set()) == [], name
            assert release["version"] == "v26.7.0" and release["namespace"] == "gpu-operator"
    assert seen >= 3
    assert unknown_value_paths({"dcgmExporter": {"confg": {"name": "x"}}}, chart_values, templates) == \
        ["dcgmExporter.confg.name"], "the oracle catches a misspelt key"


def test_kueue_values_and_configuration_use_its_own_keys(
        specs_and_plans: dict[str, tuple[tuple[str, ...], Plan]]) -> None:
    chart_values = _load_yaml(DATA / "kueue" / "values.yaml")
    default_config = yaml.safe_load(chart_values["managerConfig"]["controllerManagerConfigYaml"])
    # Kueue's own Configuration fields, plus those its chart's default document uses from
    # Kubernetes' component-base types (leaderElection.leaderElect, resourceName).
    fields = go_json_fields((DATA / "kueue" / "configuration_types.go").read_text()) | mapping_keys(default_config)
    releases = [release for _, plan in specs_and_plans.values() for release in _releases(plan, "kueue")]
    assert releases
    for release in releases:
        assert release["chart"] == "oci://registry.k8s.io/kueue/charts/kueue" and release["version"] == "0.19.2"
        assert unknown_value_paths(release["values"], chart_values, set()) == []
        config = yaml.safe_load(release["values"]["managerConfig"]["controllerManagerConfigYaml"])
        concurrency = config["controller"].pop("groupKindConcurrency")  # keys there are kinds, not fields
        # Keys there are feature names (tests/test_topology.py checks them against kube_features.go).
        assert set(config.pop("featureGates")) and "featureGates" in fields
        # A metav1.LabelSelector (configuration_types.go): its own fields, not the Configuration's.
        selector = config.pop("managedJobsNamespaceSelector")
        assert set(selector) <= {"matchLabels", "matchExpressions"} and "managedJobsNamespaceSelector" in fields
        assert all(set(e) <= {"key", "operator", "values"} for e in selector.get("matchExpressions", []))
        assert set(concurrency) <= set(default_config["controller"]["groupKindConcurrency"])
        unknown = mapping_keys(config) - fields - {"apiVersion", "kind"}
        assert not unknown, f"keys that are no field of Kueue's Configuration: {unknown}"
        assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
        assert config["waitForPodsReady"]["timeout"].endswith("m")
    assert "backoffLimt" in mapping_keys({"backoffLimt": 1}) - fields, "the field list would catch a typo"


def test_bundled_prometheus_values_validate_against_the_charts_schema(
        specs_and_plans: dict[str, tuple[tuple[str, ...], Plan]]) -> None:
    schema = json.loads((DATA / "prometheus-chart" / "values.schema.json").read_text())
    chart_values = _load_yaml(DATA / "prometheus-chart" / "values.yaml")
    _, plan = specs_and_plans["variant bundled prometheus"]
    [release] = _releases(plan, "prometheus")
    assert release["version"] == "29.27.0"
    # "$schema": "http://json-schema.org/schema#" means the latest draft.
    jsonschema.Draft202012Validator(schema).validate(release["values"])
    assert unknown_value_paths(release["values"], chart_values, set()) == []
    [job] = yaml.safe_load(release["values"]["extraScrapeConfigs"])
    assert job["kubernetes_sd_configs"][0]["namespaces"]["names"] == ["aksgpu-system"]
    rules = release["values"]["serverFiles"]["alerting_rules.yml"]["groups"][0]["rules"]
    assert {rule["alert"] for rule in rules} >= {"GpuCriticalXid", "GpuDoubleBitEccErrors"}


# --- alert rules ------------------------------------------------------------------------------

METRICS = {line.split(",")[0].strip() for line in (Path(__file__).resolve().parents[1] / "aksgpu" / "catalog"
                                                  / "dcgm_metrics.csv").read_text().splitlines()
           if line.strip() and not line.startswith("#")}


def _managed_prometheus_plan() -> Plan:
    spec = edit(edit(base_spec(), "monitoring.managedPrometheus", True), "gpuHealth.metrics.scraper",
                "managedPrometheus")
    return shared_plan(edit(spec, "gpuHealth.alerts.actionGroupIds", [
        f"{SUBSCRIPTION}/resourceGroups/r/providers/Microsoft.Insights/actionGroups/gpu-oncall"]))


def test_alert_rules_parse_as_promql_and_use_exported_metrics() -> None:
    [group] = _managed_prometheus_plan().by_type("azure-native:alertsmanagement:PrometheusRuleGroup")
    for rule in group.inputs["rules"]:
        promql_parser.parse(rule["expression"])  # raises on a syntax error
        used = set(re.findall(r"\bDCGM_[A-Z_]+\b", rule["expression"]))
        assert used <= METRICS, f"{rule['alert']} reads metrics the exporter is not told to export"
        # kube-state-metrics series Azure Monitor's minimal ingestion profile keeps (Azure/prometheus-collector
        # tomlparser-default-targets-metrics-keep-list.go@39583fd5): node taints and capacity.
        state = set(re.findall(r"\bkube_[a-z_]+\b", rule["expression"]))
        assert state <= {"kube_node_spec_taint", "kube_node_status_capacity"}, rule["alert"]
        assert used or state or "aksgpu-dcgm-exporter" in rule["expression"], \
            "a rule reads GPU metrics, the exporter's up or a kept kube-state-metrics series"
        assert rule["annotations"]["reason"] and 0 <= rule["severity"] <= 4
    with pytest.raises(ValueError):
        promql_parser.parse("increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[15m] > 0")


def test_the_alert_rule_group_validates_against_azures_openapi_spec() -> None:
    """Azure's spec and the common types it refers to are in tests/data (not ../shared)."""
    spec = AksOpenApi(DATA / "azure-rest-api" / "alertsmanagement" / "resource-manager" / "Microsoft.AlertsManagement"
                      / "PrometheusRuleGroups" / "stable" / "2023-03-01" / "PrometheusRuleGroups.json")
    [group] = _managed_prometheus_plan().by_type("azure-native:alertsmanagement:PrometheusRuleGroup")
    top = frozenset({"location", "tags"})
    assert spec.validate_put("PrometheusRuleGroups_CreateOrUpdate", group.inputs, top) == []
    assert len(group.inputs["rules"]) <= 20, "Azure Monitor takes at most 20 rules per group"
    assert group.inputs["rules"][0]["actions"] == [
        {"actionGroupId": f"{SUBSCRIPTION}/resourceGroups/r/providers/Microsoft.Insights/actionGroups/gpu-oncall"}]
    broken = {**group.inputs, "rules": [{**group.inputs["rules"][0], "severty": 1}]}
    assert spec.validate_put("PrometheusRuleGroups_CreateOrUpdate", broken, top), "the spec catches a typo"


# --- aksgpu plan --manifests -------------------------------------------------------------------


@pytest.mark.slow
def test_plan_writes_manifests_that_kubernetes_validate_accepts(project: Path) -> None:
    result = runner.invoke(app, ["plan", "prod", "--manifests", "out"])
    assert result.exit_code == 0, result.output
    files = sorted(p for p in (project / "out").rglob("*.yaml"))
    assert (project / "out" / MARKER_FILE).is_file()
    builtin = [p for p in files if p.parent.name != "helm" and yaml.safe_load(p.read_text())["apiVersion"] in (
        "v1", "apps/v1", "batch/v1", "rbac.authorization.k8s.io/v1", "scheduling.k8s.io/v1")]
    assert len(builtin) >= 20
    tool = Path(sys.executable).with_name("kubernetes-validate")
    checked = subprocess.run([str(tool), "--strict", "--quiet", "-k", "1.33.0", *map(str, builtin)],
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    gpu_operator = yaml.safe_load((project / "out" / "helm" / "gpu-operator.yaml").read_text())
    assert gpu_operator["chart"] == "gpu-operator" and gpu_operator["values"]["driver"]["enabled"] is True
    # A second run replaces the folder it wrote before.
    assert runner.invoke(app, ["plan", "prod", "--manifests", "out"]).exit_code == 0


def test_plan_refuses_to_write_manifests_over_a_users_files(project: Path) -> None:
    (project / "mine").mkdir()
    (project / "mine" / "notes.txt").write_text("keep me")
    result = runner.invoke(app, ["plan", "dev", "--manifests", "mine"])
    assert result.exit_code == 2 and "not empty" in result.output and "Traceback" not in result.output
    assert (project / "mine" / "notes.txt").read_text() == "keep me"
    (project / "afile").write_text("x")
    assert runner.invoke(app, ["plan", "dev", "--manifests", "afile"]).exit_code == 2


def test_a_second_manifests_run_keeps_files_the_user_added_or_changed(project: Path) -> None:
    assert runner.invoke(app, ["plan", "dev", "--manifests", "out"]).exit_code == 0
    written = sorted(p for p in (project / "out").rglob("*.yaml"))
    (project / "out" / "mine.txt").write_text("my notes")
    result = runner.invoke(app, ["plan", "dev", "--manifests", "out"])
    assert result.exit_code == 2 and "mine.txt" in result.output
    assert (project / "out" / "mine.txt").read_text() == "my notes"
    (project / "out" / "mine.txt").unlink()
    written[0].write_text(written[0].read_text() + "# my edit\n")
    result = runner.invoke(app, ["plan", "dev", "--manifests", "out"])
    assert result.exit_code == 2 and str(written[0].relative_to(project / "out")) in result.output
    assert written[0].read_text().endswith("# my edit\n")
