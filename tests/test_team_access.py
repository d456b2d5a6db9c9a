"""Entra ID groups and teams inside the cluster: bindings (Kubernetes RBAC) or role assignments
(Azure RBAC), and per team a namespace, quota, default requests and the tolerations of its pools."""

from __future__ import annotations

import pytest
import yaml

from aksgpu.plan.planner import Plan
from aksgpu.spec import SpecError, parse_cluster_spec
from tests.helpers import base_spec, edit, find_object, kubernetes_manifests, shared_plan

ADMIN = "11111111-1111-1111-1111-111111111111"
TEAM_GROUP = "22222222-2222-2222-2222-222222222222"
READER = "33333333-3333-3333-3333-333333333333"
RBAC_READER = "7f6c6a51-bcf8-42ba-9220-52d62157d7db"
RBAC_WRITER = "a7ffa36f-339b-4b5c-8bdf-e2c188b2c0eb"


def team_spec(authorization: str = "kubernetes-rbac") -> dict:
    spec = edit(base_spec(), "access.authorization", authorization)
    spec = edit(spec, "access.readOnlyGroupObjectIds", [READER])
    spec = edit(spec, "access.teams", [{"name": "vision", "groupObjectIds": [TEAM_GROUP],
                                        "quota": {"cpu": "64", "memory": "512Gi"}}])
    spec = edit(spec, "nodePools.0.team", "vision")
    return edit(spec, "nodePools.1", {"name": "shared", "kind": "gpu", "vmSize": "Standard_NC24ads_A100_v4",
                                      "zones": ["1"], "minCount": 0, "maxCount": 2})


def _kinds(plan: Plan) -> set[tuple[str, str]]:
    return {(m["kind"], m["metadata"]["name"]) for m in kubernetes_manifests(plan)}


def test_kubernetes_rbac_binds_admins_readers_and_team_groups() -> None:
    plan = shared_plan(team_spec())
    admins = find_object(plan, "ClusterRoleBinding", "aksgpu-cluster-admins")
    assert admins["roleRef"]["name"] == "cluster-admin"
    assert admins["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": ADMIN}]
    readers = find_object(plan, "ClusterRoleBinding", "aksgpu-read-only")
    assert readers["roleRef"]["name"] == "view" and readers["subjects"][0]["name"] == READER
    edit_binding = find_object(plan, "RoleBinding", "aksgpu-vision-edit")
    assert edit_binding["metadata"]["namespace"] == "vision"
    assert edit_binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"}
    assert edit_binding["subjects"][0]["name"] == TEAM_GROUP


def test_azure_rbac_grants_the_same_through_role_assignments_not_bindings() -> None:
    plan = shared_plan(team_spec("azure-rbac"))
    assert not [m for m in kubernetes_manifests(plan) if m["kind"] == "RoleBinding"
                and m["metadata"].get("namespace") == "vision"], "no Kubernetes binding of the team's groups"
    assert not {("ClusterRoleBinding", "aksgpu-cluster-admins"),
                ("ClusterRoleBinding", "aksgpu-read-only")} & _kinds(plan)
    assignments = plan.by_type("azure-native:authorization:RoleAssignment")

    def assigned(role: str) -> list[dict]:
        return [a.inputs for a in assignments if a.inputs["roleDefinitionId"].endswith(role)]

    [reader] = assigned(RBAC_READER)
    assert reader["principalId"] == READER and reader["principalType"] == "Group"
    [writer] = assigned(RBAC_WRITER)
    assert writer["principalId"] == TEAM_GROUP  # on the team's namespace (scope: the cluster ID + /namespaces/vision)
    # Namespace, quota and defaults exist in both modes.
    assert {("Namespace", "vision"), ("ResourceQuota", "aksgpu-quota"),
            ("LimitRange", "aksgpu-defaults")} <= _kinds(plan)


