"""GangScheduling: Kueue, with a ResourceFlavor per GPU pool flavor and a queue per team.

- Kueue (Helm, pinned), its controller on the system pool, with waitForPodsReady and
  blockAdmission: an admitted job whose pods are not all ready in time is evicted and requeued,
  and no other job is admitted meanwhile, so two half-started gangs cannot hold each other's GPUs.
- A ResourceFlavor per GPU pool flavor: VM size (the GPU model), spot or on-demand, owning team,
  and, for InfiniBand sizes, the agent pool (one InfiniBand domain: a gang never spans two). Its
  node labels and tolerations are added to every pod Kueue admits under it.
- Per team a ClusterQueue over the flavors the team may use (its own pools' and the pools no
  team owns), on-demand flavors first and spot after them: Kueue puts a job on spot only beyond
  on-demand quota, because a gang admitted to spot capacity that cannot be had waits for the
  pods-ready timeout. Its GPU quota is the team's; a LocalQueue "gpu" in the team's namespace
  feeds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components import data
from components.kubernetes.objects import (
    AGENT_POOL_LABEL,
    INSTANCE_TYPE_LABEL,
    KUEUE_NAMESPACE,
    SPOT_TAINT,
    metadata,
    system_pool_placement,
    tolerations,
)
from components.spec import ClusterSpec, team_gpu_quota
from components.spec.pools import SPOT_TAINT_KEY, TEAM_KEY
from components.spec.scheduling import GpuFlavor, gpu_flavors

KUEUE_API = "kueue.x-k8s.io/v1beta2"
LOCAL_QUEUE = "gpu"
COVERED_RESOURCES = ["cpu", "memory", "nvidia.com/gpu"]
# The frameworks the Kueue chart enables by default (charts/kueue/values.yaml at v0.19.2).
FRAMEWORKS = ["batch/job", "kubeflow.org/mpijob", "ray.io/rayjob", "ray.io/rayservice", "ray.io/raycluster",
              "jobset.x-k8s.io/jobset", "workload.codeflare.dev/appwrapper", "trainer.kubeflow.org/trainjob",
              "pod", "deployment", "statefulset", "leaderworkerset.x-k8s.io/leaderworkerset"]


@dataclass
class GangSchedulingArgs:
    spec: ClusterSpec
    provider: k8s.Provider
    # Team namespaces (TeamAccess): each LocalQueue waits for its namespace.
    namespaces: dict[str, pulumi.Resource]


def resource_flavor(flavor: GpuFlavor) -> dict[str, Any]:
    node_labels = {INSTANCE_TYPE_LABEL: flavor.vm_size}
    if flavor.spot:
        node_labels[SPOT_TAINT_KEY] = "spot"
    if flavor.team:
        node_labels[TEAM_KEY] = flavor.team
    if flavor.infiniband_pool:
        node_labels[AGENT_POOL_LABEL] = flavor.infiniband_pool
    taints = [taint for pool in flavor.pools for taint in pool.node_taints]
    if flavor.spot:
        taints.append(SPOT_TAINT)
    return {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": metadata(flavor.name),
            "spec": {"nodeLabels": node_labels, "tolerations": tolerations(taints)}}


def team_flavors(spec: ClusterSpec, team: str) -> list[GpuFlavor]:
    usable = [flavor for flavor in gpu_flavors(spec) if flavor.team in (None, team)]
    return sorted(usable, key=lambda flavor: flavor.spot)  # stable: on-demand first, then spot


def cluster_queue(spec: ClusterSpec, team_name: str) -> dict[str, Any]:
    team = next(t for t in spec.access.teams if t.name == team_name)
    gpu_cap = team_gpu_quota(spec, team)
    flavor_quotas = []
    for flavor in team_flavors(spec, team_name):
        capacity = flavor.capacity()
        gpus = min(int(capacity["nvidia.com/gpu"]), gpu_cap)
        flavor_quotas.append({"name": flavor.name, "resources": [
            {"name": "cpu", "nominalQuota": capacity["cpu"]},
            {"name": "memory", "nominalQuota": capacity["memory"]},
            {"name": "nvidia.com/gpu", "nominalQuota": str(gpus)},
        ]})
    return {"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": metadata(team_name),
            "spec": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": team_name}},
                "queueingStrategy": "BestEffortFIFO",
                "preemption": {"withinClusterQueue": "LowerPriority"},
                "resourceGroups": [{"coveredResources": list(COVERED_RESOURCES), "flavors": flavor_quotas}],
            }}


def local_queue(team_name: str) -> dict[str, Any]:
    return {"apiVersion": KUEUE_API, "kind": "LocalQueue", "metadata": metadata(LOCAL_QUEUE, team_name),
            "spec": {"clusterQueue": team_name}}


def kueue_configuration(spec: ClusterSpec) -> dict[str, Any]:
    """The chart's default Configuration (charts/kueue/values.yaml at v0.19.2) with waitForPodsReady."""
    return {
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
            "blockAdmission": True,
            # Requeue an evicted gang with exponential backoff (60 s doubling up to an hour), forever.
            "requeuingStrategy": {"timestamp": "Eviction", "backoffBaseSeconds": 60, "backoffMaxSeconds": 3600},
        },
        "integrations": {"frameworks": list(FRAMEWORKS)},
    }


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
        chart = data.load("in_cluster")["kueue"]
        kueue = k8s.helm.v3.Release(
            f"{name}-kueue", name="kueue", chart=chart["chart"], version=spec.gang_scheduling.kueue_version,
            namespace=KUEUE_NAMESPACE, values=kueue_values(spec),
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[namespace]))
        # Kueue's CRDs come with the chart: its objects wait for the release.
        after_kueue = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[kueue])
        flavor_resources = []
        for flavor in gpu_flavors(spec):
            manifest = resource_flavor(flavor)
            flavor_resources.append(k8s.apiextensions.CustomResource(
                f"{name}-flavor-{flavor.name}", api_version=manifest["apiVersion"], kind=manifest["kind"],
                metadata=manifest["metadata"], spec=manifest["spec"], opts=after_kueue))
        for team in spec.access.teams:
            manifest = cluster_queue(spec, team.name)
            queue = k8s.apiextensions.CustomResource(
                f"{name}-queue-{team.name}", api_version=manifest["apiVersion"], kind=manifest["kind"],
                metadata=manifest["metadata"], spec=manifest["spec"],
                opts=pulumi.ResourceOptions.merge(after_kueue, pulumi.ResourceOptions(depends_on=flavor_resources)))
            local = local_queue(team.name)
            waits: list[pulumi.Resource] = [queue]
            if team.name in args.namespaces:
                waits.append(args.namespaces[team.name])
            k8s.apiextensions.CustomResource(
                f"{name}-local-queue-{team.name}", api_version=local["apiVersion"], kind=local["kind"],
                metadata=local["metadata"], spec=local["spec"],
                opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=waits))
        self.register_outputs({"flavors": [flavor.name for flavor in gpu_flavors(spec)]})
