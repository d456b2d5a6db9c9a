"""TeamAccess: who may do what inside the cluster, and what each team may use.

- Per team (every authorization mode): a namespace named after the team with the team's Pod
  Security level, a ResourceQuota capping requests.nvidia.com/gpu (and CPU and memory when the
  spec caps them), a ResourceQuota that allows no pod at the system priorities (which would
  preempt node agents), a LimitRange giving containers default requests (so quota counts every
  pod), and a ConfigMap with the tolerations and node selector of the team's pools.
- Isolation (every mode): a ValidatingAdmissionPolicy on pods in team namespaces: a pod may
  tolerate only its own team's taint, no toleration may match every taint, and no pod may be
  created with spec.nodeName, so a team cannot put work on another team's pools.
- kubernetes-rbac: ClusterRoleBindings of the admin groups (cluster-admin) and the read-only
  groups (view), and per team a RoleBinding of its groups to edit in its namespace.
- azure-rbac: the same rights are Azure role assignments (aksgpu/components/access.py), so no bindings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from aksgpu.components.kubernetes.objects import (
    metadata,
    pool_targets,
    pool_tolerations,
)
from aksgpu.components.spec import ClusterSpec, Team, team_gpu_quota
from aksgpu.components.spec.pools import TEAM_KEY as TEAM_LABEL

SYSTEM_PRIORITY_CLASSES = ["system-cluster-critical", "system-node-critical"]
TOLERATION_POLICY = "aksgpu-team-tolerations"
# CEL over the pod and its namespace (admissionregistration.k8s.io/v1, GA in Kubernetes 1.30).
NO_WILDCARD_TOLERATION = "!has(object.spec.tolerations) || object.spec.tolerations.all(t, has(t.key) && t.key != '')"
# A pod created with spec.nodeName skips the scheduler, and the kubelet enforces only NoExecute
# taints: it could land on another team's pool. The scheduler binds through pods/binding, which
# this policy does not see, so scheduled pods are unaffected.
NO_NODE_NAME_ON_CREATE = "request.operation != 'CREATE' || !has(object.spec.nodeName) || object.spec.nodeName == ''"
OWN_TEAM_TOLERATION_ONLY = (
    f"!has(object.spec.tolerations) || object.spec.tolerations.all(t, !has(t.key) || t.key != '{TEAM_LABEL}' || "
    f"(has(t.value) && t.value == namespaceObject.metadata.labels['{TEAM_LABEL}']))")
# Defaults for containers that set no requests: with a quota on CPU or memory, a pod without
# requests would be refused; small defaults keep such pods schedulable and counted.
DEFAULT_REQUESTS = {"cpu": "100m", "memory": "256Mi"}


@dataclass
class TeamAccessArgs:
    spec: ClusterSpec
    provider: k8s.Provider


def _group_subjects(groups: list[str]) -> list[dict[str, str]]:
    return [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group} for group in groups]


def cluster_bindings(spec: ClusterSpec) -> list[dict[str, Any]]:
    """ClusterRoleBindings of the admin and read-only groups (kubernetes-rbac only)."""
    access = spec.access
    if access.authorization != "kubernetes-rbac" or not access.aad.enabled:
        return []
    bindings = []
    for name, role, groups in (("aksgpu-cluster-admins", "cluster-admin", access.aad.admin_group_object_ids),
                               ("aksgpu-read-only", "view", access.read_only_group_object_ids)):
        if groups:
            bindings.append({"metadata": metadata(name), "subjects": _group_subjects(list(groups)),
                             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                         "name": role}})
    return bindings


def team_namespace(team: Team) -> dict[str, Any]:
    return {"metadata": metadata(team.name, extra_labels={
        TEAM_LABEL: team.name,
        "pod-security.kubernetes.io/enforce": team.pod_security,
        "pod-security.kubernetes.io/warn": team.pod_security,
    })}


def team_quota(spec: ClusterSpec, team: Team) -> dict[str, Any]:
    hard = {"requests.nvidia.com/gpu": str(team_gpu_quota(spec, team))}
    if team.quota.cpu is not None:
        hard["requests.cpu"] = team.quota.cpu
    if team.quota.memory is not None:
        hard["requests.memory"] = team.quota.memory
    return {"metadata": metadata("aksgpu-quota", team.name), "spec": {"hard": hard}}


def team_priority_quota(team: Team) -> dict[str, Any]:
    """No pod of the team at the system priorities, which would preempt node agents (Kubernetes
    docs, "Limit Priority Class consumption by default")."""
    return {"metadata": metadata("aksgpu-no-system-priority", team.name),
            "spec": {"hard": {"pods": "0"}, "scopeSelector": {"matchExpressions": [
                {"scopeName": "PriorityClass", "operator": "In", "values": list(SYSTEM_PRIORITY_CLASSES)}]}}}


def toleration_policy() -> tuple[dict[str, Any], dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding to every team namespace."""
    policy = {"metadata": metadata(TOLERATION_POLICY), "spec": {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}]},
        "validations": [
            {"expression": NO_WILDCARD_TOLERATION,
             "message": "a pod in a team namespace may not tolerate every taint (a toleration without a key)"},
            {"expression": NO_NODE_NAME_ON_CREATE,
             "message": "a pod in a team namespace may not name its node (spec.nodeName skips the scheduler and "
                        "the team taints)"},
            {"expression": OWN_TEAM_TOLERATION_ONLY,
             "messageExpression": "'pods in namespace ' + namespaceObject.metadata.name + ' may tolerate only their "
                                  f"own team taint, {TEAM_LABEL}=' + namespaceObject.metadata.labels['{TEAM_LABEL}']"},
        ],
    }}
    binding = {"metadata": metadata(TOLERATION_POLICY), "spec": {
        "policyName": TOLERATION_POLICY,
        "validationActions": ["Deny"],
        "matchResources": {"namespaceSelector": {"matchExpressions": [{"key": TEAM_LABEL, "operator": "Exists"}]}},
    }}
    return policy, binding


