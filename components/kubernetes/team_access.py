"""TeamAccess: who may do what inside the cluster, and what each team may use.

- Per team (every authorization mode): a namespace named after the team with the team's Pod
  Security level, a ResourceQuota capping requests.nvidia.com/gpu (and CPU and memory when the
  spec caps them), a LimitRange giving containers default requests (so quota counts every pod),
  and a ConfigMap with the tolerations and node selector of the team's pools.
- kubernetes-rbac: ClusterRoleBindings of the admin groups (cluster-admin) and the read-only
  groups (view), and per team a RoleBinding of its groups to edit in its namespace.
- azure-rbac: the same rights are Azure role assignments (components/access.py), so no bindings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components.kubernetes.objects import metadata, pool_targets, pool_tolerations
from components.spec import ClusterSpec, Team, team_gpu_quota

TEAM_LABEL = "aksgpu.io/team"
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
    """Admin and read-only bindings; per team a namespace, its RoleBinding, quota and defaults."""

    namespaces: dict[str, k8s.core.v1.Namespace]

    def __init__(self, name: str, args: TeamAccessArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aksgpu:index:TeamAccess", name, None, opts)
        spec = args.spec
        base = pulumi.ResourceOptions(parent=self, provider=args.provider)
        for binding in cluster_bindings(spec):
            k8s.rbac.v1.ClusterRoleBinding(f"{name}-{binding['metadata']['name']}", metadata=binding["metadata"],
                                           subjects=binding["subjects"], role_ref=binding["roleRef"], opts=base)
        self.namespaces = {}
        for team in spec.access.teams:
            manifest = team_namespace(team)
            namespace = k8s.core.v1.Namespace(f"{name}-{team.name}", metadata=manifest["metadata"], opts=base)
            self.namespaces[team.name] = namespace
            inside = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[namespace])
            quota = team_quota(spec, team)
            k8s.core.v1.ResourceQuota(f"{name}-{team.name}-quota", metadata=quota["metadata"], spec=quota["spec"],
                                      opts=inside)
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
