"""aksgpu's security policies (aksgpu/policy): every rule with a resource set that passes it and one
that breaks it, the catalog held to its checks, waivers, and every preset's plan evaluated."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import date
from typing import Any

import pytest

from aksgpu.plan.policy_results import evaluate_plan
from aksgpu.spec import SpecError, parse_cluster_spec
from aksgpu.policy import checks
from aksgpu.policy.catalog import rule_ids, rules
from aksgpu.policy.checks import PolicyResource
from aksgpu.policy.engine import evaluate
from tests.helpers import base_spec, edit, preset_spec, shared_plan

TODAY = date(2026, 11, 24)
CLUSTER = "azure-native:containerservice:ManagedCluster"
POOL = "azure-native:containerservice:AgentPool"
REGISTRY = "azure-native:containerregistry:Registry"
WORKSPACE = "azure-native:operationalinsights:Workspace"
SETTING = "azure-native:monitor:DiagnosticSetting"
MAINTENANCE = "azure-native:containerservice:MaintenanceConfiguration"


def _pool(**changes: Any) -> dict[str, Any]:
    return {"name": "system", "mode": "System", "vmSize": "Standard_D8ds_v5", "type": "VirtualMachineScaleSets",
            "enableAutoScaling": True, "minCount": 3, "maxCount": 6, "count": 3, "maxPods": 110,
            "availabilityZones": ["1", "2", "3"], "osDiskType": "Ephemeral", "enableEncryptionAtHost": True,
            "securityProfile": {"sshAccess": "Disabled"}, "orchestratorVersion": "1.33",
            "nodeTaints": ["CriticalAddonsOnly=true:NoSchedule"], **changes}


def compliant() -> dict[str, dict[str, Any]]:
    """A cluster, a user pool, a registry, a workspace, their diagnostic settings and maintenance
    windows that break no rule."""
    user_pool = {k: v for k, v in _pool(mode="User", minCount=3).items() if k not in ("name", "nodeTaints")}
    return {
        "cluster": {"resourceName": "gpu", "kubernetesVersion": "1.33", "enableRBAC": True,
                    "aadProfile": {"managed": True, "enableAzureRBAC": True}, "disableLocalAccounts": True,
                    "identity": {"type": "UserAssigned"},
                    "apiServerAccessProfile": {"enablePrivateCluster": True, "disableRunCommand": True},
                    "networkProfile": {"networkPolicy": "cilium", "loadBalancerSku": "standard"},
                    "sku": {"name": "Base", "tier": "Premium"},
                    "autoUpgradeProfile": {"upgradeChannel": "patch", "nodeOSUpgradeChannel": "NodeImage"},
                    "addonProfiles": {"omsagent": {"enabled": True}, "azurepolicy": {"enabled": True},
                                      "azureKeyvaultSecretsProvider": {
                                          "enabled": True, "config": {"enableSecretRotation": "true"}}},
                    "securityProfile": {"defender": {"securityMonitoring": {"enabled": True}},
                                        "imageCleaner": {"enabled": True, "intervalHours": 168},
                                        "azureKeyVaultKms": {"enabled": True, "keyVaultNetworkAccess": "Private"}},
                    "diskEncryptionSetID": "/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/"
                                           "diskEncryptionSets/gpu-disks",
                    "agentPoolProfiles": [_pool()]},
        "pool": {"resourceName": "gpu", "agentPoolName": "gpu1", **user_pool},
        "registry": {"sku": {"name": "Premium"}, "adminUserEnabled": False, "anonymousPullEnabled": False,
                     "publicNetworkAccess": "Disabled", "zoneRedundancy": "Enabled",
                     "policies": {"exportPolicy": {"status": "disabled"},
                                  "retentionPolicy": {"days": 7, "status": "enabled"}}},
        "workspace": {"features": {"disableLocalAuth": True}},
        "subnet": {"subnetName": "nodes", "networkSecurityGroup": {"id": "(known after apply)"},
                   "defaultOutboundAccess": False},
        "vault": {"vaultName": "gpu-kms", "properties": {"enablePurgeProtection": True, "enableSoftDelete": True,
                                                         "networkAcls": {"defaultAction": "Deny"}}},
        "key": {"keyName": "aks-kms", "properties": {"kty": "RSA-HSM", "keySize": 2048}},
        "cluster-logs": {"logs": [{"category": c, "enabled": True} for c in (
            "kube-apiserver", "kube-audit-admin", "kube-controller-manager", "kube-scheduler", "cluster-autoscaler",
            "guard")]},
        "registry-logs": {"logs": [{"category": c, "enabled": True} for c in (
            "ContainerRegistryRepositoryEvents", "ContainerRegistryLoginEvents")]},
        "auto-upgrade": {"resourceName": "gpu", "configName": "aksManagedAutoUpgradeSchedule"},
        "node-os-upgrade": {"resourceName": "gpu", "configName": "aksManagedNodeOSUpgradeSchedule"},
        "workload": {"metadata": {"name": "agent", "namespace": "aksgpu-system"}, "spec": {"template": {"spec": {
            "securityContext": {"runAsNonRoot": True},
            "volumes": [{"name": "scratch", "emptyDir": {}}],
            "initContainers": [{"name": "setup", "image": "example/setup:1", "securityContext": {
                "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": True,
                "runAsUser": 65534}, "resources": {"requests": {"cpu": "10m", "memory": "32Mi"},
                                                   "limits": {"memory": "64Mi"}}}],
            "containers": [{"name": "agent", "image": "example/agent:1", "securityContext": {
                "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
                "readOnlyRootFilesystem": True, "runAsUser": 65534},
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}}}],
        }}}},
    }


TYPES = {"cluster": CLUSTER, "pool": POOL, "registry": REGISTRY, "workspace": WORKSPACE, "cluster-logs": SETTING,
         "registry-logs": SETTING, "auto-upgrade": MAINTENANCE, "node-os-upgrade": MAINTENANCE,
         "workload": "kubernetes:apps/v1:DaemonSet", "subnet": "azure-native:network:Subnet",
         "vault": "azure-native:keyvault:Vault", "key": "azure-native:keyvault:Key"}


def resources(props: dict[str, dict[str, Any]]) -> list[PolicyResource]:
    return [PolicyResource(f"urn:{name}", TYPES[name], name, value) for name, value in props.items()]


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A change at a dotted path of one resource (a value of DROP removes the key)."""
    def change(props: dict[str, Any]) -> None:
        name, *keys = path.split(".")
        node = props[name]
        for key in keys[:-1]:
            node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
        last: Any = int(keys[-1]) if isinstance(node, list) else keys[-1]
        if value is DROP:
            node.pop(last, None)
        else:
            node[last] = value
    return change


