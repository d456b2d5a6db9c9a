"""Headroom: priority classes, balloons, and the autoscaler's spot-first priority expander.

- PriorityClasses: aksgpu-default (0, the cluster default), aksgpu-gpu-job (1000, for GPU jobs)
  and aksgpu-balloon (-10: the lowest priority whose pending pods still make the cluster
  autoscaler scale up, kubernetes/autoscaler FAQ "How can I configure overprovisioning").
- Balloons (OpenAI's name): per pool with balloonNodes, a Deployment of pause pods, each holding
  a whole node (all its GPUs), so the autoscaler keeps that many nodes up; a real job preempts a
  balloon and starts at once, and the evicted balloon makes the autoscaler add the next node.
  A Deployment, not a DaemonSet, so the autoscaler does not treat the nodes as idle.
- The ConfigMap the priority expander reads (cluster-autoscaler-priority-expander in
  kube-system): spot pools first, on-demand pools behind them, with controlPlane.autoscaler.
  expander: priority. The highest number wins; AKS names a pool's scale set aks-<pool>-<n>-vmss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from aksgpu import catalog
from aksgpu.components.kubernetes.objects import (
    image,
    labels,
    metadata,
    pool_affinity,
    pool_targets,
    pool_tolerations,
    secured_pod,
)
from aksgpu.spec import ClusterSpec, NodePool
from aksgpu.spec.access import DEFAULT_PRIORITY_CLASS

PRIORITY_EXPANDER_CONFIG = "cluster-autoscaler-priority-expander"
SPOT_PRIORITY = 20
ON_DEMAND_PRIORITY = 10
PRIORITY_CLASSES = (
    # name, value, global default, preemption policy, description
    (DEFAULT_PRIORITY_CLASS, 0, True, "PreemptLowerPriority",
     "aksgpu: the priority of every pod that names no class (the Kubernetes default, made explicit)"),
    ("aksgpu-gpu-job", 1000, False, "PreemptLowerPriority",
     "aksgpu: GPU training and serving jobs; they preempt balloons and default-priority pods"),
    ("aksgpu-balloon", catalog.limit("autoscalerExpendablePriorityCutoff"), False, "Never",
     "aksgpu: balloons holding headroom; the lowest priority that still makes the autoscaler scale up"),
)
# A CPU balloon holds most of a node, leaving room for the node's daemons; a GPU balloon holds
# every GPU (the autoscaler measures a GPU node's use by its GPUs) and a little CPU and memory.
CPU_BALLOON_SHARE = 0.75
MEMORY_BALLOON_SHARE = 0.5


@dataclass
class HeadroomArgs:
    spec: ClusterSpec
    provider: k8s.Provider
    system_namespace: str
    namespace_resource: pulumi.Resource


def scale_set_pattern(agent_pool: str) -> str:
    """A regex for the scale set AKS creates for the agent pool (aksgpu/catalog/aks_limits.yaml)."""
    return catalog.limit("aksNode")["scaleSetNamePattern"].replace("{pool}", agent_pool)


def expander_priorities(spec: ClusterSpec) -> dict[int, list[str]]:
    """Priority (higher wins) -> scale-set name patterns of every autoscaled pool."""
    priorities: dict[int, list[str]] = {}
    if spec.system_pool.autoscale:
        priorities.setdefault(ON_DEMAND_PRIORITY, []).append(scale_set_pattern(spec.system_pool.name))
    for pool in spec.node_pools:
        if not pool.autoscale:
            continue
        level = SPOT_PRIORITY if pool.priority == "spot" else ON_DEMAND_PRIORITY
        priorities.setdefault(level, []).extend(scale_set_pattern(zone.name) for zone in pool.agent_pools())
    return dict(sorted(priorities.items(), reverse=True))


def priority_expander_config(spec: ClusterSpec) -> dict[str, Any]:
    return {"metadata": metadata(PRIORITY_EXPANDER_CONFIG, "kube-system"),
            "data": {"priorities": yaml.safe_dump(expander_priorities(spec), sort_keys=False)}}


def balloon_resources(pool: NodePool) -> dict[str, dict[str, str]]:
    size = pool.size
    gpus = pool.gpus_per_node or 0
    # The memory limit equals the request: a pause container uses next to none of it (policy k8s-resources).
    if gpus:
        requests = {"nvidia.com/gpu": str(gpus), "cpu": "1", "memory": "1Gi"}
        return {"requests": requests, "limits": {"nvidia.com/gpu": str(gpus), "memory": "1Gi"}}
    cpu_millis = int((size.vcpus if size else 2) * 1000 * CPU_BALLOON_SHARE)
    memory_mib = int((size.memory_gib if size else 4) * 1024 * MEMORY_BALLOON_SHARE)
    return {"requests": {"cpu": f"{cpu_millis}m", "memory": f"{memory_mib}Mi"}, "limits": {"memory": f"{memory_mib}Mi"}}


def balloon_deployment(spec: ClusterSpec, pool: NodePool, namespace: str) -> dict[str, Any]:
    name = f"aksgpu-balloon-{pool.name}"
    targets = pool_targets(spec, lambda candidate: candidate is pool)
    pod_labels = labels(name)
    return {
        # `pulumi up` does not wait for the balloons to run: their nodes come from the autoscaler
        # and the GPU health gate, minutes after the pool exists (longer than Pulumi's 10-minute
        # Deployment await on a first deploy, when the pool starts at zero).
        "metadata": metadata(name, namespace, annotations={"pulumi.com/skipAwait": "true"}),
        "spec": {
            "replicas": pool.balloon_nodes,
            "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": secured_pod({
                    "priorityClassName": "aksgpu-balloon",
                    "terminationGracePeriodSeconds": 0,
                    "automountServiceAccountToken": False,
                    # No toleration of the GPU gate: balloons hold admitted nodes only.
                    "tolerations": pool_tolerations(targets),
                    "affinity": {
                        **pool_affinity(targets),
                        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                            "labelSelector": {"matchLabels": {"app.kubernetes.io/name": name}},
                            "topologyKey": "kubernetes.io/hostname"}]},
                    },
                    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                                   "whenUnsatisfiable": "ScheduleAnyway",
                                                   "labelSelector": {"matchLabels": {"app.kubernetes.io/name": name}}}],
                    "containers": [{
                        "name": "pause",
                        "image": image("pause"),
                        "resources": balloon_resources(pool),
                        "securityContext": {"runAsNonRoot": True, "runAsUser": 65535, "readOnlyRootFilesystem": True,
                                            "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                    }],
                }),
            },
        },
    }


class Headroom(pulumi.ComponentResource):
    """PriorityClasses, one balloon Deployment per pool with balloonNodes, and the priority
    expander's ConfigMap when the autoscaler uses that expander."""

    def __init__(self, name: str, args: HeadroomArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aksgpu:index:Headroom", name, None, opts)
        spec = args.spec
        base = pulumi.ResourceOptions(parent=self, provider=args.provider)
        classes = [
            k8s.scheduling.v1.PriorityClass(f"{name}-{class_name}", metadata=metadata(class_name), value=value,
                                            global_default=default, preemption_policy=policy,
                                            description=description, opts=base)
            for class_name, value, default, policy, description in PRIORITY_CLASSES
        ]
        for pool in spec.node_pools:
            if pool.balloon_nodes:
                manifest = balloon_deployment(spec, pool, args.system_namespace)
                k8s.apps.v1.Deployment(f"{name}-balloon-{pool.name}", metadata=manifest["metadata"],
                                       spec=manifest["spec"], opts=pulumi.ResourceOptions(
                                           parent=self, provider=args.provider,
                                           depends_on=[args.namespace_resource, *classes]))
        if spec.control_plane.autoscaler.expander == "priority":
            config = priority_expander_config(spec)
            k8s.core.v1.ConfigMap(f"{name}-priority-expander", metadata=config["metadata"], data=config["data"],
                                  opts=base)
        self.register_outputs({})
