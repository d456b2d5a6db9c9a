"""Pod Security for teams on InfiniBand pools: the baseline level, plus IPC_LOCK on those pools only.

NCCL over InfiniBand verbs pins memory, which needs IPC_LOCK, and Pod Security Admission's baseline
level refuses it. PSA has no per-pod exception that AKS lets a cluster configure: its levels are
namespace labels (learn.microsoft.com/azure/aks/use-psa), and its exemptions (usernames, runtime
classes, namespaces) live in the API server's AdmissionConfiguration file
(kubernetes.io/docs/tasks/configure-pod-container/enforce-standards-admission-controller:
"--admission-control-config-file"), which AKS runs for the customer and does not expose (AKS FAQ,
"Can admission controllers be added or removed?": "Currently, you can't modify the list of admission
controllers in AKS"; Azure/AKS#3684, the AKS PM: "we don't have a way to use exceptions").

So a team that may use an InfiniBand pool (its own, or one no team owns) and is at `baseline` gets:
- its namespace at `enforce: privileged`, with `warn` and `audit` kept at baseline (PSA still reports
  every pod beyond baseline: kubernetes/pod-security-admission admission/admission.go ValidatePod
  short-circuits only when all three modes are privileged);
- the ValidatingAdmissionPolicy `aksgpu-team-baseline-infiniband`, bound to those namespaces only,
  which implements the baseline level (policy/check_*.go at v1.37, every value in
  aksgpu/catalog/pod_security.yaml) with one exception: a container or init container may
  add IPC_LOCK when the pod is pinned to one of the team's InfiniBand pools (nodeSelector
  kubernetes.azure.com/agentpool, the label Kueue's ResourceFlavor for an InfiniBand pool sets,
  gang_scheduling.py resource_flavor). Nothing else beyond baseline; ephemeral containers stay at
  baseline.

When the pin is checked. Kueue places a job by writing its flavor's nodeLabels into the pod's
nodeSelector (pkg/podset/podset.go FromAssignment copies flv.Spec.NodeLabels, Merge writes
spec.NodeSelector; kueue v0.19.2):
- batch Jobs and the other job kinds: into the pod template before unsuspending
  (pkg/controller/jobs/job/job_controller.go RunWithPodSetsInfo), so pods are CREATEd pinned;
- plain pods (the `pod` integration, and Deployments/StatefulSets through it): the webhook creates
  them with the scheduling gate kueue.x-k8s.io/admission (pkg/controller/jobs/pod/pod_webhook.go
  Default, gate), and on admission one patch merges the nodeSelector and removes the gate
  (pod_controller.go Run -> prepare: podset.Merge, then utilpod.Ungate). The topology gate
  (kueue.x-k8s.io/topology) may stay on until a later update removes it.
A pod with scheduling gates cannot be scheduled; the API server lets its nodeSelector grow only while
it is gated, and lets gates be removed but never added (KEP-3838 Pod Mutable Scheduling Directives,
stable in 1.30; kubernetes.io/docs/concepts/scheduling-eviction/pod-scheduling-readiness). So the
pin is required of a pod that adds IPC_LOCK when it is schedulable: on
CREATE without scheduling gates, and on the UPDATE that removes its last gate. A gated pod may be
created unpinned.

Which requests are evaluated, as PSA does (admission.go ValidatePod, isSignificantPodUpdate): every
CREATE and every update through pods/ephemeralcontainers; other updates cannot change what baseline
looks at (containers and their security contexts are immutable), except the last-gate removal above.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aksgpu import catalog
from aksgpu.components.kubernetes.objects import AGENT_POOL_LABEL, metadata, pool_targets
from aksgpu.spec import ClusterSpec, Team
from aksgpu.spec.pools import TEAM_KEY as TEAM_LABEL

INFINIBAND_BASELINE_POLICY = "aksgpu-team-baseline-infiniband"
_TABLE = catalog.load("pod_security")
LEVEL = str(_TABLE["level"])
VERSION = str(_TABLE["version"])
ALLOWED_CAPABILITIES: list[str] = list(_TABLE["allowedCapabilities"])
ALLOWED_SYSCTLS: list[str] = list(_TABLE["allowedSysctls"])
ALLOWED_SELINUX_TYPES: list[str] = list(_TABLE["allowedSeLinuxTypes"])
ALLOWED_SECCOMP_TYPES: list[str] = list(_TABLE["allowedSeccompTypes"])
ALLOWED_APPARMOR_TYPES: list[str] = list(_TABLE["allowedAppArmorTypes"])
APPARMOR_ANNOTATION_PREFIX = str(_TABLE["appArmorAnnotationPrefix"])
APPARMOR_ANNOTATION_VALUES: list[str] = list(_TABLE["appArmorAnnotationValues"])
APPARMOR_LOCALHOST_PREFIX = str(_TABLE["appArmorAnnotationLocalhostPrefix"])
ALLOWED_PROC_MOUNT = str(_TABLE["allowedProcMount"])
PROBE_FIELDS: list[str] = list(_TABLE["probeFields"])
LIFECYCLE_FIELDS: list[str] = list(_TABLE["lifecycleFields"])
INFINIBAND_CAPABILITY = str(_TABLE["infiniband"]["extraCapability"])
INFINIBAND_CONTAINER_LISTS: list[str] = list(_TABLE["infiniband"]["containerLists"])
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


def infiniband_pools(spec: ClusterSpec, team: Team) -> list[str]:
    """The AKS agent pools of the InfiniBand sizes (vm_sizes.yaml `infiniband`) that the team may run
    on: its own and those no team owns (other teams' pools carry a taint it may not tolerate)."""
    targets = pool_targets(spec, lambda pool: bool(pool.size and pool.size.infiniband)
                           and pool.team in (None, team.name))
    return sorted({target.name for target in targets})


def infiniband_teams(spec: ClusterSpec) -> dict[str, list[str]]:
    """Team -> its InfiniBand agent pools, for the teams at Pod Security `baseline` that may use one:
    the teams whose namespace gets the exception. A `privileged` team needs none; a `restricted` team
    keeps its level (restricted drops every capability), so its pods cannot add IPC_LOCK."""
    teams = {}
    for team in spec.access.teams:
        pools = infiniband_pools(spec, team)
        if pools and team.pod_security == LEVEL:
            teams[team.name] = pools
    return teams


def namespace_pod_security_labels(team: Team, infiniband: bool) -> dict[str, str]:
    """The Pod Security Admission labels of a team's namespace. With the InfiniBand exception PSA only
    warns and audits at baseline; aksgpu-team-baseline-infiniband enforces it."""
    if infiniband:
        return {"pod-security.kubernetes.io/enforce": "privileged",
                "pod-security.kubernetes.io/warn": LEVEL,
                "pod-security.kubernetes.io/audit": LEVEL}
    return {"pod-security.kubernetes.io/enforce": team.pod_security,
            "pod-security.kubernetes.io/warn": team.pod_security}


# --- CEL ----------------------------------------------------------------------------------------


def _cel_list(values: list[str]) -> str:
    return "[" + ", ".join(f"'{value}'" for value in values) + "]"


def _present(root: str, path: str) -> str:
    """Every field on `path` below `root` is set (CEL's has() needs each parent to exist)."""
    parts = path.split(".")
    return " && ".join(f"has({'.'.join([root, *parts[:index + 1]])})" for index in range(len(parts)))


def _every(kinds: tuple[str, ...] | list[str], condition: str) -> str:
    """`condition` (over `c`) holds for every container of these lists. One clause per list: they have
    different types in the API server's typed CEL."""
    return " && ".join(f"(!has(object.spec.{kind}) || object.spec.{kind}.all(c, {condition}))" for kind in kinds)


def _any(kinds: list[str], condition: str) -> str:
    return " || ".join(f"(has(object.spec.{kind}) && object.spec.{kind}.exists(c, {condition}))" for kind in kinds)


def _every_container(condition: str) -> str:
    """Every container, init container and ephemeral container (policy/visitor.go visitContainers)."""
    return _every(CONTAINER_LISTS, condition)


def _pod_and_containers(condition: Callable[[str], str]) -> str:
    """`condition(context)` holds for the pod's security context and every container's."""
    pod = f"(!has(object.spec.securityContext) || {condition('object.spec.securityContext')})"
    return pod + " && " + _every_container(f"!has(c.securityContext) || {condition('c.securityContext')}")


HOST_NAMESPACES = " && ".join(f"!(has(object.spec.{field}) && object.spec.{field})"
                              for field in ("hostNetwork", "hostPID", "hostIPC"))
PRIVILEGED = _every_container(f"!({_present('c', 'securityContext.privileged')} && c.securityContext.privileged)")
_ADDED = "c.securityContext.capabilities.add"
BASELINE_CAPABILITIES = " && ".join([
    _every([kind for kind in CONTAINER_LISTS if kind in INFINIBAND_CONTAINER_LISTS],
           f"!({_present('c', 'securityContext.capabilities.add')}) || "
           f"{_ADDED}.all(a, a in {_cel_list([*ALLOWED_CAPABILITIES, INFINIBAND_CAPABILITY])})"),
    _every([kind for kind in CONTAINER_LISTS if kind not in INFINIBAND_CONTAINER_LISTS],
           f"!({_present('c', 'securityContext.capabilities.add')}) || "
           f"{_ADDED}.all(a, a in {_cel_list(ALLOWED_CAPABILITIES)})"),
])
ADDS_INFINIBAND_CAPABILITY = _any(INFINIBAND_CONTAINER_LISTS, f"{_present('c', 'securityContext.capabilities.add')} "
                                  f"&& '{INFINIBAND_CAPABILITY}' in {_ADDED}")
GATED = "has(object.spec.schedulingGates) && size(object.spec.schedulingGates) > 0"
PINNED_TO_INFINIBAND = (f"has(object.spec.nodeSelector) && '{AGENT_POOL_LABEL}' in object.spec.nodeSelector && "
                        f"object.spec.nodeSelector['{AGENT_POOL_LABEL}'] in variables.infinibandPools")
INFINIBAND_CAPABILITY_PINNED = f"!({ADDS_INFINIBAND_CAPABILITY}) || ({GATED}) || ({PINNED_TO_INFINIBAND})"
HOST_PATH_VOLUMES = "!has(object.spec.volumes) || object.spec.volumes.all(v, !has(v.hostPath))"
HOST_PORTS = _every_container("!has(c.ports) || c.ports.all(p, !has(p.hostPort) || p.hostPort == 0)")
APPARMOR = " && ".join([
    _pod_and_containers(lambda s: f"!has({s}.appArmorProfile) || (has({s}.appArmorProfile.type) && "
                                  f"{s}.appArmorProfile.type in {_cel_list(ALLOWED_APPARMOR_TYPES)})"),
    "!has(object.metadata.annotations) || "
    f"object.metadata.annotations.all(k, !k.startsWith('{APPARMOR_ANNOTATION_PREFIX}') "
    f"|| object.metadata.annotations[k] in {_cel_list(APPARMOR_ANNOTATION_VALUES)} "
    f"|| object.metadata.annotations[k].startsWith('{APPARMOR_LOCALHOST_PREFIX}'))",
])
SELINUX = _pod_and_containers(lambda s: (
    f"!has({s}.seLinuxOptions) || ("
    f"(!has({s}.seLinuxOptions.type) || {s}.seLinuxOptions.type in {_cel_list(ALLOWED_SELINUX_TYPES)}) && "
    f"(!has({s}.seLinuxOptions.user) || {s}.seLinuxOptions.user == '') && "
    f"(!has({s}.seLinuxOptions.role) || {s}.seLinuxOptions.role == ''))"))
PROC_MOUNT = ("(has(object.spec.hostUsers) && !object.spec.hostUsers) || (" + _every_container(
    f"!({_present('c', 'securityContext.procMount')}) || c.securityContext.procMount == '{ALLOWED_PROC_MOUNT}'") + ")")
SECCOMP = _pod_and_containers(lambda s: f"!has({s}.seccompProfile) || (has({s}.seccompProfile.type) && "
                                        f"{s}.seccompProfile.type in {_cel_list(ALLOWED_SECCOMP_TYPES)})")
SYSCTLS = (f"!({_present('object.spec', 'securityContext.sysctls')}) || "
           f"object.spec.securityContext.sysctls.all(x, x.name in {_cel_list(ALLOWED_SYSCTLS)})")
WINDOWS_HOST_PROCESS = _pod_and_containers(
    lambda s: f"!({_present(s, 'windowsOptions.hostProcess')} && {s}.windowsOptions.hostProcess)")


def _no_host(handler: str) -> str:
    return " && ".join(f"(!({_present(handler, f'{kind}.host')}) || {handler}.{kind}.host == '')"
                       for kind in ("httpGet", "tcpSocket"))


PROBE_AND_LIFECYCLE_HOSTS = _every_container(" && ".join(
    [f"(!has(c.{probe}) || ({_no_host(f'c.{probe}')}))" for probe in PROBE_FIELDS]
    + [f"(!({_present('c', f'lifecycle.{hook}')}) || ({_no_host(f'c.lifecycle.{hook}')}))"
       for hook in LIFECYCLE_FIELDS]))

# What is evaluated (see the module docstring): CREATE, ephemeral containers, and the update that
# removes a pod's last scheduling gate.
EVALUATED = (
    "request.operation == 'CREATE' || (has(request.subResource) && request.subResource == 'ephemeralcontainers') || "
    "(has(oldObject.spec.schedulingGates) && size(oldObject.spec.schedulingGates) > 0 && "
    "!(has(object.spec.schedulingGates) && size(object.spec.schedulingGates) > 0))")


def _team_pools_variable(teams: dict[str, list[str]]) -> str:
    pools = "{" + ", ".join(f"'{team}': {_cel_list(names)}" for team, names in sorted(teams.items())) + "}"
    return f"variables.team in {pools} ? {pools}[variables.team] : []"


def infiniband_baseline_policy(teams: dict[str, list[str]]) -> dict[str, Any]:
    """The ValidatingAdmissionPolicy that enforces baseline plus the InfiniBand exception for the pods
    of `teams` (team -> its InfiniBand agent pools). Its binding to those teams' namespaces is
    team_access.infiniband_baseline's (through team_admission.team_namespaces_binding, which binds
    every team policy)."""
    level = f"Pod Security {LEVEL} ({VERSION})"
    validations = [
        (HOST_NAMESPACES, f"host namespaces: hostNetwork, hostPID and hostIPC must be unset or false ({level})"),
        (PRIVILEGED, f"privileged: no container may set securityContext.privileged=true ({level})"),
        (BASELINE_CAPABILITIES,
         f"non-default capabilities: securityContext.capabilities.add may name only {', '.join(ALLOWED_CAPABILITIES)} "
         f"({level}), and {INFINIBAND_CAPABILITY} in a container or init container of a pod on an InfiniBand pool"),
        (INFINIBAND_CAPABILITY_PINNED,
         f"{INFINIBAND_CAPABILITY} is allowed only to a pod pinned to one of its team's InfiniBand pools: set "
         f"spec.nodeSelector {AGENT_POOL_LABEL} to that pool, or submit the job through the team's Kueue queue "
         "(its InfiniBand flavors set it)"),
        (HOST_PATH_VOLUMES, f"hostPath volumes are not allowed ({level})"),
        (HOST_PORTS, f"hostPort: containers may not use host ports ({level})"),
        (APPARMOR, f"forbidden AppArmor profile: only RuntimeDefault or Localhost, and the annotations' "
                   f"runtime/default or localhost/* ({level})"),
        (SELINUX, f"seLinuxOptions: type only {', '.join(t for t in ALLOWED_SELINUX_TYPES if t)}, no user or role "
                  f"({level})"),
        (PROC_MOUNT, f"procMount: only {ALLOWED_PROC_MOUNT}, unless the pod sets hostUsers: false ({level})"),
        (SECCOMP, f"seccompProfile: type only {' or '.join(ALLOWED_SECCOMP_TYPES)} ({level})"),
        (SYSCTLS, f"forbidden sysctls: only {', '.join(ALLOWED_SYSCTLS)} ({level})"),
        (WINDOWS_HOST_PROCESS, f"hostProcess: securityContext.windowsOptions.hostProcess must not be true ({level})"),
        (PROBE_AND_LIFECYCLE_HOSTS, f"probe or lifecycle host: probes and lifecycle handlers may not set "
                                    f"httpGet.host or tcpSocket.host ({level})"),
    ]
    policy = {"metadata": metadata(INFINIBAND_BASELINE_POLICY), "spec": {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                "operations": ["CREATE", "UPDATE"],
                                                "resources": ["pods", "pods/ephemeralcontainers"]}]},
        "matchConditions": [{"name": "created-given-debug-containers-or-ungated", "expression": EVALUATED}],
        "variables": [
            {"name": "team", "expression": f"has(namespaceObject.metadata.labels) && '{TEAM_LABEL}' in "
                                           f"namespaceObject.metadata.labels ? "
                                           f"namespaceObject.metadata.labels['{TEAM_LABEL}'] : ''"},
            {"name": "infinibandPools", "expression": _team_pools_variable(teams)},
        ],
        "validations": [{"expression": expression, "message": message} for expression, message in validations],
    }}
    return policy