DROP = object()


def _drop_resource(name: str) -> Callable[[dict[str, Any]], None]:
    return lambda props: props.pop(name)


# One change per rule that breaks that rule (and only that rule).
BREAKS: dict[str, Callable[[dict[str, Any]], None]] = {
    "aks-rbac": _set("cluster.enableRBAC", False),
    "aks-managed-aad": _set("cluster.aadProfile.managed", False),
    "aks-azure-rbac": _set("cluster.aadProfile.enableAzureRBAC", False),
    "aks-local-accounts": _set("cluster.disableLocalAccounts", False),
    "aks-managed-identity": _set("cluster.identity.type", "None"),
    "aks-api-server-access": _set("cluster.apiServerAccessProfile.enablePrivateCluster", False),
    "aks-network-policy": _set("cluster.networkProfile.networkPolicy", "none"),
    "aks-standard-load-balancer": _set("cluster.networkProfile.loadBalancerSku", "basic"),
    "aks-uptime-sla": _set("cluster.sku.tier", "Free"),
    "aks-auto-upgrade": _set("cluster.autoUpgradeProfile.upgradeChannel", "none"),
    "aks-node-os-upgrade": _set("cluster.autoUpgradeProfile.nodeOSUpgradeChannel", "Unmanaged"),
    "aks-container-insights": _set("cluster.addonProfiles.omsagent.enabled", False),
    "aks-defender": _set("cluster.securityProfile.defender", DROP),
    "aks-azure-policy": _set("cluster.addonProfiles.azurepolicy", DROP),
    "aks-secret-store": _set("cluster.addonProfiles.azureKeyvaultSecretsProvider", DROP),
    # The API takes the string "true"; a boolean is what checkov's ARM check wants, not Azure.
    "aks-secret-rotation": _set("cluster.addonProfiles.azureKeyvaultSecretsProvider.config.enableSecretRotation", True),
    "aks-http-application-routing": _set("cluster.addonProfiles.httpApplicationRouting", {"enabled": True}),
    "aks-kube-dashboard": _set("cluster.addonProfiles.KubeDashboard", {"enabled": True}),
    "aks-image-cleaner": _set("cluster.securityProfile.imageCleaner", DROP),
    "aks-run-command": _set("cluster.apiServerAccessProfile.disableRunCommand", False),
    "aks-pool-version": _set("pool.orchestratorVersion", "1.32"),
    "pool-max-pods": _set("pool.maxPods", 30),
    "pool-encryption-at-host": _set("cluster.agentPoolProfiles.0.enableEncryptionAtHost", False),
    "pool-node-public-ip": _set("pool.enableNodePublicIP", True),
    "pool-ssh": _set("pool.securityProfile.sshAccess", "LocalUser"),
    "pool-scale-set": _set("pool.type", "AvailabilitySet"),
    "pool-ephemeral-os-disk": _set("pool.osDiskType", "Managed"),
    "pool-zones": _set("pool.availabilityZones", []),
    "pool-autoscaling": _set("pool.enableAutoScaling", False),
    "pool-user-min-nodes": _set("pool.minCount", 0),
    "system-min-nodes": _set("cluster.agentPoolProfiles.0.minCount", 2),
    "system-critical-addons-only": _set("cluster.agentPoolProfiles.0.nodeTaints", []),
    "aks-audit-logs": _set("cluster-logs.logs.5.enabled", False),
    "aks-audit-admin": _set("cluster-logs.logs.1.category", "kube-audit"),
    "aks-platform-logs": _set("cluster-logs.logs.4.enabled", False),
    "aks-maintenance-window": _drop_resource("node-os-upgrade"),
    "acr-admin-user": _set("registry.adminUserEnabled", True),
    "acr-anonymous-pull": _set("registry.anonymousPullEnabled", True),
    "acr-public-network": _set("registry.publicNetworkAccess", "Enabled"),
    "acr-export": _set("registry.policies.exportPolicy.status", "enabled"),
    "acr-premium": _set("registry.sku.name", "Standard"),
    "acr-zone-redundancy": _set("registry.zoneRedundancy", "Disabled"),
    "acr-retention": _set("registry.policies.retentionPolicy", DROP),
    "acr-diagnostic-logs": _drop_resource("registry-logs"),
    "log-local-auth": _set("workspace.features", DROP),
    "vnet-subnet-nsg": _set("subnet.networkSecurityGroup", DROP),
    "vnet-private-subnet": _set("subnet.defaultOutboundAccess", True),
    "aks-kms": _set("cluster.securityProfile.azureKeyVaultKms", DROP),
    "aks-disk-encryption-set": _set("cluster.diskEncryptionSetID", DROP),
    "kv-purge-protection": _set("vault.properties.enablePurgeProtection", False),
    "kv-soft-delete": _set("vault.properties.enableSoftDelete", False),
    "kv-firewall": _set("vault.properties.networkAcls.defaultAction", "Allow"),
    "kv-key-hsm": _set("key.properties.kty", "RSA"),
    "k8s-privileged": _set("workload.spec.template.spec.containers.0.securityContext.privileged", True),
    "k8s-privilege-escalation": _set(
        "workload.spec.template.spec.initContainers.0.securityContext.allowPrivilegeEscalation", DROP),
    "k8s-capabilities": _set("workload.spec.template.spec.containers.0.securityContext.capabilities.add",
                             ["SYS_ADMIN"]),
    "k8s-non-root": _set("workload.spec.template.spec.initContainers.0.securityContext.runAsUser", 0),
    "k8s-read-only-root-fs": _set(
        "workload.spec.template.spec.containers.0.securityContext.readOnlyRootFilesystem", False),
    "k8s-resources": _set("workload.spec.template.spec.initContainers.0.resources.limits", {}),
    "k8s-host-path": _set("workload.spec.template.spec.volumes.0", {"name": "dev", "hostPath": {"path": "/dev"}}),
    "k8s-host-namespaces": _set("workload.spec.template.spec.hostPID", True),
}


