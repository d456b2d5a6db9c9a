"""Who signs in and what they may do: Entra ID (AAD), Kubernetes or Azure RBAC, teams."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field

from aksgpu import catalog
from aksgpu.spec.base import QUANTITY, Guid, Issue, SpecModel, checked

if TYPE_CHECKING:
    from aksgpu.spec import ClusterSpec

TEAM_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
PRIORITY_CLASS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# The cluster's default PriorityClass (aksgpu/components/kubernetes/headroom.py declares it, globalDefault):
# every team may use it; teams[].priorityClasses grants others.
DEFAULT_PRIORITY_CLASS = "aksgpu-default"
# Kubernetes reserves the system- prefix for its own PriorityClasses (system-cluster-critical,
# system-node-critical), which preempt node agents' peers.
SYSTEM_PRIORITY_PREFIX = "system-"
# Namespaces Kubernetes, AKS and its add-ons, and aksgpu use themselves (a team of that name would
# share them): the table aksgpu/catalog/reserved_namespaces.yaml, each with its owner and source.
TeamName = Annotated[
    str,
    checked(TEAM_NAME.fullmatch, "must be a DNS label: lowercase letters, digits and '-', at most 63",
            'write it like "ml-research"'),
]

CpuQuantity = Annotated[
    str,
    checked(QUANTITY.fullmatch, "must be a Kubernetes CPU quantity", 'write cores like "64" or millicores like "500m"'),
]
MemoryQuantity = Annotated[
    str,
    checked(QUANTITY.fullmatch, "must be a Kubernetes memory quantity", 'write it like "512Gi"'),
]


class Aad(SpecModel):
    """Entra ID (AAD) sign-in, managed by AKS."""

    enabled: bool = True
    """Sign in to the cluster with Entra ID (AKS-managed integration). Needed for azure-rbac and teams; AKS cannot turn it off once on."""
    tenant_id: Guid | None = None
    """Entra tenant that signs users in. None: the tenant of the deployment subscription."""
    admin_group_object_ids: list[Guid] = Field(default_factory=list)
    """Object IDs of the Entra groups that are cluster admins; aksgpu also lets them fetch credentials (and, with azure-rbac, grants them RBAC Cluster Admin)."""


class TeamQuota(SpecModel):
    """What a team's namespace may request in total (a ResourceQuota; Kueue's ClusterQueue too)."""

    gpus: int | None = Field(default=None, ge=0, le=1_000_000)
    """Most nvidia.com/gpu the team's pods may request at once (requests.nvidia.com/gpu; with MIG each instance counts one). None: every GPU of the team's own pools at full scale."""
    cpu: CpuQuantity | None = None
    """Most CPU the team's pods may request at once (requests.cpu), e.g. "512". None: no CPU cap."""
    memory: MemoryQuantity | None = None
    """Most memory the team's pods may request at once (requests.memory), e.g. "4Ti". None: no memory cap."""


class Team(SpecModel):
    """A team: a namespace of its own, its Entra ID groups, a quota, and the pools that carry its taint."""

    name: TeamName
    """Name of the team, a DNS label (lowercase letters, digits and '-', at most 63), unique. It is also the team's namespace, and pools name it in team. Not a namespace Kubernetes, AKS and its add-ons, or aksgpu own (default, kube-*, aks-*, gatekeeper-system, app-routing-system, calico-system, tigera-operator, aksgpu-system, gpu-operator, kueue-system, ...: aksgpu/catalog/reserved_namespaces.yaml, with the source of each)."""
    group_object_ids: list[Guid] = Field(default_factory=list)
    """Object IDs of the team's Entra groups; they may fetch cluster credentials and edit everything in the team's namespace (a RoleBinding to the edit ClusterRole, or RBAC Writer on the namespace with azure-rbac), and with gangScheduling submit Kueue's job kinds and read its Workloads (a RoleBinding to kueue-batch-user-role, in both modes)."""
    quota: TeamQuota = TeamQuota()
    """Caps on what the team's namespace may request at once: GPUs, CPU, memory."""
    pod_security: Literal["privileged", "baseline", "restricted"] = "baseline"
    """Pod Security Standard enforced in the team's namespace. baseline blocks host access and privileged pods; with baseline, a team that may use an InfiniBand pool also gets IPC_LOCK (for RDMA) on pods pinned to that pool and nothing else (aksgpu's admission policy aksgpu-team-baseline-infiniband enforces baseline there). restricted admits no IPC_LOCK. Pods that may run on GPU nodes stay unprivileged and without SYS_ADMIN at every level (aksgpu's admission policy)."""
    priority_classes: list[str] = Field(default_factory=list)
    """PriorityClasses the team's pods may use besides aksgpu-default (the cluster default), e.g. [aksgpu-gpu-job]: a ResourceQuota refuses pods of every other class. A higher class lets the team's pods preempt lower ones, other teams' included, on the pools they share."""


