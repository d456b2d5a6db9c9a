"""GangScheduling: Kueue, with a ResourceFlavor per GPU pool flavor and a queue per team.

- Kueue (Helm, pinned), its controller on the system pool, with waitForPodsReady: an admitted
  job whose pods are not all ready in time is evicted and requeued with backoff, so two
  half-started gangs cannot hold each other's GPUs for good.
- A ResourceFlavor per GPU pool flavor: VM size (the GPU model), spot or on-demand, owning team,
  and, for InfiniBand sizes, the agent pool (one InfiniBand domain: a gang never spans two). Its
  node labels and tolerations are added to every pod Kueue admits under it.
- Per team and node shape (GPUs per node) a ClusterQueue over the flavors of that shape the team
  may use (its own pools' and the pools no team owns), and a LocalQueue "gpu-<n>" in the team's
  namespace that feeds it: Kueue assigns flavors by quota alone, so a queue holds only nodes that
  fit its pods. The team's caps are handed out over its flavors (its own pools first, on-demand
  before spot), so all its queues together admit no more than its ResourceQuota allows; a gang
  goes to spot only beyond on-demand quota, because one admitted to spot capacity that cannot be
  had waits for the pods-ready timeout.
- Every team queue is in one cohort. On a pool no team owns, the teams' nominal quotas together
  are at most what the pool holds (each team's claim scaled down when the claims exceed it); the
  rest of a team's claim is its borrowingLimit, used only while other teams leave their share
  idle, and reclaimed from it when they need it (reclaimWithinCohort: Any).
- Per team a RoleBinding of its groups to Kueue's batch-user role in its namespace, in both
  authorization modes: submit the job kinds Kueue manages, see their Workloads and LocalQueues.
- Topology-aware InfiniBand flavors (gangScheduling.topology): a Kueue Topology of placement group
  (the InfiniBand domain, labelled from IMDS by node_topology.py), NVLink clique on Grace Blackwell
  pools (GPU Feature Discovery's label) and node, named by the flavor's topologyName; Kueue then
  assigns each pod a node inside the domain a gang asks for, and replaces a node that fails (the
  gate cordons it: an untolerated NoSchedule taint) inside it too. The feature gates for that are
  set explicitly.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from aksgpu import catalog
from aksgpu.node.node_topology import PLACEMENT_GROUP_LABEL
from aksgpu.components.kubernetes.objects import (
    AGENT_POOL_LABEL,
    INSTANCE_TYPE_LABEL,
    KUEUE_NAMESPACE,
    metadata,
    system_pool_placement,
    tolerations,
)
from aksgpu.spec import ClusterSpec, Team, team_gpu_quota
from aksgpu.spec.base import quantity
from aksgpu.spec.fabric import fabric_table, infiniband_pools
from aksgpu.spec.pools import SPOT_TAINT_KEY, TEAM_KEY
from aksgpu.spec.scheduling import GpuFlavor, gpu_flavors, nvlink_domains, topology_aware

KUEUE_API = "kueue.x-k8s.io/v1beta2"
KUEUE_RELEASE = "kueue"
LOCAL_QUEUE = "gpu"
# ClusterQueues of one cohort lend each other unused quota of the [flavor, resource] pairs they list
# (the ClusterQueue CRD, spec.cohortName, v0.19.2).
COHORT = "aksgpu"
# The chart's role for batch users: it aggregates the ClusterRoles labelled
# rbac.kueue.x-k8s.io/batch-user (create and manage Jobs, JobSets, MPIJobs, TrainJobs and the other
# integrations' kinds; read Workloads and LocalQueues). Its name is "<fullname>-batch-user-role",
# fullname "kueue" for a release named kueue (charts/kueue/templates/rbac/batch_user_role.yaml and
# _helpers.tpl kueue.fullname at v0.19.2). Kubernetes RBAC decides it under azure-rbac too: AKS
# evaluates both models on one cluster (learn.microsoft.com/azure/aks/concepts-cluster-authorization).
BATCH_USER_ROLE = f"{KUEUE_RELEASE}-batch-user-role"
COVERED_RESOURCES = ["cpu", "memory", "nvidia.com/gpu"]
# The frameworks the Kueue chart enables by default (charts/kueue/values.yaml at v0.19.2).
FRAMEWORKS = ["batch/job", "kubeflow.org/mpijob", "ray.io/rayjob", "ray.io/rayservice", "ray.io/raycluster",
              "jobset.x-k8s.io/jobset", "workload.codeflare.dev/appwrapper", "trainer.kubeflow.org/trainjob",
              "pod", "deployment", "statefulset", "leaderworkerset.x-k8s.io/leaderworkerset"]


# Topology levels, broadest first; Kueue wants kubernetes.io/hostname last, and only there (the
# Topology CRD's rule), and assigns pods to nodes (needed for failed-node replacement) only when the
# lowest level is the node (site/content/en/docs/concepts/topology_aware_scheduling.md, "Hot swap").
# Who writes each label: aksgpu's labeller (node_topology.py), GPU Feature Discovery (NVIDIA
# k8s-device-plugin v0.20.0 internal/lm/imex.go: <clusterUUID>.<cliqueID> of the node's NVLink
# fabric), the kubelet.
HOSTNAME_LABEL = "kubernetes.io/hostname"
CLIQUE_LABEL = "nvidia.com/gpu.clique"
INFINIBAND_TOPOLOGY = "aksgpu-infiniband"
NVLINK_TOPOLOGY = "aksgpu-infiniband-nvlink"
TOPOLOGY_LEVELS = {
    INFINIBAND_TOPOLOGY: (PLACEMENT_GROUP_LABEL, HOSTNAME_LABEL),
    NVLINK_TOPOLOGY: (PLACEMENT_GROUP_LABEL, CLIQUE_LABEL, HOSTNAME_LABEL),
}


@dataclass
class GangSchedulingArgs:
    spec: ClusterSpec
    provider: k8s.Provider
    # Team namespaces (TeamAccess): each LocalQueue waits for its namespace.
    namespaces: dict[str, pulumi.Resource]


def topology_name(spec: ClusterSpec, flavor: GpuFlavor) -> str | None:
    """The Kueue Topology of a topology-aware flavor (None: the flavor is not one)."""
    if not topology_aware(spec, flavor):
        return None
    return NVLINK_TOPOLOGY if nvlink_domains(flavor) else INFINIBAND_TOPOLOGY


def topology(name: str) -> dict[str, Any]:
    """A Kueue Topology (v1beta2): its levels are immutable once created (the CRD's rule)."""
    return {"apiVersion": KUEUE_API, "kind": "Topology", "metadata": metadata(name),
            "spec": {"levels": [{"nodeLabel": label} for label in TOPOLOGY_LEVELS[name]]}}


def topologies(spec: ClusterSpec) -> list[dict[str, Any]]:
    """The Topologies the spec's flavors use."""
    used = {topology_name(spec, flavor) for flavor in gpu_flavors(spec)} - {None}
    return [topology(name) for name in TOPOLOGY_LEVELS if name in used]


def resource_flavor(flavor: GpuFlavor, topology_ref: str | None = None) -> dict[str, Any]:
    node_labels = {INSTANCE_TYPE_LABEL: flavor.vm_size}
    if flavor.spot:
        node_labels[SPOT_TAINT_KEY] = "spot"
    if flavor.team:
        node_labels[TEAM_KEY] = flavor.team
    if flavor.infiniband_pool:
        node_labels[AGENT_POOL_LABEL] = flavor.infiniband_pool
    taints = [taint for pool in flavor.pools for taint in pool.node_taints]  # a spot pool's include the spot taint
    spec: dict[str, Any] = {"nodeLabels": node_labels, "tolerations": tolerations(taints)}
    if topology_ref is not None:
        spec["topologyName"] = topology_ref
    return {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": metadata(flavor.name), "spec": spec}


def team_flavors(spec: ClusterSpec, team: str) -> list[GpuFlavor]:
    """The flavors a team may use, in the order its quota is handed out: its own pools before the
    shared ones, on-demand before spot."""
    usable = [flavor for flavor in gpu_flavors(spec) if flavor.team in (None, team)]
    return sorted(usable, key=lambda flavor: (flavor.team is None, flavor.spot))


def team_claims(spec: ClusterSpec, team: Team) -> dict[str, dict[str, Decimal]]:
    """Flavor name -> what the team may use of it at most (cpu in cores, memory in bytes, nvidia.com/gpu).

    The team's GPU quota is handed out over its flavors in order, each flavor getting at most what
    its pools hold at full scale, so the sum over the team's queues never exceeds what its
    namespace's ResourceQuota allows. Capped CPU and memory follow each flavor's share of the
    GPUs (a flavor with GPUs always gets some), again at most what its pools hold."""
    gpu_cap = Decimal(team_gpu_quota(spec, team))
    caps = {"cpu": quantity(team.quota.cpu) if team.quota.cpu is not None else None,
            "memory": quantity(team.quota.memory) if team.quota.memory is not None else None}
    claims: dict[str, dict[str, Decimal]] = {}
    remaining = gpu_cap
    for flavor in team_flavors(spec, team.name):
        capacity = flavor.capacity()
        gpus = min(capacity["nvidia.com/gpu"], remaining)
        remaining -= gpus
        share: dict[str, Decimal] = {}
        for resource, cap in caps.items():
            if cap is None:
                share[resource] = capacity[resource]
            else:
                proportional = cap * gpus / gpu_cap if gpu_cap else Decimal(0)
                share[resource] = min(capacity[resource], (proportional // STEP[resource]) * STEP[resource])
        share["nvidia.com/gpu"] = gpus
        claims[flavor.name] = {resource: share[resource] for resource in COVERED_RESOURCES}
    return claims


# The unit quotas are rounded to: GPUs, millicores, MiB.
STEP = {"nvidia.com/gpu": Decimal(1), "cpu": Decimal("0.001"), "memory": Decimal(2) ** 20}


@dataclass(frozen=True)
class FlavorQuota:
    """One [flavor, resource] of a team's ClusterQueue."""

    nominal: Decimal
    """Quota the team has whatever the other teams do."""
    borrowing_limit: Decimal
    """What the team may use beyond it, from other teams' unused quota in the cohort."""


def _split(capacity: Decimal, claims: dict[str, Decimal], step: Decimal) -> dict[str, Decimal]:
    """Nominal quotas that add up to at most `capacity`: the claims when they fit, otherwise each
    claim's proportional share, rounded down to `step`, the steps left over going to the largest
    remainders (then in team order). No team gets more than it claims."""
    total = sum(claims.values(), Decimal(0))
    if total <= capacity:
        return dict(claims)
    exact = {team: capacity * claim / total for team, claim in claims.items()}
    nominal = {team: (share // step) * step for team, share in exact.items()}
    left = capacity - sum(nominal.values(), Decimal(0))
    for team in sorted(claims, key=lambda name: nominal[name] - exact[name]):  # stable: team order on ties
        if left < step:
            break
        if nominal[team] + step <= claims[team]:
            nominal[team] += step
            left -= step
    return nominal


def cohort_quotas(spec: ClusterSpec) -> dict[str, dict[str, dict[str, FlavorQuota]]]:
    """Team -> flavor -> resource -> its quota. A flavor of one team gives it its claim; on a flavor
    several teams claim (the pools no team owns), the nominal quotas share what the pools hold and the
    rest of each claim is borrowing, so the cohort never admits more than the pools hold, and no
    team more than its claim."""
    claims = {team.name: team_claims(spec, team) for team in spec.access.teams}
    quotas: dict[str, dict[str, dict[str, FlavorQuota]]] = {team: {} for team in claims}
    for flavor in gpu_flavors(spec):
        users = [team for team in claims if flavor.name in claims[team]]
        capacity = flavor.capacity()
        for resource in COVERED_RESOURCES:
            wanted = {team: claims[team][flavor.name][resource] for team in users}
            nominal = _split(capacity[resource], wanted, STEP[resource])
            for team in users:
                quotas[team].setdefault(flavor.name, {})[resource] = FlavorQuota(nominal[team],
                                                                                 wanted[team] - nominal[team])
    return quotas


def _quantity_text(resource: str, amount: Decimal) -> str:
    if resource == "memory":
        return f"{int(amount // 2**30)}Gi" if amount % 2**30 == 0 else f"{int(amount // 2**20)}Mi"
    if resource == "cpu" and amount != amount.to_integral_value():
        return f"{int(amount * 1000)}m"
    return str(int(amount))


def queue_shapes(spec: ClusterSpec, team: Team) -> dict[int, list[GpuFlavor]]:
    """GPUs per node -> the team's flavors with nodes of that many GPUs (in quota order)."""
    shapes: dict[int, list[GpuFlavor]] = {}
    for flavor in team_flavors(spec, team.name):
        shapes.setdefault(flavor.gpus_per_node, []).append(flavor)
    return dict(sorted(shapes.items()))


def cluster_queue_name(team: str, gpus_per_node: int) -> str:
    return f"{team}-{gpus_per_node}gpu"


def local_queue_name(gpus_per_node: int) -> str:
    return f"{LOCAL_QUEUE}-{gpus_per_node}"


def cluster_queues(spec: ClusterSpec, team: Team,
                   quotas: dict[str, dict[str, dict[str, FlavorQuota]]] | None = None) -> list[dict[str, Any]]:
    """One ClusterQueue per node shape the team may use (GPUs per node): Kueue picks a flavor by
    quota alone, so a queue holds only flavors whose nodes can fit a pod asking for that many. All in
    the cohort; a pending workload within its nominal quota preempts workloads other teams run on
    borrowed quota (reclaimWithinCohort: Any, ClusterQueue CRD v0.19.2), so a team's nominal share of
    a shared pool is its own whatever the others submit."""
    team_quota = (quotas if quotas is not None else cohort_quotas(spec))[team.name]
    queues = []
    for gpus, flavors in queue_shapes(spec, team).items():
        flavor_quotas = [{"name": flavor.name, "resources": [
            {"name": resource,
             "nominalQuota": _quantity_text(resource, team_quota[flavor.name][resource].nominal),
             "borrowingLimit": _quantity_text(resource, team_quota[flavor.name][resource].borrowing_limit)}
            for resource in COVERED_RESOURCES]} for flavor in flavors]
        queues.append({"apiVersion": KUEUE_API, "kind": "ClusterQueue",
                       "metadata": metadata(cluster_queue_name(team.name, gpus)),
                       "spec": {
                           "cohortName": COHORT,
                           "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": team.name}},
                           "queueingStrategy": "BestEffortFIFO",
                           "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"},
                           "resourceGroups": [{"coveredResources": list(COVERED_RESOURCES),
                                               "flavors": flavor_quotas}],
                       }})
    return queues


def local_queues(spec: ClusterSpec, team: Team) -> list[dict[str, Any]]:
    return [{"apiVersion": KUEUE_API, "kind": "LocalQueue", "metadata": metadata(local_queue_name(gpus), team.name),
             "spec": {"clusterQueue": cluster_queue_name(team.name, gpus)}} for gpus in queue_shapes(spec, team)]


def team_queue_binding(team: Team) -> dict[str, Any] | None:
    """The RoleBinding of the team's groups to Kueue's batch-user role in its namespace."""
    if not team.group_object_ids:
        return None
    return {"metadata": metadata(f"aksgpu-{team.name}-batch-user", team.name),
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}
                         for group in team.group_object_ids],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": BATCH_USER_ROLE}}


def kueue_configuration(spec: ClusterSpec) -> dict[str, Any]:
    """The chart's default Configuration (charts/kueue/values.yaml at v0.19.2) with waitForPodsReady."""
    config: dict[str, Any] = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "controller": {"groupKindConcurrency": {
            "Job.batch": 5, "Pod": 5, "Workload.kueue.x-k8s.io": 10, "LocalQueue.kueue.x-k8s.io": 5,
            "ClusterQueue.kueue.x-k8s.io": 5, "ResourceFlavor.kueue.x-k8s.io": 1}},
        "clientConnection": {"qps": 300, "burst": 500},
        # Kueue manages (and its pod webhooks, failurePolicy Fail, see) team namespaces only, so
        # aksgpu's node agents and the GPU Operator never wait on Kueue (chart templates/webhook).
        "managedJobsNamespaceSelector": {"matchExpressions": [{"key": TEAM_KEY, "operator": "Exists"}]},
        "waitForPodsReady": {
            "timeout": f"{spec.gang_scheduling.pods_ready_timeout_minutes}m",
            # Admissions go on while a job starts: blocking them would stall every queue behind
            # one job waiting for cold nodes. The timeout and requeue break partial-gang deadlocks.
            "blockAdmission": False,
            # Requeue an evicted gang with exponential backoff (60 s doubling up to an hour), forever.
            "requeuingStrategy": {"timestamp": "Eviction", "backoffBaseSeconds": 60, "backoffMaxSeconds": 3600},
        },
        "integrations": {"frameworks": list(FRAMEWORKS)},
        # Replace a failed node of a running topology-aware gang inside its domain: the node is
        # deleted, not Ready, or (TASReplaceNodeOnNodeTaints) carries a NoSchedule/NoExecute taint
        # the gang does not tolerate, as the gate's cordon leaves (node.kubernetes.io/unschedulable),
        # once the gang's pods there stopped; evict and requeue when no replacement fits at once.
        # All default to true at v0.19.2; set here so a chart with other defaults keeps them
        # (aksgpu/catalog/topology.yaml, kueueFeatureGates).
        "featureGates": {gate: True for gate in catalog.load("topology")["kueueFeatureGates"]},
    }
    if infiniband_pools(spec):
        # The RDMA device plugin's resource (aksgpu/catalog/fabric.yaml) is per node, not a
        # team's quota: by default Kueue refuses a workload that requests a resource its ClusterQueue
        # does not cover (QuotaCheckBlockUndeclared "except those matching ExcludeResourcePrefixes",
        # apis/config/v1beta2/configuration_types.go at v0.19.2), so a gang asking for it would never start.
        config["resources"] = {"excludeResourcePrefixes": [f'{fabric_table()["rdma"]["resourcePrefix"]}/']}
    return config


def kueue_values(spec: ClusterSpec) -> dict[str, Any]:
    placement = system_pool_placement()
    return {
        "controllerManager": {"nodeSelector": placement["nodeSelector"], "tolerations": placement["tolerations"]},
        "managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(kueue_configuration(spec), sort_keys=False)},
    }


class GangScheduling(pulumi.ComponentResource):
    """Kueue, the GPU ResourceFlavors, a ClusterQueue per team and a LocalQueue in its namespace."""

    def __init__(self, name: str, args: GangSchedulingArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aksgpu:index:GangScheduling", name, None, opts)
        spec = args.spec
        base = pulumi.ResourceOptions(parent=self, provider=args.provider)
        namespace = k8s.core.v1.Namespace(f"{name}-namespace", metadata=metadata(KUEUE_NAMESPACE), opts=base)
        chart = catalog.load("in_cluster")["kueue"]
        kueue = k8s.helm.v3.Release(
            f"{name}-kueue", name=KUEUE_RELEASE, chart=chart["chart"], version=spec.gang_scheduling.kueue_version,
            namespace=KUEUE_NAMESPACE, values=kueue_values(spec),
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[namespace]))
        # Kueue's CRDs come with the chart: its objects wait for the release.
        after_kueue = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[kueue])
        topology_resources: list[pulumi.Resource] = []
        for manifest in topologies(spec):
            # Its levels cannot change in place (the CRD's rule): a new set replaces the object.
            topology_resources.append(k8s.apiextensions.CustomResource(
                f"{name}-topology-{manifest['metadata']['name']}", api_version=manifest["apiVersion"],
                kind=manifest["kind"], metadata=manifest["metadata"], spec=manifest["spec"],
                opts=pulumi.ResourceOptions.merge(after_kueue, pulumi.ResourceOptions(
                    replace_on_changes=["spec"], delete_before_replace=True))))
        flavor_resources = []
        for flavor in gpu_flavors(spec):
            manifest = resource_flavor(flavor, topology_name(spec, flavor))
            flavor_resources.append(k8s.apiextensions.CustomResource(
                f"{name}-flavor-{flavor.name}", api_version=manifest["apiVersion"], kind=manifest["kind"],
                metadata=manifest["metadata"], spec=manifest["spec"],
                opts=pulumi.ResourceOptions.merge(after_kueue, pulumi.ResourceOptions(depends_on=topology_resources))))
        self._acceptance_queues(name, spec, pulumi.ResourceOptions.merge(
            after_kueue, pulumi.ResourceOptions(depends_on=flavor_resources)))
        quotas = cohort_quotas(spec)
        for team in spec.access.teams:
            queues = []
            for manifest in cluster_queues(spec, team, quotas):
                queues.append(k8s.apiextensions.CustomResource(
                    f"{name}-queue-{manifest['metadata']['name']}", api_version=manifest["apiVersion"],
                    kind=manifest["kind"], metadata=manifest["metadata"], spec=manifest["spec"],
                    opts=pulumi.ResourceOptions.merge(after_kueue,
                                                      pulumi.ResourceOptions(depends_on=flavor_resources))))
            waits: list[pulumi.Resource] = [*queues, *([args.namespaces[team.name]] if team.name in args.namespaces
                                                        else [])]
            for local in local_queues(spec, team):
                k8s.apiextensions.CustomResource(
                    f"{name}-local-queue-{team.name}-{local['metadata']['name']}", api_version=local["apiVersion"],
                    kind=local["kind"], metadata=local["metadata"], spec=local["spec"],
                    opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=waits))
            binding = team_queue_binding(team)
            if binding is not None:
                # After the release: the role it names is the chart's.
                k8s.rbac.v1.RoleBinding(
                    f"{name}-{team.name}-batch-user", metadata=binding["metadata"], subjects=binding["subjects"],
                    role_ref=binding["roleRef"],
                    opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[
                        kueue, *([args.namespaces[team.name]] if team.name in args.namespaces else [])]))
        self.register_outputs({"flavors": [flavor.name for flavor in gpu_flavors(spec)]})

    def _acceptance_queues(self, name: str, spec: ClusterSpec, opts: pulumi.ResourceOptions) -> None:
        """The cross-node acceptance's own ClusterQueue and LocalQueue in aksgpu's namespace
        (fabric_acceptance_objects.py), where InfiniBand pools are held for it."""
        from aksgpu.components.kubernetes import fabric_acceptance_objects as acceptance
        from aksgpu.components.kubernetes.gpu_software import device_plugin_targets, operator_targets
        from aksgpu.components.kubernetes.objects import SYSTEM_NAMESPACE

        queue = acceptance.cluster_queue(spec, SYSTEM_NAMESPACE,
                                         [*device_plugin_targets(spec), *operator_targets(spec)])
        if queue is None:
            return
        cluster_queue = k8s.apiextensions.CustomResource(
            f"{name}-acceptance-cluster-queue", api_version=queue["apiVersion"], kind=queue["kind"],
            metadata=queue["metadata"], spec=queue["spec"], opts=opts)
        local = acceptance.local_queue(SYSTEM_NAMESPACE)
        k8s.apiextensions.CustomResource(
            f"{name}-acceptance-local-queue", api_version=local["apiVersion"], kind=local["kind"],
            metadata=local["metadata"], spec=local["spec"],
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[cluster_queue])))
