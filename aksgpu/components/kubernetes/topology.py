"""NodeTopology: labels every InfiniBand GPU node with its Azure placement group.

Azure puts no topology labels on AKS nodes. node_topology.py (shipped as a ConfigMap with
node_api.py, run by the gate's Python image) reads the VM's placement group from IMDS and writes
aksgpu.io/placement-group on its own node: the InfiniBand domain Kueue's Topology uses
(gang_scheduling.py). A DaemonSet runs it on the InfiniBand pools' nodes that lack the label; once
labelled, the node leaves the DaemonSet's node affinity and its pod goes away.

- On the host network: IMDS answers the VM's primary IP, and AKS's IMDS restriction (preview)
  blocks only pods off the host network (aksgpu/catalog/topology.yaml, imdsFromPods).
- It tolerates the gate's startup taint and the pools' taints: the label is written while the node
  is still under check, so it is there when the gate admits the node.
- Least privilege: its service account may get and patch nodes (RBAC cannot say less), and the
  admission policy aksgpu-topology-node-labels narrows a patch to the labeller's label keys on the
  node its pod runs on (Kubernetes 1.32+ puts that node in the pod-bound token, as for the gate).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from aksgpu.node import node_topology
from aksgpu.components.kubernetes.rbac_resources import declare_admission_policy, declare_rbac
from aksgpu.components.kubernetes.objects import (
    NODE_METADATA_VARIABLES,
    NODE_NAME_CLAIM,
    PoolTarget,
    api_token_volume,
    daemonset,
    metadata,
    node_program_container,
    node_update_policy,
    pool_affinity,
    pool_targets,
    pool_tolerations,
    program_files,
)
from aksgpu.spec import ClusterSpec

LABELLER = "aksgpu-topology-labeller"
SCRIPT_CONFIG = "aksgpu-node-topology"
SCRIPT_DIR = "/opt/aksgpu"
NODE_POLICY = "aksgpu-topology-node-labels"
HOST_NETWORK_EXCEPTION = {
    "k8s-host-namespaces": "hostNetwork: the labeller reads the VM's placement group from Azure's Instance Metadata "
                           "Service, which answers the VM's primary IP and which AKS's IMDS restriction closes to "
                           "pods off the host network (learn.microsoft.com/azure/aks/imds-restriction). It serves "
                           "nothing and binds no port.",
}


@dataclass
class NodeTopologyArgs:
    spec: ClusterSpec
    provider: k8s.Provider
    system_namespace: str
    namespace_resource: pulumi.Resource


def labeller_targets(spec: ClusterSpec) -> list[PoolTarget]:
    """The agent pools whose nodes get topology labels: every NVIDIA GPU pool with InfiniBand
    (ND H100/H200 v5, the GB200/GB300 v6 sizes, the A100 'r' sizes)."""
    return pool_targets(spec, lambda pool: pool.gpu_vendor == "nvidia" and bool(pool.size and pool.size.infiniband))


def labeller_daemonset(spec: ClusterSpec, namespace: str) -> dict[str, Any]:
    targets = labeller_targets(spec)
    unlabelled = {"key": node_topology.PLACEMENT_GROUP_LABEL, "operator": "DoesNotExist"}
    pod = {
        "serviceAccountName": LABELLER,
        "automountServiceAccountToken": False,
        "hostNetwork": True,
        # The API server's Service address resolves through cluster DNS from the host network too.
        "dnsPolicy": "ClusterFirstWithHostNet",
        "affinity": pool_affinity(targets, unlabelled),
        # Under the gate's startup taint as well: labelled before the node is admitted.
        "tolerations": pool_tolerations(targets, gate=True),
        "priorityClassName": "system-node-critical",
        "containers": [node_program_container(
            "labeller", spec.gpu_health.gate.helper_image, ["python3", f"{SCRIPT_DIR}/node_topology.py"], "script",
            SCRIPT_DIR, env=[{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
            memory=("32Mi", "64Mi"))],
        "volumes": [
            {"name": "script", "configMap": {"name": SCRIPT_CONFIG}},
            api_token_volume(),
        ],
    }
    found = daemonset(LABELLER, namespace, pod, exceptions=HOST_NETWORK_EXCEPTION)
    # It serves nothing: a new version reaches every unlabelled node at once.
    found["spec"]["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}}
    return found


def labeller_rbac(namespace: str) -> list[dict[str, Any]]:
    """The labeller's service account, and get and patch on nodes (the policy below narrows patch)."""
    return [
        {"kind": "ServiceAccount", "metadata": metadata(LABELLER, namespace), "automountServiceAccountToken": False},
        {"kind": "ClusterRole", "metadata": metadata(LABELLER),
         "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]},
        {"kind": "ClusterRoleBinding", "metadata": metadata(LABELLER),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": LABELLER},
         "subjects": [{"kind": "ServiceAccount", "name": LABELLER, "namespace": namespace}]},
    ]


def node_label_policy(namespace: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A ValidatingAdmissionPolicy that lets the labeller's service account change only its label
    keys (set or changed, never removed) on the node its pod runs on: no other label, annotation,
    taint or field. A token without the node-name claim (Kubernetes before 1.32) is refused: the
    labeller must not be able to label another node."""
    user = f"system:serviceaccount:{namespace}:{LABELLER}"
    keys = ", ".join(f"'{key}'" for key in node_topology.LABEL_KEYS)
    node_name = NODE_NAME_CLAIM
    return node_update_policy(
        NODE_POLICY, {"name": "topology-labeller", "expression": f"request.userInfo.username == '{user}'"},
        NODE_METADATA_VARIABLES, [
            {"expression": f"variables.newLabels.all(k, k in [{keys}] || (k in variables.oldLabels && "
                           "variables.oldLabels[k] == variables.newLabels[k])) && "
                           "variables.oldLabels.all(k, k in variables.newLabels)",
             "message": "the topology labeller may only set its own labels (" + ", ".join(node_topology.LABEL_KEYS)
                        + ")"},
            {"expression": "variables.newAnnotations == variables.oldAnnotations",
             "message": "the topology labeller may not change annotations"},
            {"expression": "object.spec == oldObject.spec",
             "message": "the topology labeller may not change a node's spec (taints, cordon)"},
            {"expression": f"has(request.userInfo.extra) && {node_name} in request.userInfo.extra && "
                           f"request.userInfo.extra[{node_name}][0] == object.metadata.name",
             "message": "the topology labeller may change only the node its pod runs on"},
        ])


class NodeTopology(pulumi.ComponentResource):
    """The placement-group labeller on the InfiniBand pools, its rights and its admission policy."""

    def __init__(self, name: str, args: NodeTopologyArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aksgpu:index:NodeTopology", name, None, opts)
        spec, ns = args.spec, args.system_namespace
        base = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[args.namespace_resource])
        created = declare_rbac(labeller_rbac(ns), lambda obj: f"{name}-labeller-{obj['kind'].lower()}", base,
                               chained=True)
        created.append(declare_admission_policy(f"{name}-node-policy", node_label_policy(ns),
                                                pulumi.ResourceOptions(parent=self, provider=args.provider)))
        script = k8s.core.v1.ConfigMap(f"{name}-script", metadata=metadata(SCRIPT_CONFIG, ns),
                                       data=program_files(node_topology, node_topology.node_api), opts=base)
        manifest = labeller_daemonset(spec, ns)
        k8s.apps.v1.DaemonSet(f"{name}-labeller", metadata=manifest["metadata"], spec=manifest["spec"],
                              opts=pulumi.ResourceOptions.merge(base, pulumi.ResourceOptions(
                                  depends_on=[*created, script])))
        self.register_outputs({})