class Access(SpecModel):
    """Sign-in and authorization for the cluster."""

    aad: Aad = Aad()
    """Entra ID (AAD) sign-in."""
    authorization: Literal["kubernetes-rbac", "azure-rbac"] = "kubernetes-rbac"
    """What decides a signed-in user's rights in the cluster: kubernetes-rbac (Kubernetes Roles and RoleBindings) or azure-rbac (Azure role assignments, needs aad.enabled)."""
    local_accounts: bool = False
    """Keep AKS's local accounts (a static admin kubeconfig). false disables them, so aad.enabled must be on or nobody could sign in."""
    oidc_issuer: bool = True
    """Publish an OIDC issuer URL for the cluster's service account tokens; workloadIdentity needs it."""
    workload_identity: bool = True
    """Let pods use Entra Workload ID (federated identity credentials on service accounts); needs oidcIssuer."""
    read_only_group_object_ids: list[Guid] = Field(default_factory=list)
    """Object IDs of Entra groups that may read everything in the cluster but change nothing (the view ClusterRole, or RBAC Reader with azure-rbac)."""
    teams: list[Team] = Field(default_factory=list)
    """Teams: each gets a namespace with a quota and default limits, and its Entra groups may use it; pools that name the team carry its taint. Needs aad.enabled."""


def check_access(spec: ClusterSpec) -> Iterator[Issue]:
    access = spec.access
    if access.authorization == "azure-rbac" and not access.aad.enabled:
        yield Issue("access.authorization", "azure-rbac", "Azure RBAC for Kubernetes needs Entra ID sign-in",
                    "set access.aad.enabled: true, or authorization: kubernetes-rbac")
    if not access.local_accounts and not access.aad.enabled:
        yield Issue("access.localAccounts", False,
                    "with local accounts disabled and Entra ID off, nobody could sign in to the cluster",
                    "set access.aad.enabled: true (recommended), or localAccounts: true")
    if access.workload_identity and not access.oidc_issuer:
        yield Issue("access.workloadIdentity", True, "workload identity needs the OIDC issuer",
                    "set access.oidcIssuer: true")
    if access.aad.enabled and not access.aad.admin_group_object_ids and not access.local_accounts:
        yield Issue("access.aad.adminGroupObjectIds", [],
                    "no Entra ID group is cluster admin, so only Azure-level owners can manage the cluster",
                    "add the object ID of your platform team's group", "warning")
    if access.teams and not access.aad.enabled:
        yield Issue("access.teams", [t.name for t in access.teams], "team access is granted to Entra ID groups",
                    "set access.aad.enabled: true")
    if access.read_only_group_object_ids and not access.aad.enabled:
        yield Issue("access.readOnlyGroupObjectIds", list(access.read_only_group_object_ids),
                    "read-only access is granted to Entra ID groups", "set access.aad.enabled: true")
    names = [team.name for team in access.teams]
    for index, name in enumerate(names):
        if names.index(name) != index:
            yield Issue(f"access.teams[{index}].name", name, "team names must be unique", "merge the two entries")
        yield from _check_reserved_namespace(name, f"access.teams[{index}].name")
    yield from _check_priority_classes(spec)
    yield from _check_gpu_taints(spec)
    yield from _check_infiniband_pod_security(spec)
    for index, team in enumerate(access.teams):
        if team.quota.gpus is None and spec.in_cluster.enabled and not team_gpu_capacity(spec, team.name):
            yield Issue(f"access.teams[{index}].quota.gpus", None,
                        f"team {team.name} owns no GPU pool, so its GPU quota defaults to 0 and its pods cannot "
                        "request GPUs", "set quota.gpus to what it may use of the shared GPU pools, or give it a "
                        "pool (nodePools[].team)", "warning")