def test_each_team_gets_a_namespace_with_quota_defaults_and_pod_security() -> None:
    plan = shared_plan(team_spec())
    namespace = find_object(plan, "Namespace", "vision")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
    assert namespace["metadata"]["labels"]["aksgpu.io/team"] == "vision"
    quota = find_object(plan, "ResourceQuota", "aksgpu-quota")
    # Default GPU quota: the team's own pool at full scale (4 nodes x 1 A100); the shared pool is not counted.
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "4", "requests.cpu": "64", "requests.memory": "512Gi"}
    limits = find_object(plan, "LimitRange", "aksgpu-defaults")
    assert limits["spec"]["limits"] == [{"type": "Container", "defaultRequest": {"cpu": "100m", "memory": "256Mi"}}]
    for name in ("aksgpu-quota", "aksgpu-defaults", "aksgpu-team"):
        assert any(m["metadata"].get("namespace") == "vision" and m["metadata"]["name"] == name
                   for m in kubernetes_manifests(plan))
    resources = {r.name: r for r in plan.resources}
    quota_resource = next(r for r in plan.resources if r.type.endswith(":ResourceQuota"))
    namespace_urn = next(r.urn for r in resources.values()
                         if r.type.endswith(":Namespace") and r.name.endswith("vision"))
    assert namespace_urn in quota_resource.dependencies, "namespaced objects wait for their namespace"


def test_a_set_gpu_quota_and_mig_instances_count() -> None:
    spec = edit(team_spec(), "access.teams.0.quota.gpus", 3)
    assert find_object(shared_plan(spec), "ResourceQuota",
                       "aksgpu-quota")["spec"]["hard"]["requests.nvidia.com/gpu"] == "3"
    mig = edit(team_spec(), "nodePools.0.gpu", {"migProfile": "MIG3g"})
    # MIG3g splits each A100 in two instances, each one nvidia.com/gpu: 4 nodes x 1 GPU x 2.
    assert find_object(shared_plan(mig), "ResourceQuota",
                       "aksgpu-quota")["spec"]["hard"]["requests.nvidia.com/gpu"] == "8"


def test_the_team_configmap_carries_the_tolerations_of_its_pools() -> None:
    config = find_object(shared_plan(team_spec()), "ConfigMap", "aksgpu-team")
    document = yaml.safe_load(config["data"]["scheduling.yaml"])
    assert document["pools"] == ["a100"] and document["nodeSelector"] == {"aksgpu.io/team": "vision"}
    assert {"key": "aksgpu.io/team", "operator": "Equal", "value": "vision", "effect": "NoSchedule"} in \
        document["tolerations"]
    assert {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"} in \
        document["tolerations"]


@pytest.mark.parametrize(("path", "value", "message"), [
    ("access.teams.0.name", "kube-system", "namespace would be kube-system, which belongs to Kubernetes"),
    ("access.teams.0.name", "aksgpu-system", "namespace would be aksgpu-system, which belongs to aksgpu"),
    ("access.teams.0.quota.cpu", "lots", "must be a Kubernetes CPU quantity"),
    ("access.teams.0.quota.memory", "8 TB", "must be a Kubernetes memory quantity"),
    ("access.teams.0.quota.gpus", -1, "must be at least 0"),
    ("access.teams.0.podSecurity", "open", "must be one of"),
])
def test_bad_team_settings_are_refused_with_the_field_named(path: str, value: object, message: str) -> None:
    spec = edit(team_spec(), path, value)
    if path.endswith(".name"):
        spec = edit(spec, "nodePools.0.team", value)
    with pytest.raises(SpecError) as error:
        parse_cluster_spec(spec)
    assert message in str(error.value) and path.replace(".0.", "[0].") in str(error.value)


def test_a_team_without_pools_or_quota_is_warned_that_it_gets_no_gpus() -> None:
    spec = edit(base_spec(), "access.teams", [{"name": "data"}])
    _, warnings = parse_cluster_spec(spec)
    [warning] = [w for w in warnings if w.path == "access.teams[0].quota.gpus"]
    assert "defaults to 0" in warning.rule
    _, quiet = parse_cluster_spec(edit(spec, "access.teams.0.quota.gpus", 2))
    assert not [w for w in quiet if w.path.startswith("access.teams")]
