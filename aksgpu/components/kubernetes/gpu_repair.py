"""The repair loop's Kubernetes objects (gpuHealth.repair): its service account and least rights
(read-only in mode dry-run), its program's ConfigMap (node_repair.py and the files it imports), the
CronJob on the system pool, and its NetworkPolicy. Its Azure identity and role are
components/repair_identity.py's; the loop itself is aksgpu/node/node_repair.py."""

from __future__ import annotations

from typing import Any

from aksgpu.components.kubernetes.gpu_software import device_plugin_targets, operator_targets
from aksgpu.components.kubernetes.objects import (
    GATE_TAINT_VARIABLES,
    NODE_METADATA_VARIABLES,
    metadata,
    node_program_cronjob,
    node_update_policy,
    program_files,
    unchanged_but,
)
from aksgpu.node import node_api, node_repair, node_verdicts, repair_azure, repair_decision
from aksgpu.spec import ClusterSpec

REPAIR = "aksgpu-gpu-repair"
PROGRAM_CONFIG = "aksgpu-gpu-repair-program"
PROGRAM = (node_repair, repair_decision, repair_azure, node_api, node_verdicts)
PROGRAM_DIR = "/opt/aksgpu-repair"
SCHEDULE = "*/5 * * * *"
# Entra Workload ID: the service account names the identity, the pod opts in with this label, and
# the webhook mounts the federated token (https://learn.microsoft.com/en-us/azure/aks/workload-identity-overview,
# checked 2026-11-27).
CLIENT_ID_ANNOTATION = "azure.workload.identity/client-id"
USE_LABEL = "azure.workload.identity/use"
NODE_POLICY_NAME = "aksgpu-gpu-repair-node-changes"


def repair_pools(spec: ClusterSpec) -> list[str]:
    """The agent pools the loop repairs: every GPU pool the gate covers."""
    return sorted({target.name for target in [*device_plugin_targets(spec), *operator_targets(spec)]})


def acts(spec: ClusterSpec) -> bool:
    repair = spec.gpu_health.repair
    return repair.enabled and repair.mode == "act"


def repair_args(spec: ClusterSpec, namespace: str, cluster_id: Any = None) -> list[Any]:
    """The program's arguments; in mode act, the cluster's resource ID (an Output in the program):
    nodes are deleted through its agent pools' deleteMachines."""
    repair = spec.gpu_health.repair
    breaker = repair.breaker
    return ["--pools", ",".join(repair_pools(spec)), "--namespace", namespace,
            "--diagnosis-window-minutes", str(repair.diagnosis_window_minutes),
            "--max-unavailable-percent", str(repair.max_unavailable_percent),
            "--reimage-attempts", str(repair.reimage_attempts),
            "--breaker-pool-percent", str(breaker.pool_percent),
            "--breaker-cluster-percent", str(breaker.cluster_percent),
            "--breaker-window-minutes", str(breaker.window_minutes),
            "--breaker-min-failures", str(breaker.min_failures),
            "--drain-event-types", ",".join(repair.drain_on_events),
            *((["--cluster-id", cluster_id] if cluster_id is not None else []) if acts(spec) else ["--dry-run"])]


