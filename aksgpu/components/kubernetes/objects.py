"""Building blocks of the Kubernetes objects aksgpu declares: names, labels, which AKS agent pools
an object targets, and the tolerations and node affinity that put it there (and nowhere else).

Pure functions over the spec; no Pulumi import. Every object is a plain mapping in Kubernetes'
own camelCase, so the plan records it exactly as the API server would receive it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from aksgpu import catalog
from aksgpu.node.node_api import GATE_TAINT_KEY, HEALTH_LABEL
from aksgpu.spec import ClusterSpec, NodePool

SYSTEM_NAMESPACE = "aksgpu-system"
GPU_OPERATOR_NAMESPACE = "gpu-operator"
KUEUE_NAMESPACE = "kueue-system"

# What AKS puts on its nodes (aksgpu/catalog/aks_limits.yaml, with sources).
AGENT_POOL_LABEL = catalog.limit("aksNode")["agentPoolLabel"]
MODE_LABEL = catalog.limit("aksNode")["modeLabel"]
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"

# The GPU node gate (aksgpu/components/kubernetes/gpu_health.py): a startup taint, so the cluster
# autoscaler counts a node under check as starting, not as ready capacity or a broken node. Its
# names live in node_gate.py, which runs on the nodes with the standard library alone.
GATE_TAINT = f"{GATE_TAINT_KEY}=pending:NoSchedule"

PART_OF = {"app.kubernetes.io/part-of": "aksgpu", "app.kubernetes.io/managed-by": "pulumi"}


def labels(name: str) -> dict[str, str]:
    """The labels of one aksgpu workload (its selector uses the name label alone)."""
    return {"app.kubernetes.io/name": name, **PART_OF}


def metadata(name: str, namespace: str | None = None, *, extra_labels: dict[str, str] | None = None,
             annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {**labels(name), **(extra_labels or {})}}
    if namespace is not None:
        meta["namespace"] = namespace
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


# An object's documented exception to a workload security policy (aksgpu/policy/workload_checks.py):
# this prefix and the rule id as the annotation's key, the reason as its value.
POLICY_EXCEPTION_PREFIX = "policy.aksgpu.io/"


def policy_exceptions(reasons: dict[str, str]) -> dict[str, str]:
    """Annotations documenting why an object is excepted from workload policies (rule id -> reason)."""
    return {POLICY_EXCEPTION_PREFIX + rule: reason for rule, reason in sorted(reasons.items())}


# Every pod aksgpu declares runs under the container runtime's default seccomp profile (the Pod
# Security Standards' restricted level requires RuntimeDefault or Localhost; Kubernetes leaves pods
# Unconfined unless the kubelet's SeccompDefault is on: https://kubernetes.io/docs/tutorials/security/seccomp/,
# checked 2026-11-27). containerd's default profile still allows the syscalls a capability a container
# adds (SYS_ADMIN) unlocks.
RUNTIME_DEFAULT_SECCOMP = {"type": "RuntimeDefault"}


def secured_pod(pod_spec: dict[str, Any]) -> dict[str, Any]:
    """The pod spec with seccompProfile RuntimeDefault in its pod securityContext (kept where set)."""
    security = dict(pod_spec.get("securityContext") or {})
    security.setdefault("seccompProfile", dict(RUNTIME_DEFAULT_SECCOMP))
    return {**pod_spec, "securityContext": security}


def daemonset(name: str, namespace: str, pod_spec: dict[str, Any], *,
              extra_labels: dict[str, str] | None = None, exceptions: dict[str, str] | None = None) -> dict[str, Any]:
    """A DaemonSet of aksgpu's (metadata and spec), its pods selected by their name label, with
    its documented policy exceptions (rule id -> reason) as annotations."""
    return {
        "metadata": metadata(name, namespace, extra_labels=extra_labels,
                             annotations=policy_exceptions(exceptions) if exceptions else None),
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {"metadata": {"labels": {**labels(name), **(extra_labels or {})}},
                         "spec": secured_pod(pod_spec)},
        },
    }


def image(component: str, version: str | None = None) -> str:
    """image:tag@digest of a pinned component (version: aksgpu/catalog/in_cluster.yaml; digest:
    aksgpu/catalog/images.yaml), or image:tag of another tag (a spec's choice, unpinned)."""
    entry = catalog.load("in_cluster")[component]
    return catalog.image_reference(component, str(version or entry["version"]))


# --- which nodes -----------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolTarget:
    """One AKS agent pool as the Kubernetes objects see it: its name label and its taints."""

    name: str
    pool: NodePool
    taints: tuple[str, ...]


def pool_targets(spec: ClusterSpec, where: Callable[[NodePool], bool]) -> list[PoolTarget]:
    """Every agent pool (each zone of a perZone pool) of the node pools `where` accepts."""
    targets = []
    for pool in spec.node_pools:
        if not where(pool):
            continue
        taints = list(pool.node_taints)  # a spot pool's include the spot taint
        for zone_pool in pool.agent_pools():
            targets.append(PoolTarget(zone_pool.name, pool, tuple(taints)))
    return targets


def driver_mode(pool: NodePool) -> str:
    settings = pool.gpu_settings
    return settings.driver if settings else "Install"


def taint_parts(taint: str) -> tuple[str, str, str]:
    """key, value, effect of a taint written key=value:Effect."""
    key_value, _, effect = taint.rpartition(":")
    key, _, value = key_value.partition("=")
    return key, value, effect


def tolerations(taints: Iterable[str]) -> list[dict[str, str]]:
    """One exact toleration per distinct taint, in a stable order."""
    result = []
    for taint in sorted(set(taints)):
        key, value, effect = taint_parts(taint)
        result.append({"key": key, "operator": "Equal", "value": value, "effect": effect})
    return result


def pool_tolerations(targets: Iterable[PoolTarget], *, gate: bool = False) -> list[dict[str, str]]:
    """Tolerations for every taint of these pools (plus the gate's startup taint when asked)."""
    taints = [taint for target in targets for taint in target.taints]
    found = tolerations(taints)
    if gate:
        # Any value: "pending" while checked, "held" while the breaker holds the node (a gate pod
        # that replaces the one on a held node must land there to check it again).
        found.append({"key": GATE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"})
    return found


def pool_affinity(targets: Iterable[PoolTarget], *extra: dict[str, Any]) -> dict[str, Any]:
    """Node affinity that allows these agent pools only (plus extra match expressions)."""
    names = sorted({target.name for target in targets})
    expressions = [{"key": AGENT_POOL_LABEL, "operator": "In", "values": names}, *extra]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": expressions}]}}}


def admitted_by_gate() -> dict[str, Any]:
    """The node affinity expression for GPU nodes the gate let in: passed, or older than the gate."""
    return {"key": HEALTH_LABEL, "operator": "In", "values": ["passed", "unchecked"]}


def advertised_by_gate() -> dict[str, Any]:
    """The node affinity expression for GPU nodes whose GPUs may be advertised: admitted, or passed
    and waiting for the cross-node acceptance of an InfiniBand pool ("accepting": the gate's taint
    keeps every pod but the acceptance job's off it, and that job requests the GPUs)."""
    return {"key": HEALTH_LABEL, "operator": "In", "values": ["passed", "unchecked", "accepting"]}


def system_pool_placement() -> dict[str, Any]:
    """nodeSelector and tolerations that put a controller on the critical-system pool, where
    aksgpu's cluster-wide controllers (GPU Operator, Kueue) belong."""
    return {
        "nodeSelector": {MODE_LABEL: "system"},
        "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists", "effect": "NoSchedule"}],
    }


def program_source(module: Any) -> str:
    """The text of a node program (a module that runs in the cluster from a ConfigMap)."""
    with open(module.__file__, encoding="utf-8") as handle:
        return handle.read()


def program_files(*modules: Any) -> dict[str, str]:
    """Node programs as ConfigMap data: each file's name (its key, and its name in the folder the
    ConfigMap is mounted as, where the programs import each other as sibling files) and its text."""
    return {f"{module.__name__.rpartition('.')[2]}.py": program_source(module) for module in modules}


# The service-account token claim naming the node its pod runs on (Kubernetes 1.32+,
# ServiceAccountTokenPodNodeInfo): a node program's policy binds it to that node.
NODE_NAME_CLAIM = "'authentication.kubernetes.io/node-name'"

# The node's labels and annotations before and after an update, empty when absent.
NODE_METADATA_VARIABLES = [
    {"name": "oldLabels", "expression": "has(oldObject.metadata.labels) ? oldObject.metadata.labels : {}"},
    {"name": "newLabels", "expression": "has(object.metadata.labels) ? object.metadata.labels : {}"},
    {"name": "oldAnnotations",
     "expression": "has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {}"},
    {"name": "newAnnotations", "expression": "has(object.metadata.annotations) ? object.metadata.annotations : {}"},
]


# The node's taints before and after an update, the gate's own taint left out.
GATE_TAINT_VARIABLES = [
    {"name": "oldTaints", "expression": "has(oldObject.spec.taints) ? oldObject.spec.taints.filter(t, t.key != "
                                        f"'{GATE_TAINT_KEY}') : []"},
    {"name": "newTaints", "expression": "has(object.spec.taints) ? object.spec.taints.filter(t, t.key != "
                                        f"'{GATE_TAINT_KEY}') : []"},
]

# The security context of every node program's container (standard library Python, nothing written
# but through the API): not root, no privilege escalation, read-only root, no capabilities.
NODE_PROGRAM_SECURITY_CONTEXT = {"runAsNonRoot": True, "runAsUser": 65534, "allowPrivilegeEscalation": False,
                                 "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}


# A node program's own API credentials, as a volume: the service account's token (an hour, renewed
# by the kubelet), the cluster's CA and the namespace, in the layout of the default token mount;
# the pods set automountServiceAccountToken: false and mount this only where a program talks to
# the API server.
def api_token_volume() -> dict[str, Any]:
    """The volume (a new dict each time: pod specs do not share mutable parts)."""
    return {"name": "api-token", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
    ]}}


