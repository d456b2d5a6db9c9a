"""Workload security of the Kubernetes objects a stack declares: the pod template of every
Deployment, DaemonSet, StatefulSet, Job, CronJob and Pod, container by container.

An object may carry a documented exception to a rule: the annotation
`policy.aksgpu.io/<rule id>` with the reason as its value (at least 10 characters), on the object
itself, where `kubectl describe` shows it. aksgpu's GPU stack uses them where the GPUs need it (the
DCGM exporter and checks run as root with SYS_ADMIN; the device plugin registers through a host
directory). Pods that Helm charts render (GPU Operator, Kueue, Prometheus) are not seen here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from aksgpu.policy.checks import MISSING, PolicyResource, Violation, resource_check

EXCEPTION_PREFIX = "policy.aksgpu.io/"
# Pod Security Standards, restricted: the one capability a container may add.
ALLOWED_ADDED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})


def pod_template(resource: PolicyResource) -> tuple[str, Mapping[str, Any]] | None:
    """The path of a workload's pod spec and the spec, or None for other objects."""
    kind = resource.type.rsplit(":", 1)[-1]
    spec = resource.props.get("spec")
    if not isinstance(spec, Mapping):
        return None
    if kind == "Pod":
        return "spec", spec
    if kind == "CronJob":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
        prefix = "spec.jobTemplate.spec.template.spec"
    else:
        prefix = "spec.template.spec"
    pod = (spec.get("template") or {}).get("spec")
    return (prefix, pod) if isinstance(pod, Mapping) else None


def exception(resource: PolicyResource, rule_id: str) -> str | None:
    """The documented reason this object is excepted from `rule_id`, if it gives one."""
    annotations = (resource.props.get("metadata") or {}).get("annotations") or {}
    reason = annotations.get(EXCEPTION_PREFIX + rule_id)
    return reason if isinstance(reason, str) and len(reason.strip()) >= 10 else None


