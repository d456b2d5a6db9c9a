"""DraDriver: the NVIDIA DRA driver for GPUs on clusters with Grace Blackwell pools (ND GB200 v6,
ND GB300 v6), for multi-node NVLink through ComputeDomains.

What aksgpu installs, and why (each beside its source):

- The chart `dra-driver-nvidia-gpu` (aksgpu/catalog/in_cluster.yaml draDriver), as NVIDIA
  documents it beside the GPU Operator for ComputeDomains (NVIDIA/cloud-native-docs@66160ebc
  gpu-operator/dra-intro-install.rst, tab "ComputeDomain"): `resources.gpus.enabled=false`, so GPUs
  stay with the GPU Operator's device plugin (`nvidia.com/gpu`, which aksgpu's gate, quotas, queues
  and team policies count) and the driver only hands out IMEX channels; `nvidiaDriverRoot` is where
  the GPU Operator's driver container puts the driver. The chart refuses GPU allocation beside a
  device plugin unless overridden (templates/validation.yaml@v0.4.1), and NVIDIA calls ComputeDomains
  "Officially supported", GPU allocation "not yet" (README.md@v0.4.1).
- The GPU Operator's values stay as they are: NVIDIA's ComputeDomain install keeps its device plugin,
  and the driver manager's eviction label (NODE_LABEL_FOR_GPU_POD_EVICTION) is a workaround for DRA GPU
  allocation only (the same page, "Known Issues"); its GPU Feature Discovery puts the clique label
  (`nvidia.com/gpu.clique`) the ComputeDomains need on each node (docs/prerequisites.md@v0.4.1).
- Its ComputeDomain controller on the critical-system pool; its kubelet plugin only on the Grace
  Blackwell pools (the chart's default affinity would take every node NFD or the GPU Operator marks as
  having an NVIDIA GPU, values.yaml kubeletPlugin.affinity@v0.4.1).
- A ClusterRole aggregated to the built-in `edit` and `admin` roles, so a team that may edit its
  namespace may create ComputeDomains there (the chart's own RBAC covers only its service accounts).

`compute_domain_example` builds the README's example: a ComputeDomain and an Indexed Job whose pods
take a node's GPUs each and claim the domain's IMEX channel, kept inside one NVLink domain.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from aksgpu import catalog
from aksgpu.components.kubernetes.objects import (
    PoolTarget,
    metadata,
    pool_affinity,
    pool_targets,
    pool_tolerations,
    system_pool_placement,
    tolerations,
)
from aksgpu.spec import ClusterSpec
from aksgpu.spec.in_cluster import is_grace_blackwell
from aksgpu.spec.pools import NodePool

DRA_NAMESPACE: str = catalog.load("in_cluster")["draDriver"]["namespace"]
RELEASE_NAME = "dra-driver-nvidia-gpu"
# Where the GPU Operator's driver container installs the driver (dra-intro-install.rst: "With GPU
# Operator-managed drivers (default), drivers are installed to /run/nvidia/driver").
OPERATOR_DRIVER_ROOT = "/run/nvidia/driver"
COMPUTE_DOMAIN_API = "resource.nvidia.com/v1beta1"
# The node label GPU Feature Discovery puts on MNNVL nodes: <cluster UUID>.<clique ID>, one value per
# NVLink domain (docs/install.md@v0.4.1, "Validate clique node labels").
CLIQUE_LABEL = "nvidia.com/gpu.clique"
IMEX_CHANNELS_DIR = "/dev/nvidia-caps-imex-channels"
COMPUTE_DOMAIN_EDITOR = "aksgpu-computedomains-edit"


@dataclass
class DraDriverArgs:
    spec: ClusterSpec
    provider: k8s.Provider
    # The GPU Operator's release: the kubelet plugin waits for its driver (nvidiaDriverRoot).
    gpu_operator: pulumi.Resource | None


def grace_blackwell_targets(spec: ClusterSpec) -> list[PoolTarget]:
    return pool_targets(spec, is_grace_blackwell)


def dra_driver_values(spec: ClusterSpec) -> dict[str, Any]:
    """Values of the dra-driver-nvidia-gpu chart (keys of its values.yaml at v0.4.1)."""
    targets = grace_blackwell_targets(spec)
    placement = system_pool_placement()
    return {
        # ComputeDomains only: GPUs stay with the GPU Operator's device plugin (NVIDIA's ComputeDomain install).
        "resources": {"gpus": {"enabled": False}, "computeDomains": {"enabled": True}},
        "nvidiaDriverRoot": OPERATOR_DRIVER_ROOT,
        "controller": {"nodeSelector": placement["nodeSelector"], "tolerations": placement["tolerations"]},
        "kubeletPlugin": {
            # Replaces the chart's NFD-label affinity (a list inside, so Helm replaces it whole).
            "affinity": pool_affinity(targets),
            # The pools' taints, and the gate's: IMEX channels are ready when the gate admits the node,
            # as the GPU Operator's operands (driver, toolkit) are.
            "tolerations": pool_tolerations(targets, gate=spec.gpu_health.gate.enabled),
        },
    }


def compute_domain_editor_role() -> dict[str, Any]:
    """A ClusterRole the built-in edit and admin roles aggregate: ComputeDomains in a team's namespace."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": metadata(COMPUTE_DOMAIN_EDITOR, extra_labels={
            "rbac.authorization.k8s.io/aggregate-to-edit": "true",
            "rbac.authorization.k8s.io/aggregate-to-admin": "true"}),
        "rules": [{"apiGroups": ["resource.nvidia.com"], "resources": ["computedomains"],
                   "verbs": ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]}],
    }


