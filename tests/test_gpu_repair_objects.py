"""What gpuHealth.repair declares: the spec's rules, the loop's Kubernetes objects (least rights,
read-only in dry-run; its program as one folder of sibling files; its admission policy, through an
independent CEL implementation) and, in mode act only, its Azure identity and custom role of exactly
the actions the loop calls. kubernetes-validate --strict and checkov see these objects through the
"repair" variants of tests/test_kubernetes_objects.py and tests/run_checkov_kubernetes.py."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aksgpu.components.kubernetes import gpu_repair
from aksgpu.components.repair_identity import DELETE_ACTIONS, REIMAGE_ACTIONS
from aksgpu.node import node_api, node_repair
from aksgpu.spec import SpecError, parse_cluster_spec
from aksgpu.spec.names import node_resource_group
from tests.helpers import base_spec, edit, kubernetes_manifests, shared_plan
from tests.oracles.cel import denials
from tests.test_gpu_health import merge_patch

ACT = {"enabled": True, "mode": "act"}
USER = f"system:serviceaccount:aksgpu-system:{gpu_repair.REPAIR}"


@pytest.fixture(scope="module")
def plans() -> dict[str, Any]:
    return {mode: shared_plan(edit(base_spec(), "gpuHealth.repair", {"enabled": True, "mode": mode}))
            for mode in ("dry-run", "act")}


def _objects(plan: Any) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in kubernetes_manifests(plan)}


def test_the_spec_rules() -> None:
    spec, _ = parse_cluster_spec(base_spec())
    assert spec.gpu_health.repair.enabled is False and spec.gpu_health.repair.mode == "dry-run"
    with pytest.raises(SpecError) as raised:
        parse_cluster_spec(edit(edit(base_spec(), "gpuHealth.repair", ACT), "access.workloadIdentity", False))
    assert "gpuHealth.repair.mode" in str(raised.value) and "access.workloadIdentity: true" in str(raised.value)
    _, issues = parse_cluster_spec(edit(edit(base_spec(), "gpuHealth.repair", {
        "enabled": True, "diagnosisWindowMinutes": 3000}), "gpuHealth.gate.keepFailedHours", 24))
    assert [i.path for i in issues if i.severity == "warning" and "repair" in i.path] == [
        "gpuHealth.repair.diagnosisWindowMinutes"]
    _, issues = parse_cluster_spec(edit(edit(base_spec(), "gpuHealth.repair", {"enabled": True}),
                                        "gpuHealth.gate.enabled", False))
    assert "gpuHealth.repair.enabled" in [i.path for i in issues]
    with pytest.raises(SpecError):
        parse_cluster_spec(edit(base_spec(), "gpuHealth.repair", {"enabled": True, "drainOnEvents": ["Reboto"]}))


def test_off_by_default_declares_nothing() -> None:
    plan = shared_plan(base_spec())
    assert not [r for r in plan.resources if "repair" in r.name]


def test_dry_run_reads_only_and_has_no_azure_identity(plans: dict[str, Any]) -> None:
    plan = plans["dry-run"]
    objects = _objects(plan)
    verbs = {verb for rule in objects[("ClusterRole", gpu_repair.REPAIR)]["rules"] for verb in rule["verbs"]}
    assert verbs == {"get", "list"}
    assert objects[("Role", gpu_repair.REPAIR)]["rules"][0]["verbs"] == ["get"]
    assert ("Role", f"{gpu_repair.REPAIR}-events") not in objects
    assert ("ValidatingAdmissionPolicy", gpu_repair.NODE_POLICY_NAME) not in objects
    job = objects[("CronJob", gpu_repair.REPAIR)]
    pod = job["spec"]["jobTemplate"]["spec"]["template"]
    assert "--dry-run" in pod["spec"]["containers"][0]["command"]
    assert "--cluster-id" not in pod["spec"]["containers"][0]["command"], "a dry run deletes nothing"
    assert gpu_repair.USE_LABEL not in pod["metadata"]["labels"]
    assert not plan.by_type("azure-native:authorization:RoleDefinition")
    assert "annotations" not in objects[("ServiceAccount", gpu_repair.REPAIR)]["metadata"]


def test_act_has_least_rights_and_its_own_identity_with_exactly_the_actions_it_calls(plans: dict[str, Any]) -> None:
    plan = plans["act"]
    objects = _objects(plan)
    rules = {(tuple(r["apiGroups"]), tuple(r["resources"])): set(r["verbs"])
             for r in objects[("ClusterRole", gpu_repair.REPAIR)]["rules"]}
    assert rules == {(("",), ("nodes",)): {"get", "list", "patch"}, (("",), ("pods",)): {"list"},
                     (("policy",), ("poddisruptionbudgets",)): {"list"}, (("",), ("pods/eviction",)): {"create"}}
    job = objects[("CronJob", gpu_repair.REPAIR)]
    pod = job["spec"]["jobTemplate"]["spec"]["template"]
    container = pod["spec"]["containers"][0]
    assert "--dry-run" not in container["command"] and pod["metadata"]["labels"][gpu_repair.USE_LABEL] == "true"
    assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert "@sha256:" in container["image"], "the pinned helper image of catalog/images.yaml"
    assert pod["spec"]["nodeSelector"] == {"kubernetes.azure.com/mode": "system"}
    assert objects[("ServiceAccount", gpu_repair.REPAIR)]["metadata"]["annotations"][gpu_repair.CLIENT_ID_ANNOTATION]
    egress = objects[("NetworkPolicy", f"{gpu_repair.REPAIR}-egress")]["spec"]
    assert egress["policyTypes"] == ["Ingress", "Egress"] and "ingress" not in egress
    # The reimage on the node resource group (AKS has none of one node); the delete through AKS on
    # the cluster, never Microsoft.Compute's delete in the node resource group (unsupported by AKS).
    subscription = "/subscriptions/00000000-0000-0000-0000-000000000000"
    node_group = f"{subscription}/resourceGroups/{node_resource_group('rg-gpu-test', 'gpu-test')}"
    cluster = f"{subscription}/resourceGroups/rg-gpu-test/providers/Microsoft.ContainerService/managedClusters/gpu-test"
    roles = {role.inputs["scope"]: role for role in plan.by_type("azure-native:authorization:RoleDefinition")}
    assert set(roles) == {node_group, cluster}
    assert roles[node_group].inputs["permissions"] == [{"actions": REIMAGE_ACTIONS, "notActions": []}]
    assert roles[cluster].inputs["permissions"] == [{"actions": DELETE_ACTIONS, "notActions": []}]
    assert DELETE_ACTIONS == ["Microsoft.ContainerService/managedClusters/agentPools/deleteMachines/action"]
    assert not any("delete" in action.lower() for action in REIMAGE_ACTIONS)
    assert all(role.inputs["assignableScopes"] == [scope] for scope, role in roles.items())
    assignments = [a for a in plan.by_type("azure-native:authorization:RoleAssignment") if "repair" in a.name]
    assert sorted(a.inputs["scope"] for a in assignments) == sorted([node_group, cluster])
    command = container["command"]
    assert command[command.index("--cluster-id") + 1] == cluster, "the program deletes through this cluster"
    [federation] = plan.by_type("azure-native:managedidentity:FederatedIdentityCredential")
    assert federation.inputs["subject"] == USER
    assert federation.inputs["audiences"] == ["api://AzureADTokenExchange"]


def test_the_program_runs_from_its_config_map_as_sibling_files(plans: dict[str, Any], tmp_path: Path) -> None:
    program = _objects(plans["act"])[("ConfigMap", gpu_repair.PROGRAM_CONFIG)]
    assert set(program["data"]) == {"node_repair.py", "repair_decision.py", "repair_azure.py", "node_api.py",
                                    "node_verdicts.py"}
    for key, text in program["data"].items():
        (tmp_path / key).write_text(text, encoding="utf-8")
    result = subprocess.run([sys.executable, "-I", str(tmp_path / "node_repair.py"), "--help"], cwd="/",
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "--dry-run" in result.stdout


def _node() -> dict[str, Any]:
    return {"metadata": {"name": "aks-h100-1", "labels": {"kubernetes.azure.com/agentpool": "h100",
                                                          node_api.HEALTH_LABEL: "failed",
                                                          node_api.FAILED_CHECK_LABEL: "dcgm-diag"},
                         "annotations": {node_api.CHECKED_AT_ANNOTATION: "2026-11-27T10:00:00Z",
                                         node_api.KEPT_ANNOTATION: "true",
                                         node_api.SCALE_DOWN_DISABLED_ANNOTATION: "true"}},
            "spec": {"unschedulable": True, "providerID": "azure:///x",
                     "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}}


def test_the_admission_policy_lets_the_loop_make_its_changes_and_no_other() -> None:
    policy = gpu_repair.repair_node_policy("aksgpu-system")[0]
    request = {"userInfo": {"username": USER}}
    old = _node()
    now = node_api._timestamp("2026-11-27T12:00:00Z")
    assert now is not None
    back = node_repair.back_under_gate(old, "reimaged", now)
    assert denials(policy, obj=merge_patch(old, back), old=old, request=request) == []
    marked = merge_patch(old, {"metadata": {"annotations": {node_repair.REPAIR_ANNOTATION: "draining"}}})
    assert denials(policy, obj=marked, old=old, request=request) == []
    relabelled = copy.deepcopy(old)
    relabelled["metadata"]["labels"]["kubernetes.azure.com/agentpool"] = "other"
    assert denials(policy, obj=relabelled, old=old, request=request)
    untainted = copy.deepcopy(old)
    untainted["spec"]["taints"] = []
    assert denials(policy, obj=untainted, old=old, request=request)
    assert denials(policy, obj=relabelled, old=old, request={"userInfo": {"username": "someone"}}) == [], \
        "others' changes are not this policy's"