def _containers(pod: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for field in ("initContainers", "containers"):
        for container in pod.get(field) or []:
            if isinstance(container, Mapping):
                yield f"{field}[name={container.get('name', '?')}]", container


def _pod_to_check(rule_id: str, resource: PolicyResource) -> tuple[str, Mapping[str, Any]] | None:
    """The path and pod spec of a workload without an exception to the rule (None: nothing to check)."""
    found = pod_template(resource)
    return None if found is None or exception(resource, rule_id) is not None else found


def _each_container(rule_id: str,
                    resource: PolicyResource) -> Iterator[tuple[str, Mapping[str, Any], Mapping[str, Any]]]:
    """(path, pod spec, container) of every container of a workload without an exception to the rule."""
    found = _pod_to_check(rule_id, resource)
    if found is None:
        return
    prefix, pod = found
    for path, container in _containers(pod):
        yield f"{prefix}.{path}", pod, container


def _subject(resource: PolicyResource) -> str:
    metadata = resource.props.get("metadata") or {}
    return str(metadata.get("name") or resource.name)


def _security(container: Mapping[str, Any]) -> Mapping[str, Any]:
    context = container.get("securityContext")
    return context if isinstance(context, Mapping) else {}


WORKLOAD_RULES = ("k8s-privileged", "k8s-privilege-escalation", "k8s-capabilities", "k8s-non-root",
                  "k8s-read-only-root-fs", "k8s-resources", "k8s-host-path", "k8s-host-namespaces")


@resource_check("k8s-privileged")
def _privileged(resource: PolicyResource) -> Iterator[Violation]:
    for path, _, container in _each_container("k8s-privileged", resource):
        if _security(container).get("privileged") is True:
            yield Violation(resource, _subject(resource), f"{path}.securityContext.privileged", True)


@resource_check("k8s-privilege-escalation")
def _privilege_escalation(resource: PolicyResource) -> Iterator[Violation]:
    for path, _, container in _each_container("k8s-privilege-escalation", resource):
        value = _security(container).get("allowPrivilegeEscalation", MISSING)
        if value is not False:
            yield Violation(resource, _subject(resource), f"{path}.securityContext.allowPrivilegeEscalation", value)


@resource_check("k8s-capabilities")
def _capabilities(resource: PolicyResource) -> Iterator[Violation]:
    for path, _, container in _each_container("k8s-capabilities", resource):
        capabilities = _security(container).get("capabilities") or {}
        dropped = [str(c).upper() for c in capabilities.get("drop") or []]
        added = sorted(str(c).upper().removeprefix("CAP_") for c in capabilities.get("add") or [])
        if "ALL" not in dropped or any(c not in ALLOWED_ADDED_CAPABILITIES for c in added):
            yield Violation(resource, _subject(resource), f"{path}.securityContext.capabilities",
                            {"drop": dropped, "add": added})


@resource_check("k8s-non-root")
def _non_root(resource: PolicyResource) -> Iterator[Violation]:
    for path, pod, container in _each_container("k8s-non-root", resource):
        pod_context: Mapping[str, Any] = (pod["securityContext"] if isinstance(pod.get("securityContext"), Mapping)
                                          else {})
        context = _security(container)
        non_root = context.get("runAsNonRoot", pod_context.get("runAsNonRoot"))
        user = context.get("runAsUser", pod_context.get("runAsUser"))
        if non_root is not True or user == 0:
            yield Violation(resource, _subject(resource), f"{path}.securityContext.runAsNonRoot",
                            MISSING if non_root is None else non_root)


@resource_check("k8s-read-only-root-fs")
def _read_only_root_fs(resource: PolicyResource) -> Iterator[Violation]:
    for path, _, container in _each_container("k8s-read-only-root-fs", resource):
        value = _security(container).get("readOnlyRootFilesystem", MISSING)
        if value is not True:
            yield Violation(resource, _subject(resource), f"{path}.securityContext.readOnlyRootFilesystem", value)


def _quantity_set(resources: Mapping[str, Any], kind: str, name: str) -> bool:
    values = resources.get(kind)
    return isinstance(values, Mapping) and values.get(name) not in (None, "", MISSING)


@resource_check("k8s-resources")
def _resources(resource: PolicyResource) -> Iterator[Violation]:
    for path, _, container in _each_container("k8s-resources", resource):
        resources: Mapping[str, Any] = container["resources"] if isinstance(container.get("resources"), Mapping) else {}
        wanted = [("requests", "cpu"), ("requests", "memory"), ("limits", "memory")]
        missing = [f"{kind}.{name}" for kind, name in wanted if not _quantity_set(resources, kind, name)]
        if missing:
            yield Violation(resource, _subject(resource), f"{path}.resources", {"missing": missing})


@resource_check("k8s-host-path")
def _host_path(resource: PolicyResource) -> Iterator[Violation]:
    found = _pod_to_check("k8s-host-path", resource)
    if found is None:
        return
    prefix, pod = found
    for volume in pod.get("volumes") or []:
        if isinstance(volume, Mapping) and "hostPath" in volume:
            yield Violation(resource, _subject(resource), f"{prefix}.volumes[name={volume.get('name', '?')}].hostPath",
                            volume["hostPath"])


@resource_check("k8s-host-namespaces")
def _host_namespaces(resource: PolicyResource) -> Iterator[Violation]:
    found = _pod_to_check("k8s-host-namespaces", resource)
    if found is None:
        return
    prefix, pod = found
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field) is True:
            yield Violation(resource, _subject(resource), f"{prefix}.{field}", True)


def documented_exceptions(resources: Sequence[PolicyResource]) -> list[tuple[str, str, str]]:
    """(object, rule, reason) of every documented exception among `resources`."""
    found = []
    for resource in resources:
        if pod_template(resource) is None:
            continue
        for rule_id in WORKLOAD_RULES:
            reason = exception(resource, rule_id)
            if reason is not None:
                found.append((_subject(resource), rule_id, reason))
    return found
