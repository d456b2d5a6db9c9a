"""TeamAccess: who may do what inside the cluster, and what each team may use.

- Per team (every authorization mode): a namespace named after the team with the team's Pod
  Security level, a ResourceQuota capping requests.nvidia.com/gpu (and CPU and memory when the
  spec caps them), a ResourceQuota that allows no pod at a priority the team is not granted (the
  system priorities, which would preempt node agents, and aksgpu's classes beyond
  teams[].priorityClasses, which would preempt other teams on shared pools), a LimitRange giving
  containers default requests (so quota counts every pod), and a ConfigMap with the tolerations
  and node selector of the team's pools.
- Isolation (every mode), two ValidatingAdmissionPolicies on pods in team namespaces (built in
  team_admission.py):
  aksgpu-team-tolerations: a pod may tolerate only its own team's taint, never the system pool's
  (CriticalAddonsOnly) or the GPU gate's, no toleration may match every taint, and no pod may be
  created with spec.nodeName, so a team cannot put work on another team's pools.
  aksgpu-team-gpus: a pod that may run on GPU nodes gets GPUs only through nvidia.com/gpu requests,
  never through the NVIDIA runtime's own device selection (gpu_exposure_policy; every path and its
  source in aksgpu/catalog/gpu_visibility.yaml).
  On InfiniBand pools (pod_security.py): the namespaces of baseline teams that may use one are at
  enforce privileged (warn and audit baseline), and aksgpu-team-baseline-infiniband enforces
  baseline there plus IPC_LOCK for pods pinned to the team's InfiniBand pools.
- kubernetes-rbac: ClusterRoleBindings of the admin groups (cluster-admin) and the read-only
  groups (view), and per team a RoleBinding of its groups to edit in its namespace.
- azure-rbac: the same rights are Azure role assignments (aksgpu/components/access.py), so no bindings.
  Kueue's rights (queues, workloads, JobSets and the other job kinds) are a RoleBinding in both
  modes (gang_scheduling.py team_queue_binding).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from aksgpu.components.kubernetes.objects import metadata, pool_targets, pool_tolerations
from aksgpu.components.kubernetes.pod_security import (
    INFINIBAND_BASELINE_POLICY,
    infiniband_baseline_policy,
    infiniband_teams,
    namespace_pod_security_labels,
)
from aksgpu.components.kubernetes.rbac_resources import declare_admission_policy
from aksgpu.components.kubernetes.team_admission import gpu_exposure_policy, team_namespaces_binding, toleration_policy
from aksgpu.spec import ClusterSpec, Team, team_gpu_quota
from aksgpu.spec.access import DEFAULT_PRIORITY_CLASS
from aksgpu.spec.pools import TEAM_KEY as TEAM_LABEL


PRIORITY_QUOTA = "aksgpu-priority-classes"


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


def team_namespace(team: Team, infiniband: bool = False) -> dict[str, Any]:
    """The team's namespace; `infiniband`: the team gets the InfiniBand exception (pod_security.py),
    so Pod Security Admission only warns and audits and aksgpu's policy enforces baseline."""
    return {"metadata": metadata(team.name, extra_labels={
        TEAM_LABEL: team.name, **namespace_pod_security_labels(team, infiniband)})}


def team_quota(spec: ClusterSpec, team: Team) -> dict[str, Any]:
    hard = {"requests.nvidia.com/gpu": str(team_gpu_quota(spec, team))}
    if team.quota.cpu is not None:
        hard["requests.cpu"] = team.quota.cpu
    if team.quota.memory is not None:
        hard["requests.memory"] = team.quota.memory
    return {"metadata": metadata("aksgpu-quota", team.name), "spec": {"hard": hard}}


def team_priority_classes(team: Team) -> list[str]:
    """The PriorityClasses the team's pods may use: the cluster default and those it is granted."""
    return [DEFAULT_PRIORITY_CLASS, *[name for name in team.priority_classes if name != DEFAULT_PRIORITY_CLASS]]


def team_priority_quota(team: Team) -> dict[str, Any]:
    """No pod of the team at any other priority: the system ones would preempt node agents, aksgpu's
    higher ones other teams' pods on the pools they share (Kubernetes docs, "Limit Priority Class
    consumption by default": a quota of pods 0 scoped to those classes). NotIn also catches classes
    added later. The Priority admission plugin names the global default class (aksgpu-default) on
    a pod that names none before quota is checked (plugin/pkg/admission/priority/admission.go
    admitPod), and the quota evaluator matches the PriorityClass scope with a label selector over
    spec.priorityClassName (pkg/quota/v1/evaluator/core/pods.go podMatchesSelector)."""
    return {"metadata": metadata(PRIORITY_QUOTA, team.name),
            "spec": {"hard": {"pods": "0"}, "scopeSelector": {"matchExpressions": [
                {"scopeName": "PriorityClass", "operator": "NotIn", "values": team_priority_classes(team)}]}}}


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
            for label, policy in (("toleration-policy", toleration_policy()), ("gpu-policy", gpu_exposure_policy())):
                declare_admission_policy(f"{name}-{label}", policy, base)
        # Teams that may use InfiniBand pools: baseline is enforced by aksgpu's policy, not by Pod Security
        # Admission, so their namespaces wait for the policy's binding (no window without either).
        infiniband = infiniband_teams(spec)
        baseline = infiniband_baseline(spec)
        baseline_binding: list[pulumi.Resource] = []
        if baseline is not None:
            baseline_binding.append(declare_admission_policy(f"{name}-infiniband-baseline-policy", baseline, base))
        for team in spec.access.teams:
            manifest = team_namespace(team, team.name in infiniband)
            namespace = k8s.core.v1.Namespace(
                f"{name}-{team.name}", metadata=manifest["metadata"],
                opts=pulumi.ResourceOptions(parent=self, provider=args.provider,
                                            depends_on=baseline_binding if team.name in infiniband else []))
            self.namespaces[team.name] = namespace
            inside = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[namespace])
            quota = team_quota(spec, team)
            k8s.core.v1.ResourceQuota(f"{name}-{team.name}-quota", metadata=quota["metadata"], spec=quota["spec"],
                                      opts=inside)
            priority = team_priority_quota(team)
            k8s.core.v1.ResourceQuota(f"{name}-{team.name}-priority-classes", metadata=priority["metadata"],
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


def infiniband_baseline(spec: ClusterSpec) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The policy that enforces baseline plus IPC_LOCK on InfiniBand pools (pod_security.py) and its
    binding to the namespaces of the teams that get it; None when no team does."""
    teams = infiniband_teams(spec)
    if not teams:
        return None
    return infiniband_baseline_policy(teams), team_namespaces_binding(INFINIBAND_BASELINE_POLICY, list(teams))
