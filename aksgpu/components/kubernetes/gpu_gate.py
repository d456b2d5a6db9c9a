"""The node gate's pods (GpuHealth's active side): the gate DaemonSets per pool shape and fabric,
their containers (node_gate.py's steps, from the gate's ConfigMap, around the check's image and
command), the check's resources, volumes and policy exceptions, and the arguments the verdict and
the cross-node acceptance take."""

from __future__ import annotations

from typing import Any

import hashlib
import json
import math

from aksgpu import catalog
from aksgpu.components.kubernetes import fabric_acceptance_objects as acceptance
from aksgpu.components.kubernetes.gpu_software import device_plugin_targets, operator_targets
from aksgpu.components.kubernetes.objects import (
    HEALTH_LABEL,
    NODE_PROGRAM_SECURITY_CONTEXT,
    PoolTarget,
    api_token_mount,
    api_token_volume,
    daemonset,
    pool_affinity,
    pool_tolerations,
)
from aksgpu.node import node_api, node_gate, node_passive, node_verdicts, node_watchdog
from aksgpu.spec import ClusterSpec
from aksgpu.spec.fabric import fabric_profile


GATE = "aksgpu-gpu-gate"


SERVICE_ACCOUNT = "aksgpu-gpu-health"


SCRIPT_CONFIG = "aksgpu-node-gate"
# The gate's files, the keys of SCRIPT_CONFIG: node_gate.py, the entry point of every step, and the
# sibling files it imports.
GATE_PROGRAM = (node_gate, node_api, node_verdicts, node_passive, node_watchdog)


RESULTS = "/var/run/aksgpu"
SCRIPT_DIR = "/opt/aksgpu"
# Runs the check with a time limit (killed a minute after it ignores SIGTERM) and records its exit
# code for the verdict step; a node the pending step chose not to check (node_gate.py) is skipped.
CHECK_WRAPPER = (
    'if [ -f "$AKSGPU_RESULTS/skip" ]; then echo "aksgpu: no check needed on this node"; exit 0; fi; '
    'timeout -k 60 "$AKSGPU_TIMEOUT_SECONDS" "$@"; code=$?; echo "$code" > "$AKSGPU_RESULTS/exit-code"; '
    'echo "aksgpu: check exited with $code"; exit 0'
)


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


def _script_mount() -> dict[str, Any]:
    return {"name": "node-gate", "mountPath": SCRIPT_DIR, "readOnly": True}


def _gate_container(spec: ClusterSpec, name: str, step_args: list[str], token: bool = True) -> dict[str, Any]:
    """A container running one node_gate.py step, with the service account's token when it changes
    the node (only those containers see it: the pod does not automount it, so the check never
    holds node rights)."""
    mounts = [_script_mount(), {"name": "results", "mountPath": RESULTS}]
    if token:
        mounts.append(api_token_mount())
    return {
        "name": name,
        "image": spec.gpu_health.gate.helper_image,
        "command": ["python3", f"{SCRIPT_DIR}/node_gate.py", *step_args],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "securityContext": NODE_PROGRAM_SECURITY_CONTEXT,
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
        api_token_volume(),
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
            if spec.promotion is not None:
                # The node shows no GPU Operator version (node_verdicts.py): the verdict records the chart's.
                verdict["env"].append({"name": node_verdicts.GPU_OPERATOR_VERSION_ENV,
                                       "value": spec.gpu_software.gpu_operator.chart_version})
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
    size = target.pool.size
    return (size.gpus if size else 0) or UNKNOWN_SIZE_GPUS, size.vcpus if size else None


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
