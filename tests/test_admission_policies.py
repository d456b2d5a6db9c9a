"""The two admission policies, evaluated with an independent CEL implementation: teams stay on
their own pools, and the GPU gate changes nothing on a node but what its contract says."""

from __future__ import annotations

import copy
from typing import Any

from aksgpu.components.kubernetes.gpu_gate_access import node_change_policy
from aksgpu.components.kubernetes.team_admission import toleration_policy
from tests.helpers import base_spec, edit, find_object, plan_spec
from tests.oracles.cel import denials
from tests.oracles.kubernetes import validate_object

VISION = {"metadata": {"name": "vision", "labels": {"aksgpu.io/team": "vision"}}}


def _pod(*tolerations: dict[str, str]) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "c", "image": "i"}], "tolerations": list(tolerations)}}


def test_a_team_pod_tolerates_only_its_own_team_taint() -> None:
    policy, _ = toleration_policy()
    gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    own = {"key": "aksgpu.io/team", "operator": "Equal", "value": "vision", "effect": "NoSchedule"}
    other = {"key": "aksgpu.io/team", "operator": "Equal", "value": "research", "effect": "NoSchedule"}
    any_team = {"key": "aksgpu.io/team", "operator": "Exists", "effect": "NoSchedule"}
    everything = {"operator": "Exists"}
    assert denials(policy, obj=_pod(gpu, own), namespace=VISION) == []
    assert denials(policy, obj={"spec": {"containers": []}}, namespace=VISION) == [], "no tolerations at all"
    assert denials(policy, obj=_pod(gpu, other), namespace=VISION) == [
        "pods in namespace vision may tolerate only their own team taint, aksgpu.io/team=vision"]
    assert denials(policy, obj=_pod(any_team), namespace=VISION), "Exists on the team key matches every team"
    assert denials(policy, obj=_pod(everything), namespace=VISION) == [
        "a pod in a team namespace may not tolerate every taint (a toleration without a key)"]
    pinned = _pod(gpu, own)
    pinned["spec"]["nodeName"] = "aks-research-1"
    create = {"operation": "CREATE", "userInfo": {"username": "alice"}}
    assert denials(policy, obj=pinned, namespace=VISION, request=create) == [
        "a pod in a team namespace may not name its node (spec.nodeName skips the scheduler and the team taints)"]
    assert denials(policy, obj=pinned, namespace=VISION, request={**create, "operation": "UPDATE"}) == [], \
        "a scheduled pod carries nodeName on later updates"


def test_a_team_pod_may_not_tolerate_the_system_pool_or_the_gpu_gate() -> None:
    """AKS taints the system pool CriticalAddonsOnly=true:NoSchedule (onlyCriticalAddonsEnabled); the
    gate's startup taint holds a GPU node until its check passes. Neither toleration is a team's to use;
    the spot taint is (a team may run on spot pools)."""
    policy, _ = toleration_policy()
    system_pool = {"key": "CriticalAddonsOnly", "operator": "Exists"}
    gate = {"key": "startup-taint.cluster-autoscaler.kubernetes.io/aksgpu-gpu-check", "operator": "Exists",
            "effect": "NoSchedule"}
    spot = {"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal", "value": "spot",
            "effect": "NoSchedule"}
    create = {"operation": "CREATE", "userInfo": {"username": "alice"}}
    assert any("CriticalAddonsOnly" in denial
               for denial in denials(policy, obj=_pod(system_pool), namespace=VISION, request=create))
    assert any("aksgpu-gpu-check" in denial
               for denial in denials(policy, obj=_pod(gate), namespace=VISION, request=create))
    assert denials(policy, obj=_pod(spot), namespace=VISION, request=create) == []
    update = {**create, "operation": "UPDATE"}
    assert denials(policy, obj=_pod(system_pool), old=_pod(system_pool), namespace=VISION, request=update) == [], \
        "a pod created before the rule may still be updated (its finalizers removed)"
    assert denials(policy, obj=_pod(spot, system_pool), old=_pod(spot), namespace=VISION, request=update), \
        "adding the toleration on an update is refused"


