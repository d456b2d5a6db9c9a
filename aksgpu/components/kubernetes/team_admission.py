"""The isolation of teams on shared GPU pools: two ValidatingAdmissionPolicies on pods in team
namespaces (TeamAccess declares them, team_access.py).

aksgpu-team-tolerations: a pod may tolerate only its own team's taint, never the system pool's
(CriticalAddonsOnly) or the GPU gate's, no toleration may match every taint, and no pod may be
created with spec.nodeName, so a team cannot put work on another team's pools.
aksgpu-team-gpus: a pod that may run on GPU nodes gets GPUs only through nvidia.com/gpu requests,
never through the NVIDIA runtime's own device selection (gpu_exposure_policy; every path and its
source in aksgpu/catalog/gpu_visibility.yaml)."""

from __future__ import annotations

from typing import Any

from aksgpu import catalog
from aksgpu.components.kubernetes.objects import GATE_TAINT_KEY, metadata
from aksgpu.spec.pools import CRITICAL_ADDONS_TAINT
from aksgpu.spec.pools import TEAM_KEY as TEAM_LABEL


TOLERATION_POLICY = "aksgpu-team-tolerations"
GPU_POLICY = "aksgpu-team-gpus"


# CEL over the pod and its namespace (admissionregistration.k8s.io/v1, GA in Kubernetes 1.30).
NO_WILDCARD_TOLERATION = "!has(object.spec.tolerations) || object.spec.tolerations.all(t, has(t.key) && t.key != '')"
# A pod created with spec.nodeName skips the scheduler, and the kubelet enforces only NoExecute
# taints: it could land on another team's pool. The scheduler binds through pods/binding, which
# this policy does not see, so scheduled pods are unaffected.
NO_NODE_NAME_ON_CREATE = "request.operation != 'CREATE' || !has(object.spec.nodeName) || object.spec.nodeName == ''"
OWN_TEAM_TOLERATION_ONLY = (
    f"!has(object.spec.tolerations) || object.spec.tolerations.all(t, !has(t.key) || t.key != '{TEAM_LABEL}' || "
    f"(has(t.value) && t.value == namespaceObject.metadata.labels['{TEAM_LABEL}']))")
# The system pool's taint (AKS onlyCriticalAddonsEnabled; spec/pools.py): Kueue, the GPU Operator's
# controllers and CoreDNS run there, and a team pod tolerating it could land beside them.
SYSTEM_POOL_TAINT_KEY = CRITICAL_ADDONS_TAINT.split("=")[0]


def _no_toleration_of(key: str) -> str:
    """No toleration of `key`, except on an update of a pod that already had one (created before the
    rule): tolerations can only be added to a pod, so refusing its updates would only block their
    finalizers' removal (the Job controller's, Kueue's), not move the pod."""
    return (f"!has(object.spec.tolerations) || object.spec.tolerations.all(t, !has(t.key) || t.key != '{key}') || "
            "(has(request.operation) && request.operation == 'UPDATE' && has(oldObject.spec.tolerations) && "
            f"oldObject.spec.tolerations.exists(t, has(t.key) && t.key == '{key}'))")


NO_SYSTEM_POOL_TOLERATION = _no_toleration_of(SYSTEM_POOL_TAINT_KEY)
# The GPU gate's startup taint holds a new GPU node out of service until its check has passed
# (gpu_health.py): a team pod tolerating it could run on a node under check.
NO_GATE_TOLERATION = _no_toleration_of(GATE_TAINT_KEY)


