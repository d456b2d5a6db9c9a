"""GpuSoftware: what makes each GPU pool's GPUs schedulable, chosen by the pool's driver mode.

- gpu.driver Install (AKS installs the NVIDIA driver and container runtime): aksgpu's NVIDIA
  device plugin DaemonSet, on exactly those pools.
- gpu.driver None (nothing installed): the NVIDIA GPU Operator (Helm), with its node feature
  discovery worker on exactly those pools, so its operands (driver, toolkit, device plugin,
  DCGM exporter) land nowhere else.

So every GPU pool has exactly one component advertising nvidia.com/gpu, and none lands on the
system pool or a CPU pool (node affinity on the agent pool's name label).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from aksgpu import catalog
from aksgpu.components.kubernetes.objects import (
    AGENT_POOL_LABEL,
    GPU_OPERATOR_NAMESPACE,
    PoolTarget,
    advertised_by_gate,
    daemonset,
    driver_mode,
    image,
    metadata,
    pool_affinity,
    pool_targets,
    pool_tolerations,
    system_pool_placement,
)
from aksgpu.spec import ClusterSpec

DEVICE_PLUGIN = "nvidia-device-plugin"
DCGM_METRICS_CONFIG = "aksgpu-dcgm-metrics"  # the ConfigMap the operator's exporter reads


@dataclass
class GpuSoftwareArgs:
    spec: ClusterSpec
    provider: k8s.Provider
    system_namespace: str
    # The resource that creates system_namespace: namespaced objects wait for it.
    namespace_resource: pulumi.Resource


def device_plugin_targets(spec: ClusterSpec) -> list[PoolTarget]:
    return pool_targets(spec, lambda pool: pool.gpu_vendor == "nvidia" and driver_mode(pool) == "Install")


def operator_targets(spec: ClusterSpec) -> list[PoolTarget]:
    return pool_targets(spec, lambda pool: pool.gpu_vendor == "nvidia" and driver_mode(pool) == "None")


# Why the device plugin is excepted from workload policies (policy.aksgpu.io/<rule> annotations).
DEVICE_PLUGIN_EXCEPTIONS = {
    "k8s-host-path": "/var/lib/kubelet/device-plugins: the kubelet's device plugin directory, where the plugin "
                     "registers its socket.",
    "k8s-non-root": "The plugin creates its socket in the kubelet's root-owned device plugin directory, as "
                    "NVIDIA's manifest runs it.",
    "k8s-read-only-root-fs": "NVIDIA's static manifest (v0.20.0) does not set a read-only root filesystem; not "
                             "verified here that the plugin runs with one.",
}


def device_plugin_daemonset(spec: ClusterSpec, namespace: str) -> dict[str, Any]:
    """The device plugin for driver Install pools, as NVIDIA's static manifest (v0.20.0) runs it,
    placed on those pools only. With the node gate on, it runs only on nodes the gate has passed
    (or that predate the gate), so no GPU is advertised on a node nobody has checked."""
    targets = device_plugin_targets(spec)
    gate = spec.gpu_health.gate.enabled
    extra = [advertised_by_gate()] if gate else []
    mig = any(target.pool.gpu_settings and target.pool.gpu_settings.mig_profile for target in targets)
    return daemonset(DEVICE_PLUGIN, namespace, {
        "affinity": pool_affinity(targets, *extra),
        "tolerations": pool_tolerations(targets, gate=gate),
        "priorityClassName": "system-node-critical",
        "automountServiceAccountToken": False,
        "containers": [{
            "name": DEVICE_PLUGIN,
            "image": image("devicePlugin", spec.gpu_software.device_plugin.version),
            # single: each MIG instance is one nvidia.com/gpu (AKS partitions the GPUs of a pool
            # with gpu.migProfile); on GPUs without MIG it is the same as none.
            "env": [{"name": "MIG_STRATEGY", "value": "single" if mig else "none"}],
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "256Mi"}},
            "volumeMounts": [{"name": "device-plugins", "mountPath": "/var/lib/kubelet/device-plugins"}],
        }],
        "volumes": [{"name": "device-plugins",
                     "hostPath": {"path": "/var/lib/kubelet/device-plugins", "type": "Directory"}}],
    }, exceptions=DEVICE_PLUGIN_EXCEPTIONS)


def gpu_operator_values(spec: ClusterSpec) -> dict[str, Any]:
    """Values of the gpu-operator chart for the driver None pools (keys of its values.yaml at v26.7.0)."""
    targets = operator_targets(spec)
    operands = pool_tolerations(targets, gate=spec.gpu_health.gate.enabled)
    placement = system_pool_placement()
    metrics = spec.gpu_health.metrics
    values: dict[str, Any] = {
        "operator": {"nodeSelector": placement["nodeSelector"], "tolerations": placement["tolerations"]},
        # The operands (driver, toolkit, device plugin, exporter, validator) tolerate the pools'
        # taints; where they run follows the labels node feature discovery puts on GPU nodes.
        "daemonsets": {"tolerations": operands, "priorityClassName": "system-node-critical"},
        "node-feature-discovery": {
            "worker": {"tolerations": operands, "affinity": pool_affinity(targets)},
            "master": {"nodeSelector": placement["nodeSelector"], "tolerations": placement["tolerations"]},
            "gc": {"nodeSelector": placement["nodeSelector"], "tolerations": placement["tolerations"]},
        },
        "driver": {"enabled": True},
        # The NVIDIA runtime ignores NVIDIA_VISIBLE_DEVICES in unprivileged containers, so GPUs reach
        # them only through the device plugin (defence in depth beside the team admission policy,
        # aksgpu-team-gpus). The chart hands toolkit.env to the toolkit container
        # (templates/clusterpolicy.yaml@v26.7.0), whose installer writes it to the runtime's config
        # (NVIDIA/nvidia-container-toolkit cmd/nvidia-ctk-installer/toolkit/toolkit.go@v1.20.0). The
        # gate's check keeps its GPUs: its SYS_ADMIN counts as privileged there (privileged.go).
        "toolkit": {"enabled": True,
                    "env": [{"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED", "value": "false"}]},
        "devicePlugin": {"enabled": True},
        # single: each MIG instance is one nvidia.com/gpu, as with aksgpu's own device plugin.
        "mig": {"strategy": "single"},
        "dcgmExporter": {
            "enabled": metrics.enabled,
            "version": metrics.exporter_version,
            "env": [{"name": "DCGM_EXPORTER_INTERVAL", "value": str(metrics.interval_seconds * 1000)}],
            # aksgpu's scrape configuration reads the exporters; no Prometheus Operator CRDs needed.
            "serviceMonitor": {"enabled": False},
            "config": {"name": DCGM_METRICS_CONFIG, "create": True, "data": catalog.text("dcgm_metrics.csv")},
        },
    }
    if spec.gpu_software.gpu_operator.driver_version:
        values["driver"]["version"] = spec.gpu_software.gpu_operator.driver_version
    if spec.promotion is not None:
        # One driver per pool: the chart's default NVIDIADriver (driver.version) serves the GPU nodes no
        # other NVIDIADriver selects, the pinned pools get their own (templates/nvidiadriver.yaml and
        # the CRD's `default` field, v26.7.0). On with the promotion section, not with the first pin:
        # turning it on hands every operator node's driver from the ClusterPolicy's DaemonSets to the
        # NVIDIADriver's, which replaces each driver pod once (controllers/state_manager.go step(),
        # v26.7.0); a later pin then moves only its own pool.
        values["driver"]["nvidiaDriverCRD"] = {"enabled": True, "deployDefaultCR": True}
    return values


def pinned_driver_targets(spec: ClusterSpec) -> list[PoolTarget]:
    """The GPU Operator's pools with a driver pin (nodePools[].pins.driverVersion)."""
    return [t for t in operator_targets(spec) if t.pool.pins and t.pool.pins.driver_version]


