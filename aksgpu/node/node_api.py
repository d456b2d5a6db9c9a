"""The node gate's vocabulary and its API client, shared by the gate's steps (node_gate.py), its
watchdog (node_watchdog.py) and the cross-node acceptance (fabric_acceptance.py): the labels,
annotations and taint the gate writes, the few API calls it makes, the node update with optimistic
locking, and the small readers of a node's labels, annotations and times.

Standard library only: shipped beside node_gate.py as a key of the gate's ConfigMap."""

from __future__ import annotations

import datetime
import json
import os
import re
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any, Self, TypeVar


GATE_TAINT_KEY = "startup-taint.cluster-autoscaler.kubernetes.io/aksgpu-gpu-check"
HEALTH_LABEL = "aksgpu.io/gpu-health"
FAILED_CHECK_LABEL = "aksgpu.io/gpu-health-failed-check"
EXIT_CODE_ANNOTATION = "aksgpu.io/gpu-health-exit-code"
REASON_ANNOTATION = "aksgpu.io/gpu-health-reason"
CHECKED_AT_ANNOTATION = "aksgpu.io/gpu-health-checked-at"
PENDING_SINCE_ANNOTATION = "aksgpu.io/gpu-health-pending-since"
FINGERPRINT_ANNOTATION = "aksgpu.io/gpu-health-fingerprint"  # node image, kernel, driver at the last pass
RELEASED_AT_ANNOTATION = "aksgpu.io/gpu-health-released-at"  # a failed node handed to the autoscaler
# The cluster autoscaler never scales down a node with this annotation set to "true"
# (kubernetes/autoscaler cluster-autoscaler-1.36.1 core/scaledown/eligibility/eligibility.go;
# FAQ "How can I prevent Cluster Autoscaler from scaling down a particular node?"). Without it a
# failed GPU node, which advertises no GPUs, is deleted with its labels: its scale-down
# eligibility does not look at spec.unschedulable.
SCALE_DOWN_DISABLED_ANNOTATION = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
# Marks a scale-down-disabled the gate set itself: only that one is ever removed by the gate, never
# one an operator set.
KEPT_ANNOTATION = "aksgpu.io/gpu-health-kept"
SPARED_AT_ANNOTATION = "aksgpu.io/gpu-health-spared-at"  # the passive brake last reported this node
AGENT_POOL_LABEL = "kubernetes.azure.com/agentpool"  # AKS sets it on every node (use-labels.md)
NODE_IMAGE_LABEL = "kubernetes.azure.com/node-image-version"  # AKS sets it on every node (use-labels.md)
# GPU Feature Discovery's driver labels on GPU Operator pools (NVIDIA/k8s-device-plugin
# internal/lm/resource.go, v0.17+: nvidia.com/cuda.driver-version.full; older: .major/.minor/.rev).
DRIVER_LABELS = ("nvidia.com/cuda.driver-version.full", "nvidia.com/cuda.driver.major",
                 "nvidia.com/cuda.driver.minor", "nvidia.com/cuda.driver.rev")


# The GPU Operator's per-node switches for the operands that must wait for the verdict; it keeps
# a value it finds (controllers/state_manager.go, v26.7.0) and sets "true" where there is none.
HELD_OPERAND_LABELS = ("nvidia.com/gpu.deploy.device-plugin", "nvidia.com/gpu.deploy.dcgm-exporter")
# The state between the local check and the cross-node acceptance on InfiniBand pools
# (fabric_acceptance.py): the gate's taint stays (value "accepting"), the GPUs are advertised for the
# acceptance job alone.
ACCEPTING = "accepting"
ACCEPTANCE_SINCE_ANNOTATION = "aksgpu.io/gpu-health-acceptance-since"
# When the watchdog first saw a node of a gated pool that no gate pod has put under the gate yet.
UNSTARTED_SINCE_ANNOTATION = "aksgpu.io/gpu-health-unstarted-since"


SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
T = TypeVar("T")
_LABEL_VALUE = re.compile(r"[^A-Za-z0-9_.-]+")