def _check_reserved_namespace(name: str, path: str) -> Iterator[Issue]:
    """A team's namespace is none that Kubernetes, AKS, its add-ons or aksgpu own (the table
    reserved_namespaces.yaml, with the source of each row)."""
    table = catalog.load("reserved_namespaces")
    row, what = table["names"].get(name), f"be {name}"
    prefix = next((prefix for prefix in table["prefixes"] if name.startswith(prefix)), None)
    if row is None and prefix is not None:
        row, what = table["prefixes"][prefix], f"start with {prefix}"
    if row is not None:
        yield Issue(path, name, f"the team's namespace would {what}, which belongs to {row['owner']} "
                    f"({row['source']})", f'rename the team, e.g. "team-{name}"')


def _check_priority_classes(spec: ClusterSpec) -> Iterator[Issue]:
    teams = spec.access.teams
    shared = [pool.name for pool in spec.node_pools if pool.team is None]
    if not spec.system_pool.only_critical_addons:
        shared.insert(0, spec.system_pool.name)
    for index, team in enumerate(teams):
        for position, name in enumerate(team.priority_classes):
            path = f"access.teams[{index}].priorityClasses[{position}]"
            if not PRIORITY_CLASS_NAME.fullmatch(name) or len(name) > 253:
                yield Issue(path, name, "a PriorityClass name is a lowercase DNS subdomain",
                            'write it like "aksgpu-gpu-job"')
            elif name.startswith(SYSTEM_PRIORITY_PREFIX):
                yield Issue(path, name, "the system priorities are for the cluster's own agents: a team pod "
                            "there could preempt them", "remove it")
        granted = [name for name in team.priority_classes if name != DEFAULT_PRIORITY_CLASS]
        others = [other.name for other in teams if other.name != team.name]
        if granted and others and shared:
            yield Issue(f"access.teams[{index}].priorityClasses", list(team.priority_classes),
                        f"team {team.name}'s pods at {', '.join(granted)} can preempt lower-priority pods of "
                        f"{', '.join(others)} on the pools no team owns ({', '.join(shared)})",
                        "grant higher classes only to teams that run on pools of their own, or accept that "
                        "they take precedence on the shared ones", "warning")


def _check_gpu_taints(spec: ClusterSpec) -> Iterator[Issue]:
    """aksgpu's admission policy treats a pod as one that may run on GPU nodes when it tolerates the
    nvidia.com/gpu taint; a softer effect would let other pods there too."""
    if not spec.access.teams or not spec.in_cluster.enabled:
        return
    for index, pool in enumerate(spec.node_pools):
        for position, taint in enumerate(pool.taints):
            key, _, effect = taint.partition(":")
            if pool.kind == "gpu" and key.split("=")[0] == "nvidia.com/gpu" and effect == "PreferNoSchedule":
                yield Issue(f"nodePools[{index}].taints[{position}]", taint,
                            "with teams, every GPU pool keeps pods that do not tolerate nvidia.com/gpu off its nodes "
                            "(aksgpu checks the GPU access of pods that tolerate it), and PreferNoSchedule does not",
                            "use effect NoSchedule, or leave the taint out (aksgpu adds "
                            "nvidia.com/gpu=present:NoSchedule)")


def team_gpu_capacity(spec: ClusterSpec, team: str) -> int:
    """nvidia.com/gpu of the team's own pools at full scale (the default of its GPU quota)."""
    return sum((pool.gpus_per_node or 0) * pool.max_nodes * pool.zone_pool_count
               for pool in spec.node_pools if pool.team == team)


def team_gpu_quota(spec: ClusterSpec, team: Team) -> int:
    return team.quota.gpus if team.quota.gpus is not None else team_gpu_capacity(spec, team.name)


def _check_infiniband_pod_security(spec: ClusterSpec) -> Iterator[Issue]:
    """A team at restricted keeps that level on InfiniBand pools (aksgpu's exception is to baseline,
    aksgpu/components/kubernetes/pod_security.py): restricted lets a container add back only
    NET_BIND_SERVICE (Pod Security Standards, "Capabilities"), so not IPC_LOCK."""
    for index, team in enumerate(spec.access.teams):
        if team.pod_security != "restricted":
            continue
        pools = [pool.name for pool in spec.node_pools
                 if pool.size is not None and pool.size.infiniband and pool.team in (None, team.name)]
        if pools:
            yield Issue(f"access.teams[{index}].podSecurity", team.pod_security,
                        f"team {team.name} may use the InfiniBand pools {', '.join(pools)}, but restricted refuses "
                        "IPC_LOCK, which NCCL needs to register its buffers with InfiniBand verbs",
                        "set podSecurity: baseline (aksgpu then allows IPC_LOCK on pods pinned to those pools and "
                        "nothing else beyond baseline), or accept that the team's jobs do not use the fabric",
                        "warning")
