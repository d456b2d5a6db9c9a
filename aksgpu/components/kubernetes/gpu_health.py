"""GpuHealth: passive and active health of the GPU nodes.

Passive: the DCGM exporter (aksgpu's DaemonSet on driver Install pools; the GPU Operator's on
driver None pools) with aksgpu's metric list, scraped by managed Prometheus (a PodMonitor of
Azure's azmonitoring.coreos.com group) or by a bundled Prometheus, and alert rules for the
conditions that should take a node out (Azure Monitor Prometheus rule groups, or the bundled
Prometheus's rules).

Active, the node gate (a GPU node's life):
  created -> a gate pod taints it with startup-taint.cluster-autoscaler.kubernetes.io/
  aksgpu-gpu-check and labels it aksgpu.io/gpu-health=pending (nothing advertises its GPUs until
  the verdict) -> the check runs once -> passed: taint removed, node admitted | failed: cordoned,
  labelled failed and with the failed check -> idle nodes re-checked by a CronJob per node shape
  -> a failed re-check cordons the node too; a watchdog fails nodes pending too long.
The steps that change the node are node_gate.py (shipped as a ConfigMap), narrowed by an admission
policy; the check is an image and command from the spec, with the contract in node_gate.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import hashlib
import json
import math

import pulumi
import pulumi_kubernetes as k8s
import yaml
from pulumi_azure_native import alertsmanagement

from aksgpu import catalog
from aksgpu.components.kubernetes import fabric_acceptance_objects as acceptance
from aksgpu.node import node_gate
from aksgpu.components.kubernetes.rbac_resources import declare_rbac
from aksgpu.components.kubernetes.gpu_software import (
    DCGM_METRICS_CONFIG,
    device_plugin_targets,
    operator_targets,
)
from aksgpu.components.kubernetes.objects import (
    GPU_OPERATOR_NAMESPACE,
    HEALTH_LABEL,
    NODE_METADATA_VARIABLES,
    NODE_NAME_CLAIM,
    PoolTarget,
    admitted_by_gate,
    daemonset,
    image,
    labels,
    metadata,
    node_update_policy,
    policy_exceptions,
    pool_affinity,
    pool_tolerations,
    program_source,
    system_pool_placement,
)
from aksgpu.spec import ClusterSpec
from aksgpu.spec.fabric import fabric_profile
from aksgpu.spec.gpu_startup import gate_startup_minutes

GATE = "aksgpu-gpu-gate"
RECHECK = "aksgpu-gpu-recheck"
SERVICE_ACCOUNT = "aksgpu-gpu-health"
WATCHDOG = "aksgpu-gpu-gate-watchdog"
# Minutes on top of the startup table's figures (gate_startup_minutes: node boot, on GPU Operator
# pools the driver and toolkit, the check image's pull) before the watchdog fails a pending node:
# most of those figures are labelled assumptions, and failing a healthy node that was merely slow
# costs a whole VM.
GATE_STARTUP_MARGIN_MINUTES = 10
SCRIPT_CONFIG = "aksgpu-node-gate"
EXPORTER = "dcgm-exporter"
# The label the GPU Operator gives its exporter pods; aksgpu's exporter carries it too, so one
# scrape selector covers both.
EXPORTER_APP_LABEL = {"app": "nvidia-dcgm-exporter"}
RESULTS = "/var/run/aksgpu"
SCRIPT_DIR = "/opt/aksgpu"
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# Runs the check with a time limit (killed a minute after it ignores SIGTERM) and records its exit
# code for the verdict step; a node the pending step chose not to check (node_gate.py) is skipped.
CHECK_WRAPPER = (
    'if [ -f "$AKSGPU_RESULTS/skip" ]; then echo "aksgpu: no check needed on this node"; exit 0; fi; '
    'timeout -k 60 "$AKSGPU_TIMEOUT_SECONDS" "$@"; code=$?; echo "$code" > "$AKSGPU_RESULTS/exit-code"; '
    'echo "aksgpu: check exited with $code"; exit 0'
)
# Below the autoscaler's expendable cutoff: a pending re-check never triggers a scale-up.
RECHECK_PRIORITY = catalog.limit("autoscalerExpendablePriorityCutoff") - 10
MAX_RECHECK_PODS = 100  # per run and CronJob, however many pools share it


@dataclass
class GpuHealthArgs:
    spec: ClusterSpec
    provider: k8s.Provider
    system_namespace: str
    namespace_resource: pulumi.Resource
    resource_group_name: pulumi.Input[str]
    prometheus_workspace_id: pulumi.Input[str] | None
    # The GPU Operator's release: the PodMonitor and rules cover its exporter once it exists.
    gpu_operator: pulumi.Resource | None = None
    tags: dict[str, str] = field(default_factory=dict)
    # The Azure Monitor workspace's region, where its rule groups go (None: the cluster's; a fleet's
    # workspace may be in another region).
    prometheus_location: pulumi.Input[str] | None = None


# --- metrics ---------------------------------------------------------------------------------


# Why the DCGM exporter and the GPU checks are excepted from workload policies (shown on each
# object as a policy.aksgpu.io/<rule> annotation; README "Security baseline and policies").
EXPORTER_EXCEPTIONS = {
    "k8s-non-root": "DCGM reads GPU state and profiling counters as root, as NVIDIA's dcgm-exporter manifest runs it.",
    "k8s-capabilities": "SYS_ADMIN: DCGM's profiling metrics (DCGM_FI_PROF_*) need it, as in NVIDIA's manifest.",
    "k8s-host-path": "/var/lib/kubelet/pod-resources, read-only: the kubelet's pod-resources socket maps each GPU "
                     "to the pod using it.",
    "k8s-read-only-root-fs": "NVIDIA's dcgm-exporter manifest does not set a read-only root filesystem; not "
                             "verified here that the exporter runs with one.",
}
CHECK_EXCEPTIONS = {
    "k8s-non-root": "The check container runs DCGM diagnostics, which need root as the DCGM exporter does; the "
                    "pod's other containers run as nobody.",
    "k8s-capabilities": "SYS_ADMIN: DCGM diagnostics read GPU state that needs it; only the check container adds it.",
    "k8s-read-only-root-fs": "DCGM diagnostics are not verified to run on a read-only root filesystem; only the "
                             "check container's is writable.",
}
VALIDATIONS_EXCEPTION = {
    "k8s-host-path": "/run/nvidia/validations, read-only: the GPU Operator's driver validation marker, which the "
                     "gate waits for before its check.",
}
HOST_LOG_EXCEPTION = {
    "k8s-host-path": "/var/log, read-only: the node's kernel log (NVRM Xid lines), which the check reads as Azure's "
                     "node health checks do; an unprivileged container cannot open /dev/kmsg (containerd's default "
                     "device list, containerd oci/spec_opts.go WithDefaultUnixDevices, does not include it).",
}
HOST_LOG_DIR = "/host/var/log"
# The check reads the host's kernel log as root without CAP_DAC_OVERRIDE (it drops ALL but
# SYS_ADMIN), so it needs the log's group: Ubuntu's rsyslog writes kern.log, syslog and messages
# syslog:adm 0640 and AgentBaker's cis.sh strips the world-read bit under /var/log
# (Azure/AgentBaker@06836ee2 parts/linux/cloud-init/artifacts/cis.sh); adm is group 4 on Ubuntu and
# Azure Linux. Azure Linux's /var/log/messages is root's, which uid 0 reads as its owner.
CHECK_POD_SECURITY = {"supplementalGroups": [4]}


def merged_exceptions(*reasons: dict[str, str]) -> dict[str, str]:
    """Policy exceptions of several sources, one reason per rule (an object has one annotation per
    rule): reasons for the same rule are joined."""
    merged: dict[str, str] = {}
    for found in reasons:
        for rule, reason in found.items():
            merged[rule] = f"{merged[rule]} {reason}" if rule in merged else reason
    return merged


def check_memory_gib(gpus: int) -> float:
    """The check's peak host memory on a node with `gpus` GPUs, from aksgpu/catalog/gpu_gate.yaml:
    the parent process (with a CUDA context per further GPU) plus one all-reduce worker per GPU."""
    table = catalog.load("gpu_gate")["checkMemory"]
    gpus = max(gpus, 1)
    return float(table["parentGib"] + (gpus - 1) * table["parentContextPerGpuGib"] + gpus * table["workerRssGib"])


def check_resources(gpus: int, vcpus: int | None = None) -> dict[str, dict[str, str]]:
    """The check container's requests and limits on a node with `gpus` GPUs: memory for the measured
    peak (request) with room and the /dev/shm tmpfs on top (limit), never below the DCGM check's
    2Gi/4Gi; a core per GPU (the workers import PyTorch at once), at most half the node's vCPUs."""
    table = catalog.load("gpu_gate")["checkMemory"]
    estimate = check_memory_gib(gpus)
    request = max(math.ceil(estimate), table["floorRequestGib"])
    limit = max(math.ceil(estimate * table["limitFactor"] + table["sharedMemoryGib"]), table["floorLimitGib"], request)
    cpu = max(1, gpus if vcpus is None else min(gpus, vcpus // 2))
    return {"requests": {"cpu": str(cpu), "memory": f"{request}Gi"}, "limits": {"memory": f"{limit}Gi"}}


def _shared_memory_volume() -> dict[str, Any]:
    """/dev/shm for NCCL: a tmpfs, charged to the pod's memory (within the limit above)."""
    size = catalog.load("gpu_gate")["checkMemory"]["sharedMemoryGib"]
    return {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{size}Gi"}}


def _host_log_volume() -> dict[str, Any]:
    return {"name": "host-log", "hostPath": {"path": "/var/log", "type": "Directory"}}


def exporter_daemonset(spec: ClusterSpec, namespace: str) -> dict[str, Any]:
    """aksgpu's DCGM exporter on the driver Install pools (the operator runs its own elsewhere),
    shaped like NVIDIA's dcgm-exporter.yaml, reading aksgpu's metric list from a ConfigMap."""
    metrics = spec.gpu_health.metrics
    targets = device_plugin_targets(spec)
    # With the gate on, from the verdict on: no second DCGM client while the check runs.
    # Admitted nodes, and failed ones: a node cordoned on a passive signal keeps its running pods,
    # which stay watched; a failed node's metrics help its diagnosis. Never during a check.
    admitted = ([{"key": HEALTH_LABEL, "operator": "In", "values": ["passed", "unchecked", "failed"]}]
                if spec.gpu_health.gate.enabled else [])
    port = _exporter_port()
    return daemonset(EXPORTER, namespace, {
        "affinity": pool_affinity(targets, *admitted),
        "tolerations": pool_tolerations(targets),
        "priorityClassName": "system-node-critical",
        "automountServiceAccountToken": False,
        "containers": [{
            "name": EXPORTER,
            "image": image("dcgmExporter", metrics.exporter_version),
            "env": [
                {"name": "DCGM_EXPORTER_KUBERNETES", "value": "true"},
                # Every GPU of the node, without requesting any from the device plugin.
                {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                {"name": "DCGM_EXPORTER_LISTEN", "value": f":{port}"},
                {"name": "DCGM_EXPORTER_COLLECTORS", "value": "/etc/dcgm-exporter/aksgpu/dcgm-metrics.csv"},
                {"name": "DCGM_EXPORTER_INTERVAL", "value": str(metrics.interval_seconds * 1000)},
                {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            ],
            "ports": [{"name": "metrics", "containerPort": port}],
            # SYS_ADMIN: DCGM's profiling metrics (DCGM_FI_PROF_*) need it (NVIDIA's manifest).
            "securityContext": {"runAsNonRoot": False, "runAsUser": 0, "allowPrivilegeEscalation": False,
                                "capabilities": {"add": ["SYS_ADMIN"], "drop": ["ALL"]}},
            "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
            "readinessProbe": {"httpGet": {"path": "/health", "port": port},
                               "initialDelaySeconds": 15, "periodSeconds": 15},
            "volumeMounts": [
                {"name": "pod-resources", "mountPath": "/var/lib/kubelet/pod-resources", "readOnly": True},
                {"name": "metrics-list", "mountPath": "/etc/dcgm-exporter/aksgpu", "readOnly": True},
            ],
        }],
        "volumes": [
            {"name": "pod-resources", "hostPath": {"path": "/var/lib/kubelet/pod-resources"}},
            {"name": "metrics-list", "configMap": {"name": DCGM_METRICS_CONFIG}},
        ],
    }, extra_labels=EXPORTER_APP_LABEL, exceptions=EXPORTER_EXCEPTIONS)


def _exporter_port() -> int:
    return int(catalog.load("in_cluster")["dcgmExporter"]["port"])


def exporter_namespaces(spec: ClusterSpec, system_namespace: str) -> list[str]:
    found = []
    if device_plugin_targets(spec):
        found.append(system_namespace)
    if operator_targets(spec):
        found.append(GPU_OPERATOR_NAMESPACE)
    return found


def pod_monitor(spec: ClusterSpec, namespace: str) -> dict[str, Any]:
    """The PodMonitor Azure Monitor managed Prometheus reads (its own azmonitoring.coreos.com group,
    prometheus-metrics-scrape-crd.md), for both exporters."""
    interval = f"{spec.gpu_health.metrics.interval_seconds}s"
    return {
        "apiVersion": "azmonitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": metadata("aksgpu-dcgm-exporter", namespace),
        "spec": {
            "namespaceSelector": {"matchNames": exporter_namespaces(spec, namespace)},
            "selector": {"matchLabels": dict(EXPORTER_APP_LABEL)},
            # The pod's node on every series and on up, as the bundled scrape job does: GpuMetricsMissing
            # joins up with kube-state-metrics' node label (the CRD's podMetricsEndpoints[].relabelings).
            "podMetricsEndpoints": [{"port": "metrics", "interval": interval, "scrapeTimeout": "10s",
                                     "relabelings": [{"sourceLabels": ["__meta_kubernetes_pod_node_name"],
                                                      "targetLabel": "node", "action": "replace"}]}],
            # The limits Azure's scrape-CRD documentation asks every custom resource to set.
            "labelLimit": 63,
            "labelNameLengthLimit": 511,
            "labelValueLengthLimit": 1023,
        },
    }


def scrape_job(spec: ClusterSpec, system_namespace: str) -> dict[str, Any]:
    """The same scrape as a plain Prometheus job, for the bundled Prometheus."""
    return {
        "job_name": "aksgpu-dcgm-exporter",
        "scrape_interval": f"{spec.gpu_health.metrics.interval_seconds}s",
        "kubernetes_sd_configs": [{"role": "pod",
                                   "namespaces": {"names": exporter_namespaces(spec, system_namespace)}}],
        "relabel_configs": [
            {"source_labels": ["__meta_kubernetes_pod_label_app"], "regex": "nvidia-dcgm-exporter", "action": "keep"},
            {"source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": "metrics", "action": "keep"},
            {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"},
        ],
    }


def alert_rules() -> list[dict[str, Any]]:
    """aksgpu's GPU alert rules (aksgpu/catalog/gpu_alerts.yaml), expressions expanded."""
    table = catalog.load("gpu_alerts")
    xids = "|".join(str(xid) for xid in table["nodeXids"])
    return [{**rule, "expression": rule["expression"].replace("NODE_XIDS", xids)} for rule in table["rules"]]


def cordon_conditions() -> list[dict[str, Any]]:
    """The alert rules' cordon blocks (gpu_alerts.yaml), for the passive remediation to test on one
    scrape of a node's DCGM exporter: {"alert", "metric", "above"} and, where a label narrows it,
    "label" with "values", the list the block names expanded to strings. The node is cordoned when
    a sample of `metric` is above `above` (and its `label` is one of `values`)."""
    table = catalog.load("gpu_alerts")
    found = []
    for rule in table["rules"]:
        block = rule.get("cordon")
        if block is None:
            continue
        condition = {"alert": rule["alert"], "metric": block["metric"], "above": block["above"]}
        if "label" in block:
            condition["label"] = block["label"]
            condition["values"] = [str(value) for value in table[block["values"]]]
        found.append(condition)
    return found


def _minutes(text: str) -> int:
    return int(str(text).removesuffix("m"))


def bundled_prometheus_values(spec: ClusterSpec, system_namespace: str) -> dict[str, Any]:
    """Values of prometheus-community/prometheus (keys of its values.yaml at 29.27.0): one server
    scraping the exporters and evaluating aksgpu's rules; no Alertmanager (route the alerts with
    your own), no node exporter or pushgateway."""
    rules = [{"alert": rule["alert"], "expr": rule["expression"],
              **({"for": rule["for"]} if _minutes(rule["for"]) else {}),
              "labels": {"severity": str(rule["severity"])},
              "annotations": {"summary": f"{rule['alert']} on {{{{ $labels.node }}}}", "description": rule["reason"]}}
             for rule in alert_rules()] if spec.gpu_health.alerts.enabled else []
    values: dict[str, Any] = {
        "alertmanager": {"enabled": False},
        "prometheus-node-exporter": {"enabled": False},
        "prometheus-pushgateway": {"enabled": False},
        # GpuMetricsMissing reads its kube_node_status_capacity and kube_node_spec_taint.
        "kube-state-metrics": {"enabled": True},
        "server": {"retention": "15d", "persistentVolume": {"enabled": True, "size": "50Gi"}},
        "extraScrapeConfigs": yaml.safe_dump([scrape_job(spec, system_namespace)], sort_keys=False),
    }
    if rules:
        values["serverFiles"] = {"alerting_rules.yml": {"groups": [{"name": "aksgpu-gpu-health", "rules": rules}]}}
    return values


# --- the node gate and re-checks -------------------------------------------------------------


def _script_mount() -> dict[str, Any]:
    return {"name": "node-gate", "mountPath": SCRIPT_DIR, "readOnly": True}


def _gate_container(spec: ClusterSpec, name: str, step_args: list[str], token: bool = True) -> dict[str, Any]:
    """A container running one node_gate.py step, with the service account's token when it changes
    the node (only those containers see it: the pod does not automount it, so the check never
    holds node rights)."""
    mounts = [_script_mount(), {"name": "results", "mountPath": RESULTS}]
    if token:
        mounts.append({"name": "api-token", "mountPath": TOKEN_DIR, "readOnly": True})
    return {
        "name": name,
        "image": spec.gpu_health.gate.helper_image,
        "command": ["python3", f"{SCRIPT_DIR}/node_gate.py", *step_args],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "allowPrivilegeEscalation": False,
                            "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}},
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}},
        "volumeMounts": mounts,
    }


def _check_container(spec: ClusterSpec, mode: str, gpus: int, vcpus: int | None,
                     request_gpus: bool, physical: int | None = None,
                     rdma: dict[str, str] | None = None) -> dict[str, Any]:
    """The check's container: sized for the node's `physical` GPUs (default `gpus`); a re-check
    requests `gpus` nvidia.com/gpu (MIG instances where the pool splits its GPUs); on InfiniBand pools
    it requests the RDMA resource `rdma` too (rdma_request)."""
    gate = spec.gpu_health.gate
    env = [
        {"name": "AKSGPU_RESULTS", "value": RESULTS},
        {"name": "AKSGPU_REPORT", "value": f"{RESULTS}/report.json"},
        {"name": "AKSGPU_TIMEOUT_SECONDS", "value": str(gate.timeout_seconds)},
        {"name": "AKSGPU_MODE", "value": mode},
        {"name": "AKSGPU_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "AKSGPU_HOST_LOG_DIR", "value": HOST_LOG_DIR},
    ]
    resources = check_resources(physical or gpus, vcpus)
    container: dict[str, Any] = {
        "name": "check",
        "image": gate.image,
        "command": ["sh", "-c", CHECK_WRAPPER, "aksgpu-check", *gate.command],
        "env": env,
        # DCGM diagnostics read GPU state that needs root and SYS_ADMIN, as the DCGM exporter does.
        "securityContext": {"runAsUser": 0, "allowPrivilegeEscalation": False,
                            "capabilities": {"add": ["SYS_ADMIN"], "drop": ["ALL"]}},
        "volumeMounts": [{"name": "results", "mountPath": RESULTS},
                         {"name": "shm", "mountPath": "/dev/shm"},
                         {"name": "host-log", "mountPath": HOST_LOG_DIR, "readOnly": True}],
    }
    if request_gpus:
        # A re-check holds every GPU of an idle node through the device plugin.
        container["resources"] = {"requests": {**resources["requests"], "nvidia.com/gpu": str(gpus)},
                                  "limits": {**resources["limits"], "nvidia.com/gpu": str(gpus)}}
    else:
        # The gate runs before any GPU is advertised: all GPUs, without a request.
        env.append({"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"})
        container["resources"] = resources
    if rdma:
        container["resources"] = {kind: {**values, **rdma} for kind, values in container["resources"].items()}
    return container


def rdma_request(targets: list[PoolTarget]) -> dict[str, str]:
    """The RDMA resource a check pod on these pools requests, as a workload does ({} without
    InfiniBand): its device plugin then mounts /dev/infiniband/uverbs* and rdma_cm, which the check's
    rdma-devices step looks for (the RDMA shared device plugin runs on gated nodes: fabric.py
    tolerates the gate's taint). The pools of one group share their fabric (_by_fabric).

    It also orders the check after the DOCA-OFED driver: the plugin's DaemonSet selects only nodes
    labelled network.nvidia.com/operator.mofed.wait=false (Mellanox/network-operator v26.4.1
    manifests/state-rdma-shared-device-plugin/0060_rdma-shared-dev-plugin-ds.yaml), which the
    operator sets once the driver container is Ready (controllers/mofed_wait_labels.go), after it
    has swapped the inbox mlx5 modules for its own (Mellanox/doca-driver-build
    internal/driver/driver.go restartDriver). So the check's port and device steps never run while
    the modules reload. A node where that never happens is failed by the watchdog, naming the
    resource (node_gate.py watch_unstarted)."""
    profile = fabric_profile(targets[0].pool.vm_size) if targets else None
    return {profile.rdma_resource: str(profile.rdma_per_node)} if profile else {}


def _by_fabric(targets: list[PoolTarget]) -> dict[str, list[PoolTarget]]:
    """Name suffix -> pools, one group per RDMA resource (none: ""). The check pods of InfiniBand pools
    request the RDMA resource, so they cannot share a DaemonSet or CronJob with pools without it; a
    group keeps the plain name unless pools of the same GPU count need both (then "-rdma")."""
    groups: dict[tuple[int, str], list[PoolTarget]] = {}
    for target in targets:
        rdma = ",".join(rdma_request([target]))
        groups.setdefault((physical_gpus(target)[0], rdma), []).append(target)
    mixed = {gpus for gpus, rdma in groups if not rdma} & {gpus for gpus, rdma in groups if rdma}
    named: dict[str, list[PoolTarget]] = {}
    for (gpus, rdma), found in groups.items():
        named.setdefault("-rdma" if rdma and gpus in mixed else "", []).extend(found)
    return named


def _pod_volumes(extra: list[dict[str, Any]] | None = None, check: bool = False) -> list[dict[str, Any]]:
    return [
        {"name": "node-gate", "configMap": {"name": SCRIPT_CONFIG}},
        {"name": "results", "emptyDir": {"sizeLimit": "64Mi"}},
        # The service account token, CA and namespace, mounted only where node_gate.py runs.
        {"name": "api-token", "projected": {"sources": [
            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
        ]}},
        *([_shared_memory_volume(), _host_log_volume()] if check else []),
        *(extra or []),
    ]


def _gate_pod(spec: ClusterSpec, targets: list[PoolTarget], service_account: str, *, health: str, op: str,
              init: list[dict[str, Any]], main: dict[str, Any],
              extra_volumes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "serviceAccountName": service_account,
        "automountServiceAccountToken": False,
        "affinity": pool_affinity(targets, {"key": HEALTH_LABEL, "operator": op, "values": health.split(",")}),
        "tolerations": pool_tolerations(targets, gate=True),
        "priorityClassName": "system-node-critical",
        "initContainers": init,
        "containers": [main],
        "volumes": _pod_volumes(extra_volumes, check=any(c["name"] == "check" for c in init)),
    }
    if any(c["name"] == "check" for c in init):
        pod["securityContext"] = CHECK_POD_SECURITY
    return pod


# NotIn these: a node without a verdict. "accepting" (an InfiniBand node that passed its check and
# waits for the cross-node acceptance) is decided as far as the gate goes: its gate pod leaves, and
# with it the check's CPU and memory requests.
UNDECIDED = "passed,failed,unchecked,accepting"


def gate_daemonsets(spec: ClusterSpec, namespace: str) -> list[dict[str, Any]]:
    """The gate, per driver mode. Each runs on GPU nodes without a verdict; the node's label leaves
    the DaemonSet's node affinity once decided, and its pod goes away.

    driver Install pools: one DaemonSet; its pending step taints the node, the check runs (the
    container runtime AKS configures gives it the GPUs), the verdict admits or cordons.
    GPU Operator pools: two. The check needs the operator's runtime class, whose handler exists
    only once the operator has installed the driver and toolkit, and a pod with a runtime class
    cannot start before that; so a "hold" DaemonSet without one taints the node at once and keeps
    the operator's device plugin and DCGM exporter off it, and the check DaemonSet runs on nodes
    labelled pending.
    """
    gate_name = f"{namespace}/{{name}}"
    daemonsets = []
    for gpus, (targets, vcpus), suffix in _shapes(device_plugin_targets(spec)):
        # One DaemonSet per GPU count (and RDMA resource): its check container is sized for the node's
        # GPUs. On InfiniBand pools the pod waits for the RDMA device plugin before its pending step.
        name = f"{GATE}-aks-driver-{gpus}gpu{suffix}"
        pending = _gate_container(spec, "pending", ["pending", "--results", RESULTS,
                                                    "--gate-daemonset", gate_name.format(name=name)])
        pod = _gate_pod(spec, targets, SERVICE_ACCOUNT, health=UNDECIDED, op="NotIn",
                        init=[pending, _check_container(spec, "gate", gpus, vcpus, request_gpus=False,
                                                        rdma=rdma_request(targets))],
                        main=_gate_container(spec, "verdict", ["verdict", "--results", RESULTS, "--hold",
                                                               *verdict_args(spec, namespace),
                                                               *acceptance_args(spec, targets)]))
        daemonsets.append(daemonset(name, namespace, pod, exceptions=merged_exceptions(CHECK_EXCEPTIONS,
                                                                                       HOST_LOG_EXCEPTION)))
    operator = operator_targets(spec)
    if operator:
        hold = f"{GATE}-operator-hold"
        pending = _gate_container(spec, "pending", ["pending", "--results", RESULTS, "--hold-operands",
                                                    "--gate-daemonset", gate_name.format(name=hold)])
        pod = _gate_pod(spec, operator, SERVICE_ACCOUNT, health=UNDECIDED, op="NotIn", init=[pending],
                        main=_gate_container(spec, "hold", ["hold"], token=False))
        held = daemonset(hold, namespace, pod)
        # The hold pod's template names the check it stands for, so a new check image or command
        # rolls it too: its pending step then puts a node the breaker held under the new check.
        held["spec"]["template"]["metadata"]["annotations"] = {"aksgpu.io/check": check_digest(spec)}
        daemonsets.append(held)
        for gpus, (targets, vcpus), suffix in _shapes(operator):
            wait = _gate_container(spec, "wait-for-driver", ["wait-for-driver", "--timeout-seconds", "600"],
                                   token=False)
            wait["volumeMounts"].append({"name": "validations", "mountPath": "/run/nvidia/validations",
                                         "readOnly": True})
            verdict = _gate_container(spec, "verdict", ["verdict", "--results", RESULTS, "--hold",
                                                        "--release-operands", *verdict_args(spec, namespace),
                                                        *acceptance_args(spec, targets)])
            pod = _gate_pod(spec, targets, SERVICE_ACCOUNT, health="pending", op="In",
                            init=[wait, _check_container(spec, "gate", gpus, vcpus, request_gpus=False,
                                                         rdma=rdma_request(targets))], main=verdict,
                            extra_volumes=[{"name": "validations", "hostPath": {"path": "/run/nvidia/validations",
                                                                                 "type": "DirectoryOrCreate"}}])
            pod["runtimeClassName"] = "nvidia"  # the GPU Operator's runtime class gives the check the GPUs
            daemonsets.append(daemonset(f"{GATE}-operator-{gpus}gpu{suffix}", namespace, pod,
                                        exceptions=merged_exceptions(CHECK_EXCEPTIONS, VALIDATIONS_EXCEPTION,
                                                                     HOST_LOG_EXCEPTION)))
    for found in daemonsets:
        # Gate pods serve nothing: a new gate reaches every node at once rather than one node per
        # check (a held node is checked again by its new pod).
        found["spec"]["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}}
    return daemonsets


def check_digest(spec: ClusterSpec) -> str:
    """A digest of what the gate's check runs: image, command and time limit."""
    gate = spec.gpu_health.gate
    text = json.dumps([gate.image, list(gate.command), gate.timeout_seconds])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# GPUs per node the check is sized for when a pool's VM size is not in aksgpu's table: the most
# any Azure GPU size has.
UNKNOWN_SIZE_GPUS = 8


def physical_gpus(target: PoolTarget) -> tuple[int, int | None]:
    """(GPUs, vCPUs) of a pool's nodes: whole GPUs, which the check's processes use (a MIG pool
    advertises more nvidia.com/gpu than that)."""
    size = target.pool.size or {}
    return int(size.get("gpus") or UNKNOWN_SIZE_GPUS), size.get("vcpus")


def check_shapes(targets: list[PoolTarget]) -> dict[int, tuple[list[PoolTarget], int | None]]:
    """GPUs per node -> (the pools with that many, the fewest vCPUs among them)."""
    shapes: dict[int, tuple[list[PoolTarget], int | None]] = {}
    for target in targets:
        gpus, vcpus = physical_gpus(target)
        pools, fewest = shapes.get(gpus, ([], None))
        pools.append(target)
        shapes[gpus] = (pools, vcpus if fewest is None else min(fewest, vcpus or fewest))
    return dict(sorted(shapes.items()))


def _shapes(targets: list[PoolTarget]) -> list[tuple[int, tuple[list[PoolTarget], int | None], str]]:
    """check_shapes of each fabric group (_by_fabric), with the group's name suffix."""
    return sorted(((gpus, shape, suffix) for suffix, group in _by_fabric(targets).items()
                   for gpus, shape in check_shapes(group).items()), key=lambda found: (found[0], found[2]))


def verdict_args(spec: ClusterSpec, namespace: str) -> list[str]:
    """What node_gate.py's verdict and watchdog need of gpuHealth.gate: the kept-node bound and the breaker."""
    gate = spec.gpu_health.gate
    breaker = gate.breaker
    return ["--namespace", namespace, "--keep-failed", str(gate.keep_failed_nodes),
            "--keep-failed-hours", str(gate.keep_failed_hours),
            *(["--no-breaker"] if not breaker.enabled else []),
            "--breaker-share", f"{breaker.failure_share:g}", "--breaker-window-minutes", str(breaker.window_minutes),
            "--breaker-min-nodes", str(breaker.min_nodes)]


def acceptance_args(spec: ClusterSpec, targets: list[PoolTarget]) -> list[str]:
    """The verdict's --acceptance-pools: the pools of `targets` whose passed nodes wait for the
    cross-node acceptance (fabric_acceptance_objects.acceptance_targets)."""
    names = sorted({target.name for target in acceptance.acceptance_targets(targets, spec)})
    return ["--acceptance-pools", ",".join(names)] if names else []


def max_pending_minutes(spec: ClusterSpec) -> int:
    """How long a node may stay pending before the watchdog fails it: its way to the check, the
    check's own limit, and a margin."""
    return gate_startup_minutes(spec) + math.ceil(spec.gpu_health.gate.timeout_seconds / 60) + \
        GATE_STARTUP_MARGIN_MINUTES


def gate_watchdog(spec: ClusterSpec, namespace: str) -> dict[str, Any]:
    """A CronJob on the system pool: the periodic pass of node_gate.py over the GPU nodes (fail
    nodes pending too long, hand failed nodes past the pool's bound to the autoscaler, cordon on
    critical passive signals, gate again nodes whose software changed, and with the gate off
    release every node it tainted). Declared whenever the cluster has GPU pools, so turning the
    gate off never strands a node."""
    health = spec.gpu_health
    max_pending = max_pending_minutes(spec)
    placement = system_pool_placement()
    install, operator = device_plugin_targets(spec), operator_targets(spec)
    step = ["watchdog", "--max-pending-minutes", str(max_pending), *verdict_args(spec, namespace),
            "--pools", ",".join(sorted({target.name for target in [*install, *operator]}))]
    if operator:
        step += ["--operator-pools", ",".join(sorted({target.name for target in operator}))]
    # What the gate's pod waits for besides the GPUs, so a node where it never starts is failed
    # with the missing resource named (node_gate.py watch_unstarted).
    gate_resources = sorted({f"{target.name}={resource}" for target in [*install, *operator]
                             for resource in rdma_request([target])})
    if health.gate.enabled and gate_resources:
        step += ["--gate-resources", ",".join(gate_resources)]
    if not health.gate.enabled:
        step.append("--gate-off")
    else:
        # The acceptance's backstop: its hold bound and a margin of two passes and a run.
        step += [*acceptance_args(spec, [*install, *operator]), "--max-accepting-minutes",
                 str(health.acceptance.hold_minutes + health.acceptance.run_timeout_minutes + 10)]
    if health.passive.cordon:
        if health.metrics.enabled:
            step += ["--cordon-conditions", json.dumps(cordon_conditions(), separators=(",", ":")),
                     "--exporter-namespaces", ",".join(exporter_namespaces(spec, namespace)),
                     "--exporter-port", str(_exporter_port())]
        if install:
            # AKS's node-problem-detector raises its GPU conditions where AKS installs the driver.
            step += ["--npd-conditions", ",".join(catalog.load("gpu_gate")["npdConditions"]["cordon"])]
    container = _gate_container(spec, "watchdog", step)
    container["env"] = []
    container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] != "results"]
    pod_spec = {
        "serviceAccountName": WATCHDOG,
        "automountServiceAccountToken": False,
        "restartPolicy": "Never",
        "nodeSelector": placement["nodeSelector"],
        "tolerations": placement["tolerations"],
        "containers": [container],
        "volumes": [v for v in _pod_volumes() if v["name"] != "results"],
    }
    return {
        "metadata": metadata(WATCHDOG, namespace),
        "spec": {
            "schedule": "*/5 * * * *",
            "timeZone": "Etc/UTC",
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": 240,
            "successfulJobsHistoryLimit": 1,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {"spec": {"backoffLimit": 1, "activeDeadlineSeconds": 240, "ttlSecondsAfterFinished": 3600,
                                     "template": {"metadata": {"labels": labels(WATCHDOG)}, "spec": pod_spec}}},
        },
    }


def recheck_groups(spec: ClusterSpec) -> dict[str, tuple[list[PoolTarget], int, bool]]:
    """Re-check CronJob name -> (agent pools, GPUs per node, GPU Operator pools?). Pools whose nodes
    advertise as many GPUs and share a driver mode share one CronJob (a pod takes a whole node)."""
    groups: dict[str, tuple[list[PoolTarget], int, bool]] = {}
    operator = operator_targets(spec)
    for suffix, group in _by_fabric([*device_plugin_targets(spec), *operator]).items():
        for target in group:
            gpus = target.pool.gpus_per_node
            if not gpus:
                continue
            is_operator = target in operator
            name = f"{RECHECK}-{gpus}gpu" + ("-operator" if is_operator else "") + suffix
            groups.setdefault(name, ([], gpus, is_operator))[0].append(target)
    return groups


def recheck_cronjob(spec: ClusterSpec, namespace: str, name: str, targets: list[PoolTarget],
                    gpus: int, operator: bool) -> dict[str, Any]:
    """Re-checks of pools with `gpus` per node: pods that each take all GPUs of an idle, admitted
    node; nodesPerPool nodes per spec pool per run."""
    recheck = spec.gpu_health.recheck
    gate = spec.gpu_health.gate
    pools = len({id(target.pool) for target in targets})
    nodes = min(recheck.nodes_per_pool * pools, MAX_RECHECK_PODS)
    pod_labels = {**labels(RECHECK), "aksgpu.io/recheck": name}
    shapes = [physical_gpus(target) for target in targets]
    physical = max(found for found, _ in shapes)
    vcpus = min((cpus for _, cpus in shapes if cpus), default=None)
    # Nodes the gate admitted; without the gate no node carries the label, and every node counts.
    admitted = ([admitted_by_gate()] if gate.enabled
                else [{"key": HEALTH_LABEL, "operator": "NotIn", "values": ["failed"]}])
    pod_spec: dict[str, Any] = {
        "serviceAccountName": SERVICE_ACCOUNT,
        "automountServiceAccountToken": False,
        "restartPolicy": "Never",
        "priorityClassName": RECHECK,
        "affinity": {
            **pool_affinity(targets, *admitted),
            # One re-check per node.
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": {"aksgpu.io/recheck": name}},
                "topologyKey": "kubernetes.io/hostname"}]},
        },
        "tolerations": pool_tolerations(targets),
        "initContainers": [_check_container(spec, "recheck", gpus, vcpus, request_gpus=True,
                                            physical=physical, rdma=rdma_request(targets))],
        "containers": [_gate_container(spec, "verdict", ["verdict", "--results", RESULTS, "--recheck",
                                                         *verdict_args(spec, namespace)])],
        "volumes": _pod_volumes(check=True),
        "securityContext": CHECK_POD_SECURITY,
    }
    if operator:
        pod_spec["runtimeClassName"] = "nvidia"
    return {
        "metadata": metadata(name, namespace, annotations=policy_exceptions(merged_exceptions(
            CHECK_EXCEPTIONS, HOST_LOG_EXCEPTION))),
        "spec": {
            "schedule": recheck.schedule,
            "timeZone": "Etc/UTC",
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": 600,
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {"spec": {
                "parallelism": nodes,
                "completions": nodes,
                "backoffLimit": 0,
                # Pods that find no idle node stay pending until this ends the run.
                "activeDeadlineSeconds": gate.timeout_seconds + 1800,
                "ttlSecondsAfterFinished": 86400,
                "template": {"metadata": {"labels": pod_labels}, "spec": pod_spec},
            }},
        },
    }


def node_gate_rbac(namespace: str, gate_daemonsets: list[str]) -> list[dict[str, Any]]:
    """Service accounts and their rights, each exactly what its steps do. Both get and patch nodes
    (taint, label, annotate, cordon), create Events about them (in "default", where Events about
    Nodes go) and update the record ConfigMap (by name); the gate also reads its own DaemonSets
    (their creation time); the watchdog lists nodes
    (those pending too long, a pool's failed nodes) and pods (the DCGM exporters it reads, and
    whether a node's GPUs are in use before it is gated again). As manifests with their kind."""
    objects: list[dict[str, Any]] = []
    for account, node_verbs, pods in ((SERVICE_ACCOUNT, ["get", "patch"], False),
                                      (WATCHDOG, ["get", "list", "patch"], True)):
        rules = [{"apiGroups": [""], "resources": ["nodes"], "verbs": node_verbs}]
        if pods:
            rules.append({"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]})
        objects.append({"kind": "ServiceAccount", "metadata": metadata(account, namespace),
                        "automountServiceAccountToken": False})
        objects.append({"kind": "ClusterRole", "metadata": metadata(account), "rules": rules})
        objects.append({"kind": "ClusterRoleBinding", "metadata": metadata(account),
                        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": account},
                        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]})
        role_rules = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "update"],
                       "resourceNames": [node_gate.RECORD_CONFIGMAP]}]
        if account == SERVICE_ACCOUNT and gate_daemonsets:
            role_rules.append({"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get"],
                               "resourceNames": sorted(gate_daemonsets)})
        objects.append({"kind": "Role", "metadata": metadata(account, namespace), "rules": role_rules})
        objects.append({"kind": "RoleBinding", "metadata": metadata(account, namespace),
                        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
                        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]})
        # Events about Nodes must be in "default" (node_gate.NODE_EVENT_NAMESPACE).
        events = f"{account}-events"
        objects.append({"kind": "Role", "metadata": metadata(events, node_gate.NODE_EVENT_NAMESPACE),
                        "rules": [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]})
        objects.append({"kind": "RoleBinding", "metadata": metadata(events, node_gate.NODE_EVENT_NAMESPACE),
                        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": events},
                        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]})
    return objects