# Where a node program reads api_token_volume: the default token mount's folder.
API_TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def api_token_mount() -> dict[str, Any]:
    """The mount of api_token_volume (a new dict each time)."""
    return {"name": "api-token", "mountPath": API_TOKEN_DIR, "readOnly": True}


def node_program_container(name: str, image: str, command: list[Any], programs: str, program_dir: str, *,
                           env: list[dict[str, Any]] | None = None,
                           memory: tuple[str, str] = ("64Mi", "256Mi")) -> dict[str, Any]:
    """A container running a node program as NODE_PROGRAM_SECURITY_CONTEXT: the volume named
    `programs` read-only in `program_dir`, the API token (api_token_mount), `env` (no env key when
    None), 10m CPU and `memory` (request, limit)."""
    return {
        "name": name,
        "image": image,
        "command": command,
        **({"env": env} if env is not None else {}),
        "securityContext": NODE_PROGRAM_SECURITY_CONTEXT,
        "resources": {"requests": {"cpu": "10m", "memory": memory[0]}, "limits": {"memory": memory[1]}},
        "volumeMounts": [{"name": programs, "mountPath": program_dir, "readOnly": True}, api_token_mount()],
    }


def node_program_cronjob(name: str, namespace: str, *, container: str, image: str, command: list[Any],
                         programs: dict[str, Any], program_dir: str, schedule: str,
                         starting_deadline_seconds: int, active_deadline_seconds: int, backoff_limit: int = 0,
                         successful_jobs_history: int = 1, ttl_seconds_after_finished: int = 3600,
                         env: list[dict[str, Any]] | None = None, memory: tuple[str, str] = ("64Mi", "256Mi"),
                         extra_pod_labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A CronJob (metadata and spec) that runs a node program on the system pool, one run at a time,
    under the service account named as it (no automounted token: api_token_volume): one container
    (node_program_container) with the volume `programs` in `program_dir`."""
    placement = system_pool_placement()
    program = node_program_container(container, image, command, programs["name"], program_dir, env=env, memory=memory)
    pod_spec = {
        "serviceAccountName": name,
        "automountServiceAccountToken": False,
        "restartPolicy": "Never",
        "nodeSelector": placement["nodeSelector"],
        "tolerations": placement["tolerations"],
        "containers": [program],
        "volumes": [programs, api_token_volume()],
    }
    return {"metadata": metadata(name, namespace), "spec": {
        "schedule": schedule,
        "timeZone": "Etc/UTC",
        "concurrencyPolicy": "Forbid",
        "startingDeadlineSeconds": starting_deadline_seconds,
        "successfulJobsHistoryLimit": successful_jobs_history,
        "failedJobsHistoryLimit": 3,
        "jobTemplate": {"spec": {"backoffLimit": backoff_limit, "activeDeadlineSeconds": active_deadline_seconds,
                                 "ttlSecondsAfterFinished": ttl_seconds_after_finished,
                                 "template": {"metadata": {"labels": {**labels(name), **(extra_pod_labels or {})}},
                                              "spec": secured_pod(pod_spec)}}},
    }}


def unchanged_but(field: str, allowed: str) -> str:
    """CEL: the map variables.new<field> differs from variables.old<field> only in keys `allowed` (a
    CEL condition on k) admits."""
    new, old = f"variables.new{field}", f"variables.old{field}"
    return (f"{new}.all(k, {allowed} || (k in {old} && {old}[k] == {new}[k])) "
            f"&& {old}.all(k, {allowed} || k in {new})")


def node_update_policy(name: str, condition: dict[str, str], variables: list[dict[str, str]],
                       validations: list[dict[str, str]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A ValidatingAdmissionPolicy (failing closed) and its Deny binding over node UPDATEs by the
    requests `condition` matches: what a node program's service account may change on a node."""
    policy = {"metadata": metadata(name), "spec": {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
                                                "resources": ["nodes"]}]},
        "matchConditions": [condition],
        "variables": variables,
        "validations": validations,
    }}
    binding = {"metadata": metadata(name), "spec": {"policyName": name, "validationActions": ["Deny"]}}
    return policy, binding