def _failed_rules(props: dict[str, dict[str, Any]]) -> set[str]:
    return {finding.rule.id for finding in evaluate(resources(props), today=TODAY).findings}


def test_every_rule_of_the_catalog_has_one_check_and_a_case_here() -> None:
    implemented = [*checks.RESOURCE_CHECKS, *checks.POOL_CHECKS, *checks.STACK_CHECKS]
    assert sorted(implemented) == sorted(rule_ids()) and len(implemented) == len(set(implemented))
    assert set(BREAKS) == rule_ids()
    for rule in rules():
        assert rule.severity in {"critical", "high", "medium", "low"} and rule.enforcement in {"mandatory", "advisory"}
        assert rule.reason and rule.fix and rule.sources, rule.id
        stack = "stack" in rule.applies_to
        assert (rule.id in checks.STACK_CHECKS) == stack, f"{rule.id}: appliesTo and its check disagree"
        assert (rule.id in checks.POOL_CHECKS) == ("pools" in rule.applies_to), rule.id


def test_the_compliant_resources_break_no_rule() -> None:
    assert _failed_rules(compliant()) == set()


@pytest.mark.parametrize("rule_id", sorted(BREAKS))
def test_each_rule_fails_on_its_breaking_change_only(rule_id: str) -> None:
    props = copy.deepcopy(compliant())
    BREAKS[rule_id](props)
    assert _failed_rules(props) == {rule_id}


