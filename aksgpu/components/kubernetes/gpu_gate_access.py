"""What the node gate may do: its service account's rights (nodes, its own DaemonSets, the record
ConfigMap, Events about Nodes), the record ConfigMap Pulumi creates empty, and the admission policy
that narrows every node change by the gate's service accounts to the gate's own labels,
annotations, taint and cordon."""

from __future__ import annotations

from typing import Any

from aksgpu.components.kubernetes import fabric_acceptance_objects as acceptance
from aksgpu.components.kubernetes.gpu_gate import SERVICE_ACCOUNT
from aksgpu.components.kubernetes.gpu_gate_jobs import WATCHDOG
from aksgpu.components.kubernetes.objects import (
    GATE_TAINT_VARIABLES,
    HEALTH_LABEL,
    NODE_METADATA_VARIABLES,
    NODE_NAME_CLAIM,
    metadata,
    node_update_policy,
    unchanged_but,
)
from aksgpu.node import node_api, node_verdicts


def node_gate_rbac(namespace: str, gate_daemonsets: list[str]) -> list[dict[str, Any]]:
    """Service accounts and their rights, each exactly what its steps do. Both get and patch nodes
    (taint, label, annotate, cordon), create Events about them (in "default", where Events about
    Nodes go) and update the record ConfigMap (by name); the gate also reads its own DaemonSets
    (their creation time); the watchdog lists nodes (those pending too long, a pool's failed nodes)
    and pods (the DCGM exporters it reads, and whether a node's GPUs are in use before it is gated
    again). As manifests with their kind."""
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
                       "resourceNames": [node_verdicts.RECORD_CONFIGMAP]}]
        if account == SERVICE_ACCOUNT and gate_daemonsets:
            role_rules.append({"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get"],
                               "resourceNames": sorted(gate_daemonsets)})
        objects.append({"kind": "Role", "metadata": metadata(account, namespace), "rules": role_rules})
        objects.append({"kind": "RoleBinding", "metadata": metadata(account, namespace),
                        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
                        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]})
        # Events about Nodes must be in "default" (node_verdicts.NODE_EVENT_NAMESPACE).
        events = f"{account}-events"
        objects.append({"kind": "Role", "metadata": metadata(events, node_verdicts.NODE_EVENT_NAMESPACE),
                        "rules": [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]})
        objects.append({"kind": "RoleBinding", "metadata": metadata(events, node_verdicts.NODE_EVENT_NAMESPACE),
                        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": events},
                        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]})
    return objects


def record_configmap(namespace: str) -> dict[str, Any]:
    """Where every verdict is recorded: the history the breaker reads, and that outlives the nodes
    it names. Pulumi creates it without data and never sets any (node_gate.py writes it with
    get-modify-put), so no server-side apply of an up owns, resets or conflicts with the history."""
    return {"metadata": metadata(node_verdicts.RECORD_CONFIGMAP, namespace)}


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
    held = ", ".join(f"'{label}'" for label in node_api.HELD_OPERAND_LABELS)
    gate_labels = f"k.startsWith('{HEALTH_LABEL}') || k in [{held}]"
    gate_annotations = f"k.startsWith('{HEALTH_LABEL}') || k == '{node_api.SCALE_DOWN_DISABLED_ANNOTATION}'"
    variables = [
        *NODE_METADATA_VARIABLES,
        *GATE_TAINT_VARIABLES,
    ]

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