def compute_domain_example(pool: NodePool, *, nodes: int = 2, name: str = "mnnvl-example") -> list[dict[str, Any]]:
    """A ComputeDomain and an Indexed Job of `nodes` pods on Grace Blackwell pool `pool`: each pod takes
    its node's GPUs (nvidia.com/gpu, the GPU Operator's device plugin) and claims the domain's IMEX
    channel through the ResourceClaimTemplate the ComputeDomain controller creates. numNodes 0 is the
    recommended value while the driver's IMEXDaemonsWithDNSNames gate is on, its default (the CRD's
    description, v0.4.1). The pods share one value of the clique label: one NVLink domain."""
    namespace = pool.team or "default"
    channel = f"{name}-channel"
    size = pool.size
    gpus = (size.gpus if size else 0) or 4
    job_labels = {"app.kubernetes.io/name": name}
    compute_domain = {
        "apiVersion": COMPUTE_DOMAIN_API,
        "kind": "ComputeDomain",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": channel}}},
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(job_labels)},
        "spec": {
            "completionMode": "Indexed",
            "completions": nodes,
            "parallelism": nodes,
            "template": {
                "metadata": {"labels": dict(job_labels)},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {catalog.limit("aksNode")["agentPoolLabel"]: pool.name},
                    "tolerations": tolerations(pool.node_taints),
                    # All pods in one NVLink domain: the first pod picks the clique, the rest follow it.
                    "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": dict(job_labels)}, "topologyKey": CLIQUE_LABEL}]}},
                    "resourceClaims": [{"name": "imex-channel", "resourceClaimTemplateName": channel}],
                    "containers": [{
                        "name": "worker",
                        # NVIDIA's own ComputeDomain check (docs/install.md@v0.4.1): the channel is in
                        # the container. A training image (torchrun, NCCL) goes here in real use.
                        "image": "ubuntu:22.04",
                        "command": ["bash", "-c", f"ls -la {IMEX_CHANNELS_DIR}"],
                        "resources": {"limits": {"nvidia.com/gpu": gpus}, "claims": [{"name": "imex-channel"}]},
                    }],
                },
            },
        },
    }
    return [compute_domain, job]


class DraDriver(pulumi.ComponentResource):
    """The NVIDIA DRA driver (ComputeDomains) for the cluster's Grace Blackwell pools."""

    # A k8s.helm.v3.Release, named by its base class (see GpuSoftware.gpu_operator).
    release: pulumi.CustomResource

    def __init__(self, name: str, args: DraDriverArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aksgpu:index:DraDriver", name, None, opts)
        spec = args.spec
        inside = pulumi.ResourceOptions(parent=self, provider=args.provider)
        namespace = k8s.core.v1.Namespace(
            f"{name}-namespace",
            # The kubelet plugin runs privileged and mounts host paths (templates/kubeletplugin.yaml).
            metadata=metadata(DRA_NAMESPACE, extra_labels={"pod-security.kubernetes.io/enforce": "privileged"}),
            opts=inside)
        role = compute_domain_editor_role()
        k8s.rbac.v1.ClusterRole(f"{name}-computedomains-edit", metadata=role["metadata"], rules=role["rules"],
                                opts=inside)
        chart = catalog.load("in_cluster")["draDriver"]
        after = [namespace, *([args.gpu_operator] if args.gpu_operator is not None else [])]
        self.release = k8s.helm.v3.Release(
            f"{name}-release",
            name=RELEASE_NAME,
            chart=chart["chart"],
            version=spec.gpu_software.dra_driver.chart_version,
            repository_opts={"repo": chart["repository"]},
            namespace=DRA_NAMESPACE,
            values=dra_driver_values(spec),
            # The kubelet plugin starts only once Grace Blackwell nodes join; do not hold `up` for it.
            skip_await=True,
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=after))
        self.register_outputs({})