def test_a_finding_names_the_property_the_value_and_the_fix() -> None:
    props = copy.deepcopy(compliant())
    BREAKS["pool-ssh"](props)
    [finding] = evaluate(resources(props), today=TODAY).findings
    assert finding.violation.subject == "gpu1" and finding.violation.path == "securityProfile.sshAccess"
    line = finding.line()
    assert line.startswith("pool-ssh [medium, mandatory] AgentPool gpu1: securityProfile.sshAccess = \"LocalUser\"")
    assert "Fix: " in line
    props = copy.deepcopy(compliant())
    BREAKS["pool-encryption-at-host"](props)
    [finding] = evaluate(resources(props), today=TODAY).findings
    assert finding.violation.path == "agentPoolProfiles[name=system].enableEncryptionAtHost"


class _Waiver:
    def __init__(self, rule: str, resources: list[str], expires: str | None = None) -> None:
        self.rule, self.resources, self.reason, self.expires = rule, resources, "a reason long enough", expires


def test_waivers_match_by_rule_and_subject_and_expire() -> None:
    props = copy.deepcopy(compliant())
    BREAKS["pool-ssh"](props)
    BREAKS["acr-public-network"](props)
    waivers = [_Waiver("pool-ssh", ["gpu*"]), _Waiver("acr-public-network", ["other"]),
               _Waiver("aks-defender", ["*"])]
    report = evaluate(resources(props), waivers, today=TODAY)
    by_rule = {f.rule.id: f for f in report.findings}
    assert by_rule["pool-ssh"].waiver == 0 and by_rule["acr-public-network"].waiver is None
    assert report.failed and [f.rule.id for f in report.failing] == ["acr-public-network"]
    assert report.unused == [1, 2], "a waiver that matches nothing is reported"
    expired = evaluate(resources(props), [_Waiver("pool-ssh", ["*"], expires="2026-11-23")], today=TODAY)
    assert expired.expired == [0] and {f.rule.id for f in expired.failing} == {"pool-ssh", "acr-public-network"}
    assert any("expired on 2026-11-23" in line for line in expired.problems())
    # The last day still holds.
    holding = evaluate(resources(props), [_Waiver("pool-ssh", ["*"], expires="2026-11-24")], today=TODAY)
    assert holding.expired == [] and holding.findings[0].waiver == 0