def record_configmap(namespace: str) -> dict[str, Any]:
    """Where every verdict is recorded: the history the breaker reads, and that outlives the nodes
    it names. Pulumi creates it without data and never sets any (node_gate.py writes it with
    get-modify-put), so no server-side apply of an up owns, resets or conflicts with the history."""
    return {"metadata": metadata(node_gate.RECORD_CONFIGMAP, namespace)}


NODE_POLICY = "aksgpu-gpu-gate-node-changes"


def node_change_policy(namespace: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A ValidatingAdmissionPolicy that narrows what the gate's service accounts may do to a node
    beyond what RBAC can say (patch is all or nothing): only the gate's taint, the
    aksgpu.io/gpu-health labels and annotations and the GPU Operator's operand switches may
    change, a node may be cordoned but never uncordoned, and the gate touches only the node its
    pod runs on (Kubernetes 1.32+ puts that node in the pod-bound token)."""
    gate_user = f"system:serviceaccount:{namespace}:{SERVICE_ACCOUNT}"
    watchdog_user = f"system:serviceaccount:{namespace}:{WATCHDOG}"
    acceptance_user = f"system:serviceaccount:{namespace}:{acceptance.ACCEPTANCE}"
    node_name = NODE_NAME_CLAIM
    held = ", ".join(f"'{label}'" for label in node_gate.HELD_OPERAND_LABELS)
    gate_labels = f"k.startsWith('{HEALTH_LABEL}') || k in [{held}]"
    gate_annotations = f"k.startsWith('{HEALTH_LABEL}') || k == '{node_gate.SCALE_DOWN_DISABLED_ANNOTATION}'"
    variables = [
        *NODE_METADATA_VARIABLES,
        {"name": "oldTaints", "expression": "has(oldObject.spec.taints) ? oldObject.spec.taints.filter(t, t.key != "
                                            f"'{node_gate.GATE_TAINT_KEY}') : []"},
        {"name": "newTaints", "expression": "has(object.spec.taints) ? object.spec.taints.filter(t, t.key != "
                                            f"'{node_gate.GATE_TAINT_KEY}') : []"},
    ]

    def unchanged_but(field: str, allowed: str) -> str:
        new, old = f"variables.new{field}", f"variables.old{field}"
        return (f"{new}.all(k, {allowed} || (k in {old} && {old}[k] == {new}[k])) "
                f"&& {old}.all(k, {allowed} || k in {new})")

    return node_update_policy(
        NODE_POLICY, {"name": "gate-service-accounts",
                      "expression": f"request.userInfo.username in ['{gate_user}', '{watchdog_user}', "
                                    f"'{acceptance_user}']"},
        variables, [
            {"expression": "variables.newTaints == variables.oldTaints",
             "message": "the GPU gate may change only its own startup taint"},
            {"expression": unchanged_but("Labels", gate_labels),
             "message": "the GPU gate may change only the aksgpu.io/gpu-health labels and the GPU Operator's "
                        "device-plugin and dcgm-exporter switches"},
            {"expression": unchanged_but("Annotations", gate_annotations),
             "message": "the GPU gate may change only the aksgpu.io/gpu-health annotations and the cluster "
                        "autoscaler's scale-down-disabled"},
            {"expression": "!(has(oldObject.spec.unschedulable) && oldObject.spec.unschedulable) || "
                           "(has(object.spec.unschedulable) && object.spec.unschedulable)",
             "message": "the GPU gate may cordon a node, never uncordon one"},
            {"expression": f"request.userInfo.username != '{gate_user}' || !has(request.userInfo.extra) || "
                           f"!({node_name} in request.userInfo.extra) || "
                           f"request.userInfo.extra[{node_name}][0] == object.metadata.name",
             "message": "the GPU gate may change only the node its pod runs on"},
        ])


class GpuHealth(pulumi.ComponentResource):
    """DCGM exporter, scrape configuration and alert rules; the node gate and re-checks."""

    def __init__(self, name: str, args: GpuHealthArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aksgpu:index:GpuHealth", name, None, opts)
        spec = args.spec
        health = spec.gpu_health
        ns = args.system_namespace
        device_plugin_pools = device_plugin_targets(spec)
        operator_pools = operator_targets(spec)
        k8s_opts = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[args.namespace_resource])
        after_operator = pulumi.ResourceOptions(
            parent=self, provider=args.provider,
            depends_on=[args.namespace_resource, *([args.gpu_operator] if args.gpu_operator else [])])
        if not device_plugin_pools and not operator_pools:
            self.register_outputs({})
            return
        scraper = health.effective_scraper(spec.monitoring.managed_prometheus)
        if health.metrics.enabled and device_plugin_pools:
            config = k8s.core.v1.ConfigMap(
                f"{name}-dcgm-metrics", metadata=metadata(DCGM_METRICS_CONFIG, ns),
                data={"dcgm-metrics.csv": catalog.text("dcgm_metrics.csv")}, opts=k8s_opts)
            manifest = exporter_daemonset(spec, ns)
            k8s.apps.v1.DaemonSet(f"{name}-dcgm-exporter", metadata=manifest["metadata"], spec=manifest["spec"],
                                  opts=pulumi.ResourceOptions.merge(k8s_opts, pulumi.ResourceOptions(
                                      depends_on=[config])))
        if scraper == "managedPrometheus":
            monitor = pod_monitor(spec, ns)
            k8s.apiextensions.CustomResource(
                f"{name}-pod-monitor", api_version=monitor["apiVersion"], kind=monitor["kind"],
                metadata=monitor["metadata"], spec=monitor["spec"], opts=after_operator)
            if health.alerts.enabled and args.prometheus_workspace_id is not None:
                self._azure_rule_group(name, spec, args)
        elif scraper == "bundled":
            chart = catalog.load("in_cluster")["prometheus"]
            k8s.helm.v3.Release(
                f"{name}-prometheus", name="aksgpu-prometheus", chart=chart["chart"], version=chart["version"],
                repository_opts={"repo": chart["repository"]}, namespace=ns,
                values=bundled_prometheus_values(spec, ns), opts=k8s_opts)
        # The watchdog runs whatever the gate's setting: with the gate off it releases the nodes the
        # gate left tainted, and critical passive signals still cordon.
        self._node_gate(name, spec, args)
        self.register_outputs({})

    def _acceptance(self, name: str, spec: ClusterSpec, args: GpuHealthArgs, ready: pulumi.ResourceOptions) -> None:
        _acceptance_resources(self, name, spec, args, ready)

    def _azure_rule_group(self, name: str, spec: ClusterSpec, args: GpuHealthArgs) -> None:
        actions = [{"action_group_id": group} for group in spec.gpu_health.alerts.action_group_ids]
        rules = [{
            "alert": rule["alert"],
            "expression": rule["expression"],
            # A rule with no hold time fires on its first evaluation.
            **({"for_": f"PT{_minutes(rule['for'])}M"} if _minutes(rule["for"]) else {}),
            "severity": rule["severity"],
            "annotations": {"reason": rule["reason"]},
            "labels": {"aksgpu_rule": rule["alert"]},
            "enabled": True,
            "resolve_configuration": {"auto_resolved": True, "time_to_resolve": "PT10M"},
            **({"actions": actions} if actions else {}),
        } for rule in alert_rules()]
        alertsmanagement.PrometheusRuleGroup(
            f"{name}-gpu-alerts",
            rule_group_name=f"aksgpu-gpu-health-{spec.name}",
            resource_group_name=args.resource_group_name,
            location=args.prometheus_location or spec.location,
            scopes=[args.prometheus_workspace_id],  # type: ignore[list-item]  # set when monitoring is on
            cluster_name=spec.name,
            description="aksgpu: GPU conditions that should take a node out (aksgpu/catalog/gpu_alerts.yaml)",
            enabled=True,
            interval="PT1M",
            rules=rules,  # type: ignore[arg-type]  # plain dicts for the SDK's Args
            tags=args.tags or None,
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _node_gate(self, name: str, spec: ClusterSpec, args: GpuHealthArgs) -> None:
        ns = args.system_namespace
        base = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[args.namespace_resource])
        health = spec.gpu_health
        daemonsets = gate_daemonsets(spec, ns) if health.gate.enabled else []
        created = declare_rbac(
            node_gate_rbac(ns, [d["metadata"]["name"] for d in daemonsets]),
            lambda obj: f"{name}-{obj['metadata']['name'].removeprefix('aksgpu-')}-{obj['kind'].lower()}", base,
            chained=True)
        script = k8s.core.v1.ConfigMap(f"{name}-gate-script", metadata=metadata(SCRIPT_CONFIG, ns),
                                       data={"node_gate.py": program_source(node_gate)}, opts=base)
        record = record_configmap(ns)
        # Created empty; node_gate.py owns its data from then on.
        created.append(k8s.core.v1.ConfigMap(f"{name}-gate-record", metadata=record["metadata"],
                                             opts=pulumi.ResourceOptions.merge(base, pulumi.ResourceOptions(
                                                 ignore_changes=["data"]))))
        policy, policy_binding = node_change_policy(ns)
        admission = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
            f"{name}-node-policy", metadata=policy["metadata"], spec=policy["spec"],
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider))
        created.append(k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
            f"{name}-node-policy-binding", metadata=policy_binding["metadata"], spec=policy_binding["spec"],
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[admission])))
        ready = pulumi.ResourceOptions.merge(base, pulumi.ResourceOptions(depends_on=[*created, script]))
        for manifest in daemonsets:
            k8s.apps.v1.DaemonSet(f"{name}-{manifest['metadata']['name'].removeprefix('aksgpu-gpu-')}",
                                  metadata=manifest["metadata"], spec=manifest["spec"], opts=ready)
        watchdog = gate_watchdog(spec, ns)
        k8s.batch.v1.CronJob(f"{name}-gate-watchdog", metadata=watchdog["metadata"], spec=watchdog["spec"],
                             opts=ready)
        self._acceptance(name, spec, args, ready)
        if health.recheck.enabled:
            priority = k8s.scheduling.v1.PriorityClass(
                f"{name}-recheck-priority", metadata=metadata(RECHECK), value=RECHECK_PRIORITY,
                preemption_policy="Never", global_default=False,
                description="aksgpu GPU re-checks: run only on idle nodes, never preempt, never trigger a scale-up",
                opts=pulumi.ResourceOptions(parent=self, provider=args.provider))
            for job_name, (targets, gpus, is_operator) in recheck_groups(spec).items():
                manifest = recheck_cronjob(spec, ns, job_name, targets, gpus, is_operator)
                k8s.batch.v1.CronJob(f"{name}-{job_name.removeprefix('aksgpu-gpu-')}", metadata=manifest["metadata"],
                                     spec=manifest["spec"], opts=pulumi.ResourceOptions.merge(
                                         ready, pulumi.ResourceOptions(depends_on=[priority])))


def _acceptance_resources(owner: pulumi.Resource, name: str, spec: ClusterSpec, args: GpuHealthArgs,
                          ready: pulumi.ResourceOptions) -> None:
    """The cross-node acceptance of InfiniBand pools (fabric_acceptance_objects.py), when a pool needs it."""
    ns = args.system_namespace
    targets = [*device_plugin_targets(spec), *operator_targets(spec)]
    if not acceptance.acceptance_targets(targets, spec):
        return
    queued = spec.gang_scheduling.enabled
    opts = pulumi.ResourceOptions.merge(ready, pulumi.ResourceOptions(parent=owner))
    created = declare_rbac(
        acceptance.rbac(ns),
        lambda obj: f"{name}-{obj['metadata']['name'].removeprefix('aksgpu-')}-{obj['kind'].lower()}",
        opts)
    programs = acceptance.program_config_map(spec, ns, targets, queued)
    created.append(k8s.core.v1.ConfigMap(f"{name}-acceptance-programs", metadata=programs["metadata"],
                                         data=programs["data"], opts=opts))
    for topology in acceptance.topology_config_maps(spec, ns, targets):
        created.append(k8s.core.v1.ConfigMap(f"{name}-{topology['metadata']['name'].removeprefix('aksgpu-')}",
                                             metadata=topology["metadata"], data=topology["data"], opts=opts))
    service = acceptance.headless_service(ns)
    created.append(k8s.core.v1.Service(f"{name}-acceptance-service", metadata=service["metadata"],
                                       spec=service["spec"], opts=opts))
    priority = acceptance.priority_class()
    created.append(k8s.scheduling.v1.PriorityClass(
        f"{name}-acceptance-priority", metadata=priority["metadata"], value=priority["value"],
        preemption_policy=priority["preemptionPolicy"], global_default=False, description=priority["description"],
        opts=pulumi.ResourceOptions(parent=owner, provider=args.provider)))
    # With gang scheduling, the runs' ClusterQueue and LocalQueue are GangScheduling's (after Kueue's CRDs).
    cronjob = acceptance.controller_cronjob(spec, ns, acceptance_breaker_args(spec, ns), SCRIPT_CONFIG)
    k8s.batch.v1.CronJob(f"{name}-acceptance", metadata=cronjob["metadata"], spec=cronjob["spec"],
                         opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=created)))


def acceptance_breaker_args(spec: ClusterSpec, namespace: str) -> list[str]:
    """The failure bound and breaker of gpuHealth.gate, as the acceptance pass reads them."""
    gate = spec.gpu_health.gate
    breaker = gate.breaker
    return ["--namespace", namespace, "--keep-failed", str(gate.keep_failed_nodes),
            *(["--no-breaker"] if not breaker.enabled else []),
            "--breaker-share", f"{breaker.failure_share:g}", "--breaker-window-minutes", str(breaker.window_minutes),
            "--breaker-min-nodes", str(breaker.min_nodes)]