class Api:
    """The few calls the gate needs, over the API server's REST interface."""

    def __init__(self, base_url: str, token: str | None, context: ssl.SSLContext | None) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.context = context

    @classmethod
    def in_cluster(cls) -> Self:  # Self: the acceptance pass's subclass gets its own type
        host = os.environ["KUBERNETES_SERVICE_HOST"]
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        with open(f"{SERVICE_ACCOUNT}/token", encoding="utf-8") as handle:
            token = handle.read().strip()
        context = ssl.create_default_context(cafile=f"{SERVICE_ACCOUNT}/ca.crt")
        return cls(f"https://{host}:{port}", token, context)

    def _request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base_url + path, data=data, method=method)
        request.add_header("Accept", "application/json")
        if body is not None:
            request.add_header("Content-Type", content_type)
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(request, context=self.context, timeout=30) as response:
            return json.loads(response.read() or b"{}")

    def get_node(self, name: str) -> dict[str, Any]:
        return self._request("GET", f"/api/v1/nodes/{name}")

    def list_nodes(self, label_selector: str) -> list[dict[str, Any]]:
        query = urllib.parse.urlencode({"labelSelector": label_selector})
        return self._request("GET", f"/api/v1/nodes?{query}").get("items") or []

    def list_pods(self, namespace: str | None = None, label_selector: str = "",
                  field_selector: str = "") -> list[dict[str, Any]]:
        query = urllib.parse.urlencode({key: value for key, value in (("labelSelector", label_selector),
                                                                      ("fieldSelector", field_selector)) if value})
        where = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
        return self._request("GET", f"{where}?{query}").get("items") or []

    def get_daemonset(self, namespace: str, name: str) -> dict[str, Any]:
        return self._request("GET", f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}")

    def merge_patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self._request("PATCH", f"/api/v1/nodes/{name}", patch, "application/merge-patch+json")

    def get_configmap(self, namespace: str, name: str) -> dict[str, Any]:
        return self._request("GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}")

    def replace_configmap(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """PUT with the resourceVersion it read: a concurrent writer makes it fail with 409."""
        return self._request("PUT", f"/api/v1/namespaces/{namespace}/configmaps/{name}", body)

    def create_event(self, namespace: str, event: dict[str, Any]) -> dict[str, Any]:
        return self._request("POST", f"/api/v1/namespaces/{namespace}/events", event)


def update_node(api: Api, name: str, change: Callable[[dict[str, Any]], dict[str, Any] | None],
                attempts: int = 10) -> dict[str, Any]:
    """Apply `change` (node -> merge patch, or None for nothing to do) with optimistic locking."""
    for attempt in range(attempts):
        node = api.get_node(name)
        patch = change(node)
        if not patch:
            return node
        patch.setdefault("metadata", {})["resourceVersion"] = node["metadata"]["resourceVersion"]
        try:
            return api.merge_patch_node(name, patch)
        except urllib.error.HTTPError as error:
            if error.code != 409 or attempt == attempts - 1:
                raise
            time.sleep(min(2 ** attempt, 10) / 10)
    raise RuntimeError("unreachable")


def _taints_without_gate(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in node.get("spec", {}).get("taints") or [] if t.get("key") != GATE_TAINT_KEY]


def _gate_taint(value: str) -> dict[str, str]:
    return {"key": GATE_TAINT_KEY, "value": value, "effect": "NoSchedule"}


def _timestamp(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    try:
        return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        return None


def _stamp(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _now(now: datetime.datetime | None) -> datetime.datetime:
    return now or datetime.datetime.now(datetime.timezone.utc)


def _kept(node: dict[str, Any]) -> dict[str, str]:
    """Annotations that keep a node from scale-down as the gate's own; none where an operator
    already keeps it (theirs stays theirs, and the gate will never remove it)."""
    annotations = _annotations(node)
    if annotations.get(SCALE_DOWN_DISABLED_ANNOTATION) == "true" and KEPT_ANNOTATION not in annotations:
        return {}
    return {SCALE_DOWN_DISABLED_ANNOTATION: "true", KEPT_ANNOTATION: "true"}


def _unkept(node: dict[str, Any]) -> dict[str, None]:
    """Annotation changes that hand a node the gate kept back to the autoscaler (none for a node
    the gate did not keep: an operator's own scale-down-disabled stays)."""
    return {SCALE_DOWN_DISABLED_ANNOTATION: None,
            KEPT_ANNOTATION: None} if KEPT_ANNOTATION in _annotations(node) else {}


def _state_is(*states: str | None) -> Callable[[dict[str, Any]], bool]:
    """A guard on the node's aksgpu.io/gpu-health label as the patch is about to apply: a change
    decided on an older view (the watchdog failed the node meanwhile, a verdict passed it) is not
    applied over a newer one."""
    return lambda node: _labels(node).get(HEALTH_LABEL) in states


def _state_is_not(*states: str) -> Callable[[dict[str, Any]], bool]:
    return lambda node: _labels(node).get(HEALTH_LABEL) not in states


def _labels(node: dict[str, Any]) -> dict[str, str]:
    return node.get("metadata", {}).get("labels") or {}


def _annotations(node: dict[str, Any]) -> dict[str, str]:
    return node.get("metadata", {}).get("annotations") or {}


def label_value(text: str) -> str:
    return _LABEL_VALUE.sub("-", text).strip("-._")[:63].strip("-._") or "check"


def _guarded(api: Api, node_name: str, expected: Callable[[dict[str, Any]], bool] | None,
             change: Callable[[dict[str, Any]], dict[str, Any] | None]) -> bool:
    """update_node, unless the node has left the expected state; whether the change applied."""
    applied = True

    def guarded(node: dict[str, Any]) -> dict[str, Any] | None:
        nonlocal applied
        if expected is not None and not expected(node):
            applied = False
            return None
        return change(node)

    update_node(api, node_name, guarded)
    return applied


def _per_node(name: str, action: Callable[[], T]) -> T | None:
    """One node's step of the watchdog's pass, run at once. An API error (the node deleted
    meanwhile, a patch refused) is printed and the pass goes on with the other nodes; the next pass
    tries again."""
    try:
        return action()
    except (OSError, ValueError) as error:  # urllib's HTTPError and URLError are OSErrors
        print(f"aksgpu: {name}: skipped in this pass: {error}", file=sys.stderr, flush=True)
        return None


def _pool_selector(pools: list[str]) -> str:
    return f"{AGENT_POOL_LABEL} in ({','.join(pools)})"


def _requests_gpus(pod: dict[str, Any]) -> bool:
    spec = pod.get("spec", {})
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = container.get("resources") or {}
        for kind in ("requests", "limits"):
            if any(key.endswith("/gpu") for key in (resources.get(kind) or {})):
                return True
    return False