def test_advisory_findings_are_reported_without_failing() -> None:
    props = copy.deepcopy(compliant())
    BREAKS["pool-zones"](props)
    report = evaluate(resources(props), today=TODAY)
    assert not report.failed and len(report.notes()) == 1 and report.counts()["advisory"] == 1


@pytest.mark.parametrize(("waiver", "path", "rule"), [
    ({"rule": "aks-defendr", "reason": "a reason long enough"}, "policy.waivers[0].rule",
     'did you mean "aks-defender"'),
    ({"rule": "aks-defender", "reason": "todo"}, "policy.waivers[0].reason", "needs a reason"),
    ({"rule": "aks-defender", "reason": "a reason long enough", "expires": "31.12.2026"},
     "policy.waivers[0].expires", "YYYY-MM-DD"),
    ({"rule": "aks-defender", "reason": "a reason long enough", "expires": "2026-02-30"},
     "policy.waivers[0].expires", "YYYY-MM-DD"),
])
def test_bad_waivers_are_spec_errors(waiver: dict[str, Any], path: str, rule: str) -> None:
    with pytest.raises(SpecError) as error:
        parse_cluster_spec(edit(base_spec(), "policy", {"waivers": [waiver]}))
    [issue] = error.value.errors
    assert issue.path == path and rule in f"{issue.rule} {issue.fix}"


def test_a_rule_has_one_waiver() -> None:
    twice = [{"rule": "pool-ssh", "resources": ["a"], "reason": "a reason long enough"},
             {"rule": "pool-ssh", "resources": ["b"], "reason": "a reason long enough"}]
    with pytest.raises(SpecError) as error:
        parse_cluster_spec(edit(base_spec(), "policy", {"waivers": twice}))
    assert [issue.path for issue in error.value.errors] == ["policy.waivers[1].rule"]


@pytest.mark.parametrize("preset", ["dev", "inference", "training", "fleet"])
def test_every_preset_has_no_unwaived_finding_and_every_waiver_is_used(preset: str) -> None:
    spec, _ = parse_cluster_spec(preset_spec(preset))
    report = evaluate_plan(shared_plan(preset_spec(preset)), spec, TODAY)
    assert [f.line() for f in report.findings if f.waiver is None] == []
    assert report.unused == [] and report.expired == []
    waived = {f.rule.id for f in report.findings}
    if preset == "fleet":
        # The production path: only the scale-to-zero GPU pools and their OS disks are waived.
        assert waived == {"pool-user-min-nodes", "pool-ephemeral-os-disk"}
    if preset == "dev":
        assert {"acr-public-network", "aks-api-server-access", "system-min-nodes"} <= waived


def test_the_example_environments_have_no_unwaived_finding(example_plans: dict[str, Any]) -> None:
    from aksgpu.project.stackfile import resolve_stack
    from tests.helpers import EXAMPLE

    for env, plan in example_plans.items():
        spec, _ = parse_cluster_spec(resolve_stack(env, EXAMPLE).cluster)
        report = evaluate_plan(plan, spec, TODAY)
        assert [f.line() for f in report.findings if f.waiver is None] == [], env
    prod, _ = parse_cluster_spec(resolve_stack("prod", EXAMPLE).cluster)
    waived = {f.rule.id for f in evaluate_plan(example_plans["prod"], prod, TODAY).findings}
    assert waived == {"pool-user-min-nodes", "pool-ephemeral-os-disk"}