def team_limit_range(team: Team) -> dict[str, Any]:
    return {"metadata": metadata("aksgpu-defaults", team.name),
            "spec": {"limits": [{"type": "Container", "defaultRequest": dict(DEFAULT_REQUESTS)}]}}


def team_edit_binding(team: Team) -> dict[str, Any] | None:
    if not team.group_object_ids:
        return None
    return {"metadata": metadata(f"aksgpu-{team.name}-edit", team.name),
            "subjects": _group_subjects(list(team.group_object_ids)),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"}}


def team_scheduling(spec: ClusterSpec, team: Team) -> dict[str, Any]:
    """What a pod needs to land on the team's pools. AKS runs no admission plugin that adds
    tolerations per namespace; Kueue adds them to queued jobs (gangScheduling), other pods carry
    them themselves, and this ConfigMap says what they are."""
    targets = pool_targets(spec, lambda pool: pool.team == team.name)
    pools = sorted({target.pool.name for target in targets})
    document = {
        "pools": pools,
        "nodeSelector": {TEAM_LABEL: team.name} if pools else {},
        "tolerations": pool_tolerations(targets),
    }
    return {"metadata": metadata("aksgpu-team", team.name),
            "data": {"scheduling.yaml": yaml.safe_dump(document, sort_keys=False)}}


class TeamAccess(pulumi.ComponentResource):
    """Admin and read-only bindings; per team a namespace, its RoleBinding, quotas and defaults;
    the admission policy that keeps teams on their own pools."""

    namespaces: dict[str, k8s.core.v1.Namespace]

    def __init__(self, name: str, args: TeamAccessArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aksgpu:index:TeamAccess", name, None, opts)
        spec = args.spec
        base = pulumi.ResourceOptions(parent=self, provider=args.provider)
        for binding in cluster_bindings(spec):
            k8s.rbac.v1.ClusterRoleBinding(f"{name}-{binding['metadata']['name']}", metadata=binding["metadata"],
                                           subjects=binding["subjects"], role_ref=binding["roleRef"], opts=base)
        self.namespaces = {}
        if spec.access.teams:
            policy, policy_binding = toleration_policy()
            admission = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
                f"{name}-toleration-policy", metadata=policy["metadata"], spec=policy["spec"], opts=base)
            k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
                f"{name}-toleration-policy-binding", metadata=policy_binding["metadata"], spec=policy_binding["spec"],
                opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[admission]))
        for team in spec.access.teams:
            manifest = team_namespace(team)
            namespace = k8s.core.v1.Namespace(f"{name}-{team.name}", metadata=manifest["metadata"], opts=base)
            self.namespaces[team.name] = namespace
            inside = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[namespace])
            quota = team_quota(spec, team)
            k8s.core.v1.ResourceQuota(f"{name}-{team.name}-quota", metadata=quota["metadata"], spec=quota["spec"],
                                      opts=inside)
            priority = team_priority_quota(team)
            k8s.core.v1.ResourceQuota(f"{name}-{team.name}-no-system-priority", metadata=priority["metadata"],
                                      spec=priority["spec"], opts=inside)
            limits = team_limit_range(team)
            k8s.core.v1.LimitRange(f"{name}-{team.name}-defaults", metadata=limits["metadata"], spec=limits["spec"],
                                   opts=inside)
            scheduling = team_scheduling(spec, team)
            k8s.core.v1.ConfigMap(f"{name}-{team.name}-scheduling", metadata=scheduling["metadata"],
                                  data=scheduling["data"], opts=inside)
            edit = team_edit_binding(team)
            if edit is not None and spec.access.authorization == "kubernetes-rbac":
                k8s.rbac.v1.RoleBinding(f"{name}-{team.name}-edit", metadata=edit["metadata"],
                                        subjects=edit["subjects"], role_ref=edit["roleRef"], opts=inside)
        self.register_outputs({"teams": sorted(self.namespaces)})