def toleration_policy() -> tuple[dict[str, Any], dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding to every team namespace."""
    policy = {"metadata": metadata(TOLERATION_POLICY), "spec": {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}]},
        "validations": [
            {"expression": NO_WILDCARD_TOLERATION,
             "message": "a pod in a team namespace may not tolerate every taint (a toleration without a key)"},
            {"expression": NO_NODE_NAME_ON_CREATE,
             "message": "a pod in a team namespace may not name its node (spec.nodeName skips the scheduler and "
                        "the team taints)"},
            {"expression": OWN_TEAM_TOLERATION_ONLY,
             "messageExpression": "'pods in namespace ' + namespaceObject.metadata.name + ' may tolerate only their "
                                  f"own team taint, {TEAM_LABEL}=' + namespaceObject.metadata.labels['{TEAM_LABEL}']"},
            {"expression": NO_SYSTEM_POOL_TOLERATION,
             "message": f"a pod in a team namespace may not tolerate {SYSTEM_POOL_TAINT_KEY}: that taint keeps the "
                        "system pool for Kueue, the GPU Operator's controllers and CoreDNS"},
            {"expression": NO_GATE_TOLERATION,
             "message": f"a pod in a team namespace may not tolerate {GATE_TAINT_KEY}: that taint holds a new GPU "
                        "node until its check has passed"},
        ],
    }}
    return policy, team_namespaces_binding(TOLERATION_POLICY)


# On AKS-driver GPU nodes the NVIDIA runtime is containerd's default (Azure/AgentBaker pkg/agent
# containerd template: `{{- if IsNSeriesSKU }} default_runtime_name = "nvidia-container-runtime"`),
# and it gives a container the devices its environment names (NVIDIA_VISIBLE_DEVICES), whether or
# not the device plugin allocated them: NVIDIA/k8s-device-plugin#87, NVIDIA/gpu-operator#700. Every
# path, with its source, is in aksgpu/catalog/gpu_visibility.yaml; tests/oracles/
# gpu_visibility.py models the chain (kubelet, containerd, the NVIDIA runtime) the policy is tested on.
_VISIBILITY = catalog.load("gpu_visibility")
DEVICE_ENV_VARS: list[str] = list(_VISIBILITY["deviceEnvVars"])
VISIBLE_DEVICES = str(_VISIBILITY["visibleDevicesEnvVar"])
NO_DEVICES = str(_VISIBILITY["noDevicesValue"])
NVIDIA_RUNTIME_CLASSES: list[str] = list(_VISIBILITY["nvidiaRuntimeClasses"])
CDI_ANNOTATION_PREFIXES: list[str] = list(_VISIBILITY["cdiAnnotationPrefixes"])
VOLUME_MOUNT_DEVICE_ROOT = str(_VISIBILITY["volumeMountDeviceRoot"])
PRIVILEGED_CAPABILITIES: list[str] = list(_VISIBILITY["privilegedCapabilities"])
GPU_RESOURCE = "nvidia.com/gpu"
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


def _cel_list(values: list[str]) -> str:
    return "[" + ", ".join(f"'{value}'" for value in values) + "]"


def _gpu_tolerated(pod: str) -> str:
    """The pod tolerates the GPU pools' taint (or every taint), so it may run on a GPU node. Every GPU
    pool carries an nvidia.com/gpu taint of effect NoSchedule or NoExecute (spec/pools.py node_taints;
    spec/access.py refuses a softer one when teams are declared)."""
    return (f"has({pod}.spec.tolerations) && {pod}.spec.tolerations.exists(t, !has(t.key) || t.key == '' || "
            f"t.key == '{GPU_RESOURCE}')")


def _requests_gpus(container: str) -> str:
    """The container requests nvidia.com/gpu (extended resources are requested through limits; a
    request of 0 calls no device plugin)."""
    return (f"(has({container}.resources) && has({container}.resources.limits) && "
            f"'{GPU_RESOURCE}' in {container}.resources.limits && "
            f"string({container}.resources.limits['{GPU_RESOURCE}']) != '0')")


def _every_container(condition: str) -> str:
    """`condition` (over `c`) holds for every container, init container and ephemeral container.
    Three lists, not one: they have different types in the API server's typed CEL."""
    return " && ".join(f"(!has(object.spec.{kind}) || object.spec.{kind}.all(c, {condition}))"
                       for kind in CONTAINER_LISTS)


# A device variable in the pod's env replaces the device plugin's (kubelet appends the pod's env after
# the device plugin's Allocate envs, kubernetes/kubernetes pkg/kubelet/kubelet_pods.go
# GenerateRunContainerOptions; containerd puts the image ENV first and the CRI envs after it,
# internal/cri/server/container_create.go, and the NVIDIA runtime keeps the last value of a name,
# internal/config/image/builder.go WithEnv). Only NVIDIA_VISIBLE_DEVICES=void is allowed, and only in a
# container without a GPU request.
DEVICE_ENV_ONLY_VOID = _every_container(
    f"!has(c.env) || c.env.all(e, !(e.name in {_cel_list(DEVICE_ENV_VARS)}) || (!{_requests_gpus('c')} && "
    f"e.name == '{VISIBLE_DEVICES}' && has(e.value) && e.value == '{NO_DEVICES}'))")
# A container without a GPU request states NVIDIA_VISIBLE_DEVICES=void: its image may set the
# variable (NGC images set all), and no device plugin value overrides the image's then. The pod's
# env also overrides envFrom (kubelet makeEnvironmentVariables: "Env will override EnvFrom variables").
NO_REQUEST_STATES_VOID = _every_container(
    f"{_requests_gpus('c')} || (has(c.env) && c.env.exists(e, e.name == '{VISIBLE_DEVICES}'))")
# envFrom adds every key of a ConfigMap or Secret, prefix + key (kubelet makeEnvironmentVariables),
# which admission cannot read: a container with a GPU request takes envFrom only under a prefix that
# no device variable starts with.
GPU_ENV_FROM_PREFIXED = _every_container(
    f"!{_requests_gpus('c')} || !has(c.envFrom) || c.envFrom.all(f, has(f.prefix) && f.prefix != '' && "
    f"{_cel_list(DEVICE_ENV_VARS)}.all(d, !d.startsWith(f.prefix)))")
NO_NVIDIA_RUNTIME_CLASS = (
    f"!has(object.spec.runtimeClassName) || !(object.spec.runtimeClassName in {_cel_list(NVIDIA_RUNTIME_CLASSES)})")
NO_CDI_ANNOTATIONS = (
    "!has(object.metadata.annotations) || object.metadata.annotations.all(k, "
    + " && ".join(f"!k.startsWith('{prefix}')" for prefix in CDI_ANNOTATION_PREFIXES) + ")")
# Privileged containers see every device; with CAP_SYS_ADMIN the NVIDIA runtime honours device
# variables whatever its configuration. Pod Security baseline refuses both; this holds for teams
# whose namespace is privileged too. containerd upper-cases added capabilities, so the match ignores case.
NOT_PRIVILEGED = _every_container(
    "!has(c.securityContext) || ((!has(c.securityContext.privileged) || !c.securityContext.privileged) && "
    "(!has(c.securityContext.capabilities) || !has(c.securityContext.capabilities.add) || "
    "c.securityContext.capabilities.add.all(a, !a.matches('(?i)^(cap_)?("
    + "|".join(name.lower() for name in PRIVILEGED_CAPABILITIES) + ")$'))))")
# The runtime cleans the mount's destination before comparing it with the root (cuda_image.go
# requestsFromMounts); cleaning only drops path elements, so the root's last element must appear in
# the mountPath as written.
NO_DEVICE_LIST_MOUNTS = _every_container(
    "!has(c.volumeMounts) || c.volumeMounts.all(m, "
    f"!m.mountPath.contains('{VOLUME_MOUNT_DEVICE_ROOT.rsplit('/', 1)[-1]}'))")
# The rules apply to a pod that may run on GPU nodes when it is created, when an update adds the GPU
# toleration (a scheduling-gated pod's tolerations may grow, and Kueue adds its flavor's), and when an
# ephemeral container is added. Containers' env and runtimeClassName cannot change on update, so a pod
# checked once needs no second check: finalizer removals on older pods are not refused.
NEWLY_ON_GPU_NODES = (
    "request.operation == 'CREATE' || (has(request.subResource) && request.subResource == 'ephemeralcontainers') "
    f"|| !({_gpu_tolerated('oldObject')})")


def gpu_exposure_policy() -> tuple[dict[str, Any], dict[str, Any]]:
    """The ValidatingAdmissionPolicy that leaves a team's pods on GPU nodes no GPU but those the
    device plugin allocated to them, and its binding to every team namespace."""
    policy = {"metadata": metadata(GPU_POLICY), "spec": {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                "operations": ["CREATE", "UPDATE"],
                                                "resources": ["pods", "pods/ephemeralcontainers"]}]},
        "matchConditions": [
            {"name": "may-run-on-gpu-nodes", "expression": _gpu_tolerated("object")},
            {"name": "new-on-gpu-nodes", "expression": NEWLY_ON_GPU_NODES},
        ],
        "validations": [
            {"expression": DEVICE_ENV_ONLY_VOID,
             "message": f"a container of a pod that tolerates {GPU_RESOURCE} may not set "
                        f"{' or '.join(DEVICE_ENV_VARS)} (the pod's value replaces the device plugin's, so it would "
                        f"see GPUs it did not request); the one value allowed is {VISIBLE_DEVICES}={NO_DEVICES}, in a "
                        f"container without a GPU request. Fix: request {GPU_RESOURCE} in resources.limits"},
            {"expression": NO_REQUEST_STATES_VOID,
             "message": f"a container without an {GPU_RESOURCE} request, in a pod that tolerates {GPU_RESOURCE}, "
                        f"must set env {VISIBLE_DEVICES}={NO_DEVICES}: its image may set {VISIBLE_DEVICES} (NGC "
                        "images set all), and the NVIDIA runtime, containerd's default on AKS GPU nodes, would give "
                        f"it every GPU of the node. Fix: add {{name: {VISIBLE_DEVICES}, value: {NO_DEVICES}}} to "
                        "its env, or request GPUs"},
            {"expression": GPU_ENV_FROM_PREFIXED,
             "message": f"a container with an {GPU_RESOURCE} request may take envFrom only with a prefix that no "
                        f"device variable ({', '.join(DEVICE_ENV_VARS)}) starts with: a ConfigMap or Secret key of "
                        "that name would replace the device plugin's value. Fix: set envFrom[].prefix, e.g. APP_"},
            {"expression": NO_NVIDIA_RUNTIME_CLASS,
             "message": f"a pod in a team namespace may not use the NVIDIA runtime classes "
                        f"({', '.join(NVIDIA_RUNTIME_CLASSES)}): they select devices from the image's environment. "
                        f"Fix: remove runtimeClassName; {GPU_RESOURCE} requests get GPUs without it"},
            {"expression": NO_CDI_ANNOTATIONS,
             "message": "a pod in a team namespace may not carry CDI device annotations ("
                        f"{', '.join(CDI_ANNOTATION_PREFIXES)}): they name devices outside the device plugin. "
                        f"Fix: remove them and request {GPU_RESOURCE}"},
            {"expression": NOT_PRIVILEGED,
             "message": f"a container of a pod that tolerates {GPU_RESOURCE} may not be privileged or add "
                        f"{' or '.join(PRIVILEGED_CAPABILITIES)}: it would see every GPU of the node. Fix: drop "
                        f"privileged and the capability; request {GPU_RESOURCE}"},
            {"expression": NO_DEVICE_LIST_MOUNTS,
             "message": f"a container of a pod that tolerates {GPU_RESOURCE} may not mount anything under "
                        f"{VOLUME_MOUNT_DEVICE_ROOT}: the NVIDIA runtime can read a device list there. Fix: mount "
                        "the volume elsewhere"},
        ],
    }}
    return policy, team_namespaces_binding(GPU_POLICY)


def team_namespaces_binding(policy_name: str, teams: list[str] | None = None) -> dict[str, Any]:
    """A ValidatingAdmissionPolicyBinding that denies what `policy_name` refuses in every team
    namespace (those labelled with aksgpu's team label), or only in those of `teams`."""
    selector = ({"key": TEAM_LABEL, "operator": "In", "values": sorted(teams)} if teams is not None
                else {"key": TEAM_LABEL, "operator": "Exists"})
    return {"metadata": metadata(policy_name), "spec": {
        "policyName": policy_name,
        "validationActions": ["Deny"],
        "matchResources": {"namespaceSelector": {"matchExpressions": [selector]}},
    }}