def nvidia_drivers(spec: ClusterSpec) -> list[dict[str, Any]]:
    """An NVIDIADriver (nvidia.com/v1alpha1, the CRD of gpu-operator v26.7.0) per pinned agent pool:
    the pinned version, on the nodes of that pool only (nodeSelector on AKS's agentpool label); the
    image is the chart's default driver image (values.yaml driver.repository, driver.image)."""
    return [{
        "apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver",
        "metadata": metadata(f"aksgpu-{target.name}"),
        "spec": {"default": False, "driverType": "gpu", "repository": "nvcr.io/nvidia", "image": "driver",
                 "version": target.pool.pins.driver_version if target.pool.pins else None,
                 "nodeSelector": {AGENT_POOL_LABEL: target.name},
                 # The driver DaemonSet tolerates only nvidia.com/gpu and these (gpu-operator v26.7.0
                 # manifests/state-driver/0500_daemonset.yaml; the chart's default NVIDIADriver copies
                 # daemonsets.tolerations the same way): without the gate's startup taint and the pool's
                 # own taints here, no driver would start on a new node of a pinned pool.
                 "tolerations": pool_tolerations([target], gate=spec.gpu_health.gate.enabled)},
    } for target in pinned_driver_targets(spec)]


class GpuSoftware(pulumi.ComponentResource):
    """The NVIDIA device plugin (driver Install pools) and the GPU Operator (driver None pools)."""

    device_plugin: k8s.apps.v1.DaemonSet | None
    # A k8s.helm.v3.Release, named by its base class: Pulumi evaluates a component's annotations
    # when it registers, and naming helm.v3 would import its Chart support (PyYAML, requests):
    # about 0.15 s of every plan and preview, also where no Release is declared.
    gpu_operator: pulumi.CustomResource | None

    def __init__(self, name: str, args: GpuSoftwareArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aksgpu:index:GpuSoftware", name, None, opts)
        spec = args.spec
        self.device_plugin = None
        self.gpu_operator = None
        if device_plugin_targets(spec):
            manifest = device_plugin_daemonset(spec, args.system_namespace)
            self.device_plugin = k8s.apps.v1.DaemonSet(
                f"{name}-device-plugin", metadata=manifest["metadata"], spec=manifest["spec"],
                opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[args.namespace_resource]))
        if operator_targets(spec):
            namespace = k8s.core.v1.Namespace(
                f"{name}-gpu-operator-namespace",
                # The operator's operands load kernel modules and mount host paths.
                metadata=metadata(GPU_OPERATOR_NAMESPACE,
                                  extra_labels={"pod-security.kubernetes.io/enforce": "privileged"}),
                opts=pulumi.ResourceOptions(parent=self, provider=args.provider))
            chart = catalog.load("in_cluster")["gpuOperator"]
            self.gpu_operator = k8s.helm.v3.Release(
                f"{name}-gpu-operator",
                name="gpu-operator",
                chart=chart["chart"],
                version=spec.gpu_software.gpu_operator.chart_version,
                repository_opts={"repo": chart["repository"]},
                namespace=GPU_OPERATOR_NAMESPACE,
                values=gpu_operator_values(spec),
                # The operator's pods start only once GPU nodes join; do not hold `up` for them.
                skip_await=True,
                opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[namespace]))
            # The NVIDIADriver CRD comes with the chart.
            for driver in nvidia_drivers(spec):
                k8s.apiextensions.CustomResource(
                    f"{name}-{driver['metadata']['name']}", api_version=driver["apiVersion"], kind=driver["kind"],
                    metadata=driver["metadata"], spec=driver["spec"],
                    opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[self.gpu_operator]))
        self.register_outputs({})