def test_the_team_policy_is_bound_to_team_namespaces_and_validates() -> None:
    plan = plan_spec(edit(base_spec(), "access.teams", [{"name": "vision"}]))
    policy = find_object(plan, "ValidatingAdmissionPolicy", "aksgpu-team-tolerations")
    binding = find_object(plan, "ValidatingAdmissionPolicyBinding", "aksgpu-team-tolerations")
    assert binding["spec"]["matchResources"]["namespaceSelector"] == {
        "matchExpressions": [{"key": "aksgpu.io/team", "operator": "Exists"}]}
    assert binding["spec"]["validationActions"] == ["Deny"] and policy["spec"]["failurePolicy"] == "Fail"
    quota = find_object(plan, "ResourceQuota", "aksgpu-priority-classes")
    assert quota["spec"]["hard"] == {"pods": "0"}
    # Every class but the cluster default (tests/test_tenancy.py evaluates the scope per class).
    assert quota["spec"]["scopeSelector"]["matchExpressions"] == [
        {"scopeName": "PriorityClass", "operator": "NotIn", "values": ["aksgpu-default"]}]
    for obj in (policy, binding, quota):
        assert validate_object(obj, "1.33") == []


GATE_USER = {"userInfo": {"username": "system:serviceaccount:aksgpu-system:aksgpu-gpu-health",
                          "extra": {"authentication.kubernetes.io/node-name": ["aks-h100-1"]}}}
GATE_TAINT = {"key": "startup-taint.cluster-autoscaler.kubernetes.io/aksgpu-gpu-check", "value": "pending",
              "effect": "NoSchedule"}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def _node(labels: dict[str, str], taints: list[dict[str, str]], unschedulable: bool = False) -> dict[str, Any]:
    node: dict[str, Any] = {"metadata": {"name": "aks-h100-1", "labels": {"kubernetes.azure.com/agentpool": "h100",
                                                                          **labels},
                                         "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
                            "spec": {"taints": taints}}
    if unschedulable:
        node["spec"]["unschedulable"] = True
    return node


def test_the_gate_may_make_exactly_its_own_changes() -> None:
    policy, _ = node_change_policy("aksgpu-system")
    fresh = _node({}, [GPU_TAINT])
    pending = _node({"aksgpu.io/gpu-health": "pending", "nvidia.com/gpu.deploy.device-plugin": "false",
                     "nvidia.com/gpu.deploy.dcgm-exporter": "false"},
                    [GPU_TAINT, GATE_TAINT])
    pending["metadata"]["annotations"]["aksgpu.io/gpu-health-pending-since"] = "2026-11-24T12:00:00Z"
    assert denials(policy, obj=pending, old=fresh, request=GATE_USER) == []
    passed = _node({"aksgpu.io/gpu-health": "passed"}, [GPU_TAINT])
    assert denials(policy, obj=passed, old=pending, request=GATE_USER) == []
    failed = _node({"aksgpu.io/gpu-health": "failed", "aksgpu.io/gpu-health-failed-check": "ecc"}, [GPU_TAINT], True)
    assert denials(policy, obj=failed, old=pending, request=GATE_USER) == []


def test_the_gate_may_not_touch_anything_else() -> None:
    policy, _ = node_change_policy("aksgpu-system")
    node = _node({"aksgpu.io/gpu-health": "pending"}, [GPU_TAINT, GATE_TAINT])
    no_gpu_taint = copy.deepcopy(node)
    no_gpu_taint["spec"]["taints"] = [GATE_TAINT]
    assert denials(policy, obj=no_gpu_taint, old=node, request=GATE_USER) == [
        "the GPU gate may change only its own startup taint"]
    relabelled = copy.deepcopy(node)
    relabelled["metadata"]["labels"]["kubernetes.azure.com/agentpool"] = "other"
    assert denials(policy, obj=relabelled, old=node, request=GATE_USER)
    unlabelled = copy.deepcopy(node)
    del unlabelled["metadata"]["labels"]["kubernetes.azure.com/agentpool"]
    assert denials(policy, obj=unlabelled, old=node, request=GATE_USER), "removing a label is a change too"
    cordoned = _node({"aksgpu.io/gpu-health": "failed"}, [GPU_TAINT], True)
    uncordoned = _node({"aksgpu.io/gpu-health": "passed"}, [GPU_TAINT])
    assert denials(policy, obj=uncordoned, old=cordoned, request=GATE_USER) == [
        "the GPU gate may cordon a node, never uncordon one"]
    elsewhere = {"userInfo": {**GATE_USER["userInfo"], "extra": {"authentication.kubernetes.io/node-name": ["aks-x"]}}}
    passed = _node({"aksgpu.io/gpu-health": "passed"}, [GPU_TAINT])
    assert denials(policy, obj=passed, old=node, request=elsewhere) == [
        "the GPU gate may change only the node its pod runs on"]
    someone = {"userInfo": {"username": "alice@example.com"}}
    assert denials(policy, obj=no_gpu_taint, old=node, request=someone) == [], "other users are not matched"
