"""The node gate's CronJobs: the watchdog (node_gate.py's periodic pass over the GPU nodes, on the
system pool, with its pending limit from the startup table) and the re-checks of idle admitted
nodes, one CronJob per node shape, at a priority that never preempts and never scales."""

from __future__ import annotations

from typing import Any

import json
import math

from aksgpu import catalog
from aksgpu.components.kubernetes.gpu_gate import (
    CHECK_EXCEPTIONS,
    CHECK_POD_SECURITY,
    HOST_LOG_EXCEPTION,
    RESULTS,
    SCRIPT_CONFIG,
    SCRIPT_DIR,
    SERVICE_ACCOUNT,
    _by_fabric,
    _check_container,
    _gate_container,
    _pod_volumes,
    acceptance_args,
    merged_exceptions,
    physical_gpus,
    rdma_request,
    verdict_args,
)
from aksgpu.components.kubernetes.gpu_metrics import _exporter_port, cordon_conditions, exporter_namespaces
from aksgpu.components.kubernetes.gpu_software import device_plugin_targets, operator_targets
from aksgpu.components.kubernetes.objects import (
    HEALTH_LABEL,
    PoolTarget,
    admitted_by_gate,
    labels,
    metadata,
    node_program_cronjob,
    policy_exceptions,
    pool_affinity,
    pool_tolerations,
    secured_pod,
)
from aksgpu.spec import ClusterSpec
from aksgpu.spec.gpu_startup import gate_startup_minutes


RECHECK = "aksgpu-gpu-recheck"


WATCHDOG = "aksgpu-gpu-gate-watchdog"
# Minutes on top of the startup table's figures (gate_startup_minutes: node boot, on GPU Operator
# pools the driver and toolkit, the check image's pull) before the watchdog fails a pending node:
# most of those figures are labelled assumptions, and failing a healthy node that was merely slow
# costs a whole VM.
GATE_STARTUP_MARGIN_MINUTES = 10


# Below the autoscaler's expendable cutoff: a pending re-check never triggers a scale-up.
RECHECK_PRIORITY = catalog.limit("autoscalerExpendablePriorityCutoff") - 10
MAX_RECHECK_PODS = 100  # per run and CronJob, however many pools share it


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
    # The gate's program, without the node's name: the pass runs on the system pool over every node.
    return node_program_cronjob(
        WATCHDOG, namespace, container="watchdog", image=health.gate.helper_image,
        command=["python3", f"{SCRIPT_DIR}/node_gate.py", *step], env=[], memory=("32Mi", "128Mi"),
        programs={"name": "node-gate", "configMap": {"name": SCRIPT_CONFIG}}, program_dir=SCRIPT_DIR,
        schedule="*/5 * * * *", starting_deadline_seconds=240, active_deadline_seconds=240, backoff_limit=1)


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
                "template": {"metadata": {"labels": pod_labels}, "spec": secured_pod(pod_spec)},
            }},
        },
    }