def repair_rbac(spec: ClusterSpec, namespace: str, client_id: Any = None) -> list[dict[str, Any]]:
    """The service account and its rights, as manifests with their kind. Both modes read the GPU
    nodes, the pods on them, PodDisruptionBudgets and the gate's record; mode act also patches nodes
    (cordon, its marks, back under the gate), evicts pods, writes Events about Nodes (in "default")
    and the record."""
    act = acts(spec)
    account = metadata(REPAIR, namespace, annotations={CLIENT_ID_ANNOTATION: client_id} if act and client_id else None)
    rules = [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", *(["patch"] if act else [])]},
             {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
             {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["list"]}]
    if act:
        rules.append({"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]})
    binding = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": REPAIR}
    subjects = [{"kind": "ServiceAccount", "name": REPAIR, "namespace": namespace}]
    objects: list[dict[str, Any]] = [
        {"kind": "ServiceAccount", "metadata": account, "automountServiceAccountToken": False},
        {"kind": "ClusterRole", "metadata": metadata(REPAIR), "rules": rules},
        {"kind": "ClusterRoleBinding", "metadata": metadata(REPAIR), "roleRef": binding, "subjects": subjects},
        {"kind": "Role", "metadata": metadata(REPAIR, namespace), "rules": [{
            "apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", *(["update"] if act else [])],
            "resourceNames": [node_verdicts.RECORD_CONFIGMAP]}]},
        {"kind": "RoleBinding", "metadata": metadata(REPAIR, namespace),
         "roleRef": {**binding, "kind": "Role"}, "subjects": subjects},
    ]
    if act:
        events = f"{REPAIR}-events"
        objects += [
            {"kind": "Role", "metadata": metadata(events, node_verdicts.NODE_EVENT_NAMESPACE),
             "rules": [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]},
            {"kind": "RoleBinding", "metadata": metadata(events, node_verdicts.NODE_EVENT_NAMESPACE),
             "roleRef": {**binding, "kind": "Role", "name": events}, "subjects": subjects}]
    return objects


def program_config_map(namespace: str) -> dict[str, Any]:
    return {"metadata": metadata(PROGRAM_CONFIG, namespace), "data": program_files(*PROGRAM)}


def repair_cronjob(spec: ClusterSpec, namespace: str, cluster_id: Any = None) -> dict[str, Any]:
    """The loop's pass every 5 minutes on the system pool, one at a time, under the gate's helper image."""
    return node_program_cronjob(
        REPAIR, namespace, container="repair", image=spec.gpu_health.gate.helper_image,
        command=["python3", f"{PROGRAM_DIR}/node_repair.py", *repair_args(spec, namespace, cluster_id)],
        programs={"name": "program", "configMap": {"name": PROGRAM_CONFIG}}, program_dir=PROGRAM_DIR,
        schedule=SCHEDULE, starting_deadline_seconds=240, active_deadline_seconds=280, successful_jobs_history=3,
        ttl_seconds_after_finished=86400, extra_pod_labels={USE_LABEL: "true"} if acts(spec) else None)


def repair_network_policy(namespace: str) -> dict[str, Any]:
    """No ingress; egress only to DNS and HTTPS (the API server, Entra ID, Azure Resource Manager)."""
    return {"metadata": metadata(f"{REPAIR}-egress", namespace), "spec": {
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": REPAIR}},
        "policyTypes": ["Ingress", "Egress"],
        "egress": [{"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
                   {"ports": [{"protocol": "TCP", "port": 443}]}]}}


def repair_node_policy(namespace: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """What the loop's service account may change on a node, beyond RBAC's all-or-nothing patch:
    its own aksgpu.io/gpu-repair annotations, the gate's labels, annotations and taint (a reimaged
    node goes back under the gate), the autoscaler's scale-down-disabled, and the cordon."""
    user = f"system:serviceaccount:{namespace}:{REPAIR}"
    allowed_labels = f"k.startsWith('{node_api.HEALTH_LABEL}')"
    allowed_annotations = (f"k.startsWith('{node_api.HEALTH_LABEL}') || k.startsWith('{node_repair.REPAIR_ANNOTATION}')"
                           f" || k == '{node_api.SCALE_DOWN_DISABLED_ANNOTATION}'")
    variables = [
        *NODE_METADATA_VARIABLES,
        *GATE_TAINT_VARIABLES,
    ]

    return node_update_policy(
        NODE_POLICY_NAME, {"name": "repair-service-account", "expression": f"request.userInfo.username == '{user}'"},
        variables, [
            {"expression": "variables.newTaints == variables.oldTaints",
             "message": "the GPU repair loop may change only the gate's startup taint"},
            {"expression": unchanged_but("Labels", allowed_labels),
             "message": "the GPU repair loop may change only the aksgpu.io/gpu-health labels"},
            {"expression": unchanged_but("Annotations", allowed_annotations),
             "message": "the GPU repair loop may change only the aksgpu.io/gpu-health and aksgpu.io/gpu-repair "
                        "annotations and the cluster autoscaler's scale-down-disabled"},
        ])