def test_a_spec_that_relaxes_a_setting_fails_the_policy() -> None:
    spec = edit(edit(base_spec(), "security.defender", False), "nodePools.0.encryptionAtHost", False)
    parsed, _ = parse_cluster_spec(spec)
    report = evaluate_plan(shared_plan(spec), parsed, TODAY)
    failing = {f.rule.id for f in report.failing}
    assert {"aks-defender", "pool-encryption-at-host"} <= failing


def test_the_docs_list_every_policy() -> None:
    from tests.docs_pages import docs_page

    readme = docs_page("guides/security.md")
    for rule in rules():
        assert f"| `{rule.id}` | {rule.severity} | {rule.enforcement} | {rule.title} |" in readme, rule.id


def test_a_workload_may_document_an_exception_on_itself() -> None:
    props = copy.deepcopy(compliant())
    BREAKS["k8s-host-path"](props)
    annotations = props["workload"]["metadata"].setdefault("annotations", {})
    annotations["policy.aksgpu.io/k8s-host-path"] = "too short"
    assert _failed_rules(props) == {"k8s-host-path"}, "a reason under 10 characters documents nothing"
    annotations["policy.aksgpu.io/k8s-host-path"] = "/dev: the agent reads the GPUs' device nodes"
    assert _failed_rules(props) == set()
    annotations.clear()
    annotations["policy.aksgpu.io/k8s-non-root"] = "an exception to another rule excepts nothing here"
    assert _failed_rules(props) == {"k8s-host-path"}


def test_every_exception_of_the_gpu_stack_is_listed_in_the_docs(example_plans: dict[str, Any]) -> None:
    from aksgpu.policy.workload_checks import documented_exceptions
    from tests.docs_pages import docs_page

    readme = docs_page("guides/security.md")
    found = documented_exceptions([PolicyResource(r.urn, r.type, r.name, r.inputs)
                                   for r in example_plans["prod"].resources])
    assert {rule for _, rule, _ in found} == {"k8s-non-root", "k8s-capabilities", "k8s-host-path",
                                               "k8s-read-only-root-fs", "k8s-host-namespaces"}
    for name, rule, reason in found:
        assert f"| `{name}` | `{rule}` | {reason} |" in readme, (name, rule)


def test_validate_and_plan_report_an_unwaived_finding_and_fail(project: Any) -> None:
    from typer.testing import CliRunner

    from aksgpu.cli.app import app

    runner = CliRunner()
    environments = project / "stacks" / "environments.yaml"
    text = environments.read_text()
    # The dev environment drops the dev preset's waiver of its one system node: a mandatory finding.
    anchor = "      policy:\n        waivers:\n"
    assert text.index(anchor) < text.index("  prod:"), "dev's waivers come first"
    environments.write_text(text.replace(anchor, anchor + "          - {rule: system-min-nodes, _remove: true}\n", 1))
    assert runner.invoke(app, ["render", "dev"]).exit_code == 0
    result = runner.invoke(app, ["validate", "dev"])
    assert result.exit_code == 1, result.output
    assert ("error: policy system-min-nodes [medium, mandatory] ManagedCluster system: "
            "agentPoolProfiles[name=system].count = 1: wanted: At least 3 system nodes. Fix: set systemPool.minCount "
            "to 3 or more.") in result.output
    assert "Traceback" not in result.output
    assert runner.invoke(app, ["validate", "dev", "--spec-only"]).exit_code == 0
    plan = runner.invoke(app, ["plan", "dev"])
    assert plan.exit_code == 1 and "security policy finding(s) fail this plan" in plan.output
