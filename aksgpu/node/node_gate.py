"""aksgpu's GPU node gate: the steps around a GPU check that change the node, run in the cluster.

This file is shipped to the cluster as a ConfigMap and run by `python3` (standard library only)
in the gate DaemonSets, the re-check CronJobs and the gate watchdog that GpuHealth declares. It
talks to the API server with its pod's service account (nodes: get and patch; the watchdog also
lists nodes; the gate reads its own DaemonSet). Every node change is a JSON merge patch carrying
the node's resourceVersion, retried on conflict, so it never overwrites a concurrent change.

Steps:
  pending   (init)  a node without a verdict gets the startup taint, aksgpu.io/gpu-health=pending
                    and the time it started waiting; with --hold-operands also
                    nvidia.com/gpu.deploy.device-plugin=false and ...dcgm-exporter=false (on GPU
                    Operator pools the pool already creates its nodes with these and NFD's NVIDIA
                    PCI label, so no controller ever sees another first value and the operator's
                    labeller never deletes them: spec/gpu_startup.py and its tests). A node that
                    joined before the gate's DaemonSet
                    existed, and was never checked, is only labelled "unchecked": checking it could
                    disturb its work; the re-checks cover it once idle. A node the breaker held is
                    checked again.
  wait-for-driver   (init, GPU Operator pools) wait until the operator's validator has marked the
                    driver and container toolkit ready on this node.
  (the check itself runs between these, in the check's own image; see GpuHealth)
  verdict   (main)  read the check's exit code and report; pass: remove the taint, label passed
                    (and switch the held operands back on), record the node's software fingerprint;
                    fail: cordon, label failed with the failed check, annotate why, keep the node
                    from the autoscaler's scale-down while the pool's bound allows; or, when the
                    pool's recent verdicts are mostly failures (the circuit breaker), hold it:
                    tainted "held", kept, not failed. Every verdict is a Kubernetes Event on the
                    Node, a JSON log line, and an entry in the record ConfigMap.
  hold      (main)  keep the pod alive until the node's verdict moves it off the node.
  watchdog  (CronJob) the periodic pass over the GPU nodes: fail (or hold) nodes pending too long,
                    and nodes on which no gate pod ever started (on an InfiniBand pool the gate's
                    pod waits for the RDMA resource);
                    hand failed nodes past the pool's bound or age to the autoscaler; cordon nodes
                    whose DCGM exporter or node-problem-detector reports a critical condition;
                    gate again a passed node whose node image, kernel or driver changed; switch the
                    GPU Operator's operands on again where a pool label update turned them off;
                    with the gate off, release every node it left tainted.

The contract with the check: exit 0 passes the node, any other code fails it (1 a check failed,
124 the time limit ran out, others: the check could not run). It may write a JSON object to
$AKSGPU_REPORT; a string "failedCheck" there names the check in the node's label, and a string
"reason" is copied into the node's annotation.
"""

from __future__ import annotations

import argparse
import copy
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
from dataclasses import dataclass
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
RECORD_CONFIGMAP = "aksgpu-gpu-health-record"
RECORD_KEY = "verdicts"  # JSON lines, newest last
RECORD_ENTRIES = 500  # about 150 KB: well inside a ConfigMap's 1 MiB
LOG_PREFIX = "aksgpu-gpu-health"  # every verdict's JSON log line starts with it (Container Insights keeps it)
EVENT_SOURCE = "aksgpu-gpu-gate"
# Where Events about a Node go. The API server accepts an Event (without eventTime) whose
# involvedObject has no namespace, as a Node's, only in "default" (or no namespace)
# (kubernetes/kubernetes pkg/apis/core/validation/events.go legacyValidateEvent); the kubelet
# writes its node Events there too.
NODE_EVENT_NAMESPACE = "default"
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
SKIP_FILE = "skip"  # in the results folder: the check must not run on this node
EXIT_CODE_FILE = "exit-code"
REPORT_FILE = "report.json"  # the check's JSON report ($AKSGPU_REPORT)
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


def get_text(url: str, timeout: float = 3.0) -> str:
    """A plain HTTP GET (a DCGM exporter's /metrics)."""
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - a pod IP the API listed
        return response.read().decode("utf-8", "replace")


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
    kept = KEPT_ANNOTATION in _annotations(node)
    return {SCALE_DOWN_DISABLED_ANNOTATION: None, KEPT_ANNOTATION: None} if kept else {}


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


# --- what a verdict leaves behind: Event, log line, record -------------------------------------


@dataclass(frozen=True)
class Policy:
    """What the spec says about failed nodes (gpuHealth.gate) and where the record lives."""

    namespace: str = "aksgpu-system"
    keep_failed: int = 2
    keep_failed_hours: float = 24.0
    breaker: bool = True
    breaker_share: float = 0.5
    breaker_window_minutes: float = 120.0
    breaker_min_nodes: int = 3


def fingerprint(node: dict[str, Any]) -> dict[str, str]:
    """What the GPUs run on: the node image (AKS's driver comes with it), the kernel, and, on GPU
    Operator pools, the driver GPU Feature Discovery reports. A change means a check is due."""
    labels = _labels(node)
    info = node.get("status", {}).get("nodeInfo") or {}
    found = {"nodeImage": labels.get(NODE_IMAGE_LABEL), "kernel": info.get("kernelVersion"),
             "driver": ".".join(labels[key] for key in DRIVER_LABELS if labels.get(key)) or None}
    return {key: value for key, value in found.items() if value}


def recorded_fingerprint(node: dict[str, Any]) -> dict[str, str]:
    try:
        loaded = json.loads(_annotations(node).get(FINGERPRINT_ANNOTATION) or "{}")
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in loaded.items()} if isinstance(loaded, dict) else {}


def fingerprint_changes(recorded: dict[str, str], current: dict[str, str]) -> list[str]:
    """The parts that differ where both know a value. A part only one side knows is not a change:
    GPU Feature Discovery may label the driver after the verdict was recorded."""
    return sorted(key for key in recorded.keys() & current.keys() if recorded[key] != current[key])


def log_verdict(entry: dict[str, Any]) -> None:
    """One JSON line on stdout: container logs outlive the node (Container Insights keeps them)."""
    print(f"{LOG_PREFIX} {json.dumps(entry, sort_keys=True)}", flush=True)


def emit_event(api: Api, node: dict[str, Any], kind: str, reason: str, message: str,
               now: datetime.datetime | None = None) -> None:
    """A core/v1 Event about the Node, where `kubectl describe node` finds it: kubectl looks up a
    node's Events by kind, name and a uid equal to the node's name (kubectl pkg/describe
    describe.go NodeDescriber; the kubelet's node reference uses the name as uid too). Best effort:
    a lost Event must not stop a verdict."""
    metadata = node.get("metadata", {})
    stamp = _stamp(_now(now))
    event = {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": f"{metadata.get('name', 'node')}.aksgpu-", "namespace": NODE_EVENT_NAMESPACE},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": metadata.get("name"),
                           "uid": metadata.get("name")},
        "type": kind, "reason": reason, "message": message[:1024],
        "source": {"component": EVENT_SOURCE, "host": metadata.get("name")},
        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
    }
    try:
        api.create_event(NODE_EVENT_NAMESPACE, event)
    except (urllib.error.URLError, OSError, ValueError) as error:
        print(f"aksgpu: could not write the Event {reason} on {metadata.get('name')}: {error}", file=sys.stderr)


def read_record(api: Api, namespace: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The record ConfigMap and its entries (None and [] when it cannot be read)."""
    try:
        configmap = api.get_configmap(namespace, RECORD_CONFIGMAP)
    except (urllib.error.URLError, OSError, ValueError) as error:
        print(f"aksgpu: could not read the record {namespace}/{RECORD_CONFIGMAP}: {error}", file=sys.stderr)
        return None, []
    entries = []
    for line in ((configmap.get("data") or {}).get(RECORD_KEY) or "").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            entries.append(entry)
    return configmap, entries


def append_record(api: Api, namespace: str,
                  entry: dict[str, Any] | Callable[[list[dict[str, Any]]], dict[str, Any]],
                  attempts: int = 10) -> bool:
    """Add one entry to the record, keeping the newest RECORD_ENTRIES; retried on conflict, so two
    verdicts at once both land. `entry` may be a function of the entries read, called again on
    every retry: a decision that depends on the record (the breaker's) is then made on exactly the
    record it is added to. Best effort (False: not recorded): the Event and the log line carry the
    same facts."""
    for attempt in range(attempts):
        configmap, entries = read_record(api, namespace)
        if configmap is None:
            return False
        new = entry(entries) if callable(entry) else entry
        lines = [json.dumps(e, sort_keys=True) for e in [*entries, new][-RECORD_ENTRIES:]]
        # The object as read (its resourceVersion, labels and annotations kept), with the new data.
        body = {**configmap, "data": {**(configmap.get("data") or {}), RECORD_KEY: "\n".join(lines) + "\n"}}
        try:
            api.replace_configmap(namespace, RECORD_CONFIGMAP, body)
            return True
        except urllib.error.HTTPError as error:
            if error.code != 409 or attempt == attempts - 1:
                print(f"aksgpu: could not update the record: {error}", file=sys.stderr)
                return False
            time.sleep(min(2 ** attempt, 10) / 10)
        except (urllib.error.URLError, OSError, ValueError) as error:
            print(f"aksgpu: could not update the record: {error}", file=sys.stderr)
            return False
    return False


def report(api: Api, policy: Policy, node: dict[str, Any], source: str, outcome: str, check: str | None,
           reason: str, now: datetime.datetime | None = None, record: bool = True) -> dict[str, Any]:
    """Leave the three traces of a verdict: the log line, the Event and (unless `record` is off:
    already recorded, or not a verdict) the record entry."""
    entry = verdict_entry(node, source, outcome, check, reason, now)
    log_verdict(entry)
    kind = "Normal" if outcome in ("passed", "released", ACCEPTING) else "Warning"
    event_reason = {"passed": "GpuCheckPassed", ACCEPTING: "GpuCheckPassed", "failed": "GpuCheckFailed",
                    "held": "GpuGateBreakerOpen",
                    "released": "GpuNodeReleased", "regated": "GpuNodeRegated",
                    "spared": "GpuPassiveBreakerOpen", "untainted": "GpuGateOff"}.get(outcome, "GpuHealth")
    text = f"{source}: {outcome}" + (f" ({check})" if check else "") + (f": {reason}" if reason else "")
    emit_event(api, node, kind, event_reason, text, now)
    if record:
        append_record(api, policy.namespace, entry)
    return entry


def verdict_entry(node: dict[str, Any], source: str, outcome: str, check: str | None, reason: str,
                  now: datetime.datetime | None = None) -> dict[str, Any]:
    labels = _labels(node)
    return {"time": _stamp(_now(now)), "node": node.get("metadata", {}).get("name"),
            "pool": labels.get(AGENT_POOL_LABEL), "vmSize": labels.get("node.kubernetes.io/instance-type"),
            "source": source, "verdict": outcome, "check": check, "reason": reason[:512]}


def breaker_open(entries: list[dict[str, Any]], pool: str | None, policy: Policy,
                 now: datetime.datetime) -> tuple[bool, str]:
    """Whether one more check failure in `pool` opens the circuit breaker: within the window, the
    pool's check verdicts (this failure included) are at least breaker_min_nodes and more than
    breaker_share of them failed or were held. Returns (open, the figures)."""
    if not policy.breaker:
        return False, ""
    since = now - datetime.timedelta(minutes=policy.breaker_window_minutes)
    # "acceptance": the cross-node acceptance's verdicts (fabric_acceptance.py): a broken NCCL setting
    # fails every pairing of a pool, which is systemic too.
    recent = [e for e in entries if e.get("pool") == pool
              and e.get("source") in ("gate", "recheck", "watchdog", "acceptance")
              and e.get("verdict") in ("passed", "failed", "held")
              and (_timestamp(e.get("time")) or since) > since]
    failures = sum(1 for e in recent if e.get("verdict") in ("failed", "held")) + 1
    total = len(recent) + 1
    figures = (f"{failures} of the last {total} check verdicts of pool {pool} within "
               f"{policy.breaker_window_minutes:g} minutes failed")
    return total >= policy.breaker_min_nodes and failures / total > policy.breaker_share, figures


# --- the steps --------------------------------------------------------------------------------


def pending(api: Api, node_name: str, results: str, gate_since: datetime.datetime | None,
            hold_operands: bool = False, now: datetime.datetime | None = None) -> str:
    """Put a node without a verdict under the gate. `gate_since` is when the gate's DaemonSet was
    created (None: unknown, every such node is checked). Returns tainted, unchecked or kept."""
    now = _now(now)
    outcome = "kept"

    def change(node: dict[str, Any]) -> dict[str, Any] | None:
        nonlocal outcome
        labels = _labels(node)
        annotations = _annotations(node)
        if labels.get(HEALTH_LABEL) in ("passed", "failed", "unchecked", ACCEPTING):
            outcome = "kept"
            return None
        created = _timestamp(node["metadata"].get("creationTimestamp"))
        checked_before = CHECKED_AT_ANNOTATION in annotations  # a repaired or held node
        # The watchdog's marks on a node no gate pod had reached yet (watch_unstarted) go now.
        unstarted: dict[str, Any] = ({UNSTARTED_SINCE_ANNOTATION: None, **_unkept(node)}
                                     if UNSTARTED_SINCE_ANNOTATION in annotations else {})
        if (labels.get(HEALTH_LABEL) != "pending" and not checked_before and gate_since is not None
                and created is not None and created < gate_since):
            outcome = "unchecked"
            return {"metadata": {"labels": {HEALTH_LABEL: "unchecked"}, "annotations": unstarted}}
        outcome = "tainted"
        new_labels: dict[str, Any] = {HEALTH_LABEL: "pending"}
        if hold_operands:
            new_labels.update({label: "false" for label in HELD_OPERAND_LABELS})
        new_annotations: dict[str, Any] = {PENDING_SINCE_ANNOTATION: annotations.get(PENDING_SINCE_ANNOTATION)
                                           or _stamp(now), **unstarted}
        if labels.get(HEALTH_LABEL) == "held":
            # Checked again (a new gate pod: a fixed image, or deleted by hand): the watchdog's
            # pending limit applies again, and so does the autoscaler.
            new_annotations.update({PENDING_SINCE_ANNOTATION: _stamp(now), **_unkept(node)})
        return {"metadata": {"labels": new_labels, "annotations": new_annotations},
                "spec": {"taints": _taints_without_gate(node) + [_gate_taint("pending")]}}

    update_node(api, node_name, change)
    if outcome != "tainted":
        # Nothing to check here now: the check step sees this file and exits at once.
        with open(os.path.join(results, SKIP_FILE), "w", encoding="utf-8") as handle:
            handle.write(outcome + "\n")
    return outcome


def read_result(results: str) -> tuple[int | None, dict[str, Any]]:
    """The check's exit code (None: it did not run) and its report (empty when absent or not JSON)."""
    if os.path.exists(os.path.join(results, SKIP_FILE)):
        return None, {}
    try:
        with open(os.path.join(results, EXIT_CODE_FILE), encoding="utf-8") as handle:
            code = int(handle.read().strip())
    except (OSError, ValueError):
        code = 2  # no exit code written: the check could not run
    loaded_report: dict[str, Any] = {}
    try:
        with open(os.path.join(results, REPORT_FILE), encoding="utf-8") as handle:
            loaded = json.load(handle)
        loaded_report = loaded if isinstance(loaded, dict) else {}
    except (OSError, ValueError):
        pass
    return code, loaded_report


def failure_reason(code: int, check_report: dict[str, Any]) -> tuple[str, str]:
    """(label value naming the failed check, human-readable reason) of a failed check."""
    named, given = check_report.get("failedCheck"), check_report.get("reason")
    check = named if isinstance(named, str) else {124: "timeout", 1: "check"}.get(code, "checker-error")
    reason = given if isinstance(given, str) else f"the check exited with code {code}"
    return label_value(check), reason[:1024]


def label_value(text: str) -> str:
    return _LABEL_VALUE.sub("-", text).strip("-._")[:63].strip("-._") or "check"


def verdict(api: Api, node_name: str, results: str, recheck: bool = False,
            release_operands: bool = False, now: datetime.datetime | None = None,
            policy: Policy | None = None, acceptance_pools: frozenset[str] = frozenset()) -> str:
    """Apply the check's result to the node: passed (or accepting, on a pool in `acceptance_pools`:
    the cross-node acceptance decides), failed, held or skipped."""
    policy = policy or Policy()
    now = _now(now)
    code, check_report = read_result(results)
    if code is None:
        return "skipped"
    source = "recheck" if recheck else "gate"
    annotations = {CHECKED_AT_ANNOTATION: _stamp(now), EXIT_CODE_ANNOTATION: str(code), PENDING_SINCE_ANNOTATION: None}
    # A gate's check belongs to a pending node; a re-check's to an admitted one (any node but a
    # failed or gated one where the gate is off).
    expected = _state_is_not("failed", "pending", "held") if recheck else _state_is("pending")
    if code == 0:
        applied = True
        state = "passed"

        def change(node: dict[str, Any]) -> dict[str, Any] | None:
            nonlocal applied, state
            if not expected(node):
                applied = False
                return None
            accepting = not recheck and _labels(node).get(AGENT_POOL_LABEL) in acceptance_pools
            state = ACCEPTING if accepting else "passed"
            labels: dict[str, Any] = {HEALTH_LABEL: state, FAILED_CHECK_LABEL: None}
            if release_operands:
                # "true", the operator's own value: it only relabels a node on other events, so a
                # label left out would keep the operands off until the next node joins.
                labels.update({label: "true" for label in HELD_OPERAND_LABELS})
            patch: dict[str, Any] = {"metadata": {"labels": labels, "annotations": {
                **annotations, REASON_ANNOTATION: None, **_unkept(node),
                FINGERPRINT_ANNOTATION: json.dumps(fingerprint(node), sort_keys=True)}}}
            if accepting:
                # Held for the acceptance: the taint stays with a value of its own, the device plugin
                # starts (its affinity takes "accepting"), only the acceptance job tolerates the taint.
                patch["metadata"]["annotations"][ACCEPTANCE_SINCE_ANNOTATION] = _stamp(now)
                patch["spec"] = {"taints": _taints_without_gate(node) + [_gate_taint(ACCEPTING)]}
            elif not recheck:
                patch["spec"] = {"taints": _taints_without_gate(node)}
            return patch

        node = update_node(api, node_name, change)
        if not applied:
            return _stale(node_name, source, "passed", node)
        # "accepting" in the record, not "passed": the breaker counts the acceptance's own verdict of
        # the node, and a pass of the local check beside it would halve any systemic failure share.
        report(api, policy, node, source, state, None,
               "passed its check; held for the cross-node acceptance on this InfiniBand pool"
               if state == ACCEPTING else "", now)
        return state
    check, reason = failure_reason(code, check_report)
    return fail_or_hold(api, node_name, source, check, reason, annotations, policy, now, expected)


def _stale(node_name: str, source: str, outcome: str, node: dict[str, Any]) -> str:
    print(f"aksgpu: {node_name}: {source} verdict {outcome} not applied: the node is "
          f"{_labels(node).get(HEALTH_LABEL) or 'unlabelled'} now", flush=True)
    return "stale"


def fail_or_hold(api: Api, node_name: str, source: str, check: str, reason: str, annotations: dict[str, Any],
                 policy: Policy, now: datetime.datetime,
                 expected: Callable[[dict[str, Any]], bool] | None = None) -> str:
    """A check failed: fail the node, unless the pool's breaker is open, then hold it; "stale" when
    the node is no longer in the `expected` state."""
    node = api.get_node(node_name)
    decision: dict[str, str] = {}

    def decide(entries: list[dict[str, Any]]) -> dict[str, Any]:
        # Made on the record it is added to: verdicts of a burst, landing together, each see the
        # ones before them (a conflict makes append_record read again and decide again).
        is_open, figures = breaker_open(entries, _labels(node).get(AGENT_POOL_LABEL), policy, now)
        decision["outcome"] = "held" if is_open else "failed"
        decision["reason"] = (f"circuit breaker open: {figures}, which points at the check's image, the driver or "
                              f"the node image rather than this node's GPUs; held, not failed. The check said: "
                              f"{reason}") if is_open else reason
        return verdict_entry(node, source, decision["outcome"], check, decision["reason"], now)

    recorded = append_record(api, policy.namespace, decide)
    if not decision:
        decide([])  # the record could not be read: decide without it
    outcome, why = decision["outcome"], decision["reason"]
    applied = (hold_node(api, node_name, check, why, annotations, expected) if outcome == "held" else
               fail_node(api, node_name, check, why, annotations, keep=policy.keep_failed > 0, expected=expected))
    if not applied:
        return _stale(node_name, source, outcome, api.get_node(node_name))
    report(api, policy, node, source, outcome, check, why, now, record=not recorded)
    return outcome


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


def fail_node(api: Api, node_name: str, label: str, reason: str, annotations: dict[str, Any],
              keep: bool = True, expected: Callable[[dict[str, Any]], bool] | None = None) -> bool:
    """Cordon the node and say why. Cordoned, not left with the startup taint: the autoscaler
    would count a node that is "starting" forever as unready, and too many unready nodes stop it
    from scaling. Kept from scale-down for diagnosis (the watchdog enforces the pool's bound)."""
    return _guarded(api, node_name, expected, lambda node: {
        "metadata": {"labels": {HEALTH_LABEL: "failed", FAILED_CHECK_LABEL: label},
                     "annotations": {**annotations, **(_kept(node) if keep else {}), REASON_ANNOTATION: reason}},
        "spec": {"unschedulable": True, "taints": _taints_without_gate(node)}})


def hold_node(api: Api, node_name: str, label: str, reason: str, annotations: dict[str, Any],
              expected: Callable[[dict[str, Any]], bool] | None = None) -> bool:
    """The breaker's hold: the startup taint stays (value "held": nothing lands, kube-state-metrics'
    kube_node_spec_taint shows it to the GpuGateBreakerOpen alert), and the node is kept from
    scale-down: the autoscaler would otherwise delete it and bring up another that fails the
    same way. It does not stop the autoscaler from adding nodes while pods wait (README, "held")."""
    return _guarded(api, node_name, expected, lambda node: {
        "metadata": {"labels": {HEALTH_LABEL: "held", FAILED_CHECK_LABEL: label},
                     "annotations": {**annotations, **_kept(node), REASON_ANNOTATION: reason[:1024]}},
        "spec": {"taints": _taints_without_gate(node) + [_gate_taint("held")]}})


# --- the watchdog: the periodic pass over the GPU nodes ---------------------------------------


@dataclass(frozen=True)
class CordonCondition:
    """A DCGM exporter series that cordons its node when a sample is above `above` (and, with
    `label`, carries one of `values` there), from the alert rules' cordon blocks."""

    metric: str
    above: float = 0.0
    label: str | None = None
    values: tuple[str, ...] = ()

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> CordonCondition:
        return cls(str(raw["metric"]), float(raw.get("above", 0)), raw.get("label"),
                   tuple(str(v) for v in raw.get("values") or ()))


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
_LABEL_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Samples of a Prometheus text exposition: (name, labels, value); comments and junk skipped."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        samples.append((match.group(1), dict(_LABEL_PAIR.findall(match.group(2) or "")), value))
    return samples


def critical_findings(samples: list[tuple[str, dict[str, str], float]],
                      conditions: list[CordonCondition]) -> list[str]:
    """What in one exporter scrape cordons the node, as "metric{gpu=..,label=..}=value"."""
    found = []
    for name, labels, value in samples:
        for condition in conditions:
            if name != condition.metric or not value > condition.above:
                continue
            if condition.label and labels.get(condition.label) not in condition.values:
                continue
            where = ",".join(f"{key}={labels[key]}" for key in ("gpu", condition.label or "") if key in labels)
            found.append(f"{name}{{{where}}}={value:g}")
    return found


def npd_findings(node: dict[str, Any], cordon_types: set[str]) -> list[str]:
    """node-problem-detector conditions that are True and cordon a node."""
    return [f"{c.get('type')}: {c.get('reason') or ''} {c.get('message') or ''}".strip()
            for c in node.get("status", {}).get("conditions") or []
            if c.get("type") in cordon_types and c.get("status") == "True"]


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


def watchdog(api: Api, max_pending_minutes: float, now: datetime.datetime | None = None,
             policy: Policy | None = None, pools: list[str] | None = None, gate_enabled: bool = True,
             operator_pools: list[str] | None = None, cordon: list[CordonCondition] | None = None,
             npd_cordon: set[str] | None = None, exporter_namespaces: list[str] | None = None,
             exporter_port: int = 9400, fetch: Callable[[str], str] = get_text,
             acceptance_pools: set[str] | None = None,
             max_accepting_minutes: float | None = None,
             gate_resources: dict[str, str] | None = None) -> dict[str, list[str]]:
    """One pass over the GPU nodes of `pools`; returns the node names per action taken."""
    policy = policy or Policy()
    now = _now(now)
    done: dict[str, list[str]] = {"failed": [], "held": [], "released": [], "cordoned": [], "spared": [],
                                  "regated": [], "untainted": [], "operands": [], "stale": [], "unaccepted": [],
                                  "unstarted": []}
    if gate_enabled:
        for node in api.list_nodes(f"{HEALTH_LABEL}=pending"):
            metadata = node["metadata"]
            since = _timestamp(_annotations(node).get(PENDING_SINCE_ANNOTATION)) or \
                _timestamp(metadata.get("creationTimestamp"))
            if since is None or (now - since).total_seconds() / 60 <= max_pending_minutes:
                continue
            outcome = _per_node(metadata["name"], lambda: fail_or_hold(
                api, metadata["name"], "watchdog", "gate-timeout",
                f"pending for more than {max_pending_minutes:g} minutes: the check never ran or never finished "
                "(an image that cannot be pulled, a driver that never loads)"
                f"{_unadvertised(node, gate_resources or {})}",
                {CHECKED_AT_ANNOTATION: _stamp(now), PENDING_SINCE_ANNOTATION: None}, policy, now,
                _state_is("pending")))
            if outcome:
                done[outcome].append(metadata["name"])
    if not pools:
        return done
    nodes = api.list_nodes(_pool_selector(pools))
    # The cheap steps first: the passive scrapes may use up the pass's time on unreachable exporters.
    if not gate_enabled:
        done["untainted"] = release_gate(api, nodes, policy, set(operator_pools or ()), now)
    done["released"] = release_kept(api, nodes, policy, now)
    if gate_enabled and max_accepting_minutes is not None:
        done["unaccepted"] = release_unaccepted(api, nodes, policy, acceptance_pools or set(),
                                                max_accepting_minutes, now)
    if gate_enabled:
        done["unstarted"] = watch_unstarted(api, nodes, policy, max_pending_minutes, gate_resources or {}, now,
                                            done)
        done["operands"] = restore_operands(api, nodes, set(operator_pools or ()))
        done["regated"] = regate_changed(api, nodes, policy, set(operator_pools or ()), now)
    if cordon or npd_cordon:
        cordoned, spared = passive_cordon(api, nodes, policy, cordon or [], npd_cordon or set(),
                                          exporter_namespaces or [], exporter_port, fetch, gate_enabled, now)
        done["cordoned"], done["spared"] = cordoned, spared
    return done


def _unadvertised(node: dict[str, Any], gate_resources: dict[str, str]) -> str:
    """Why a gate pod could not be scheduled on the node, when its pool's gate resource (the RDMA
    resource of an InfiniBand pool) is not in the node's allocatable; else nothing."""
    resource = gate_resources.get(_labels(node).get(AGENT_POOL_LABEL, ""))
    if not resource or str((node.get("status", {}).get("allocatable") or {}).get(resource, "0")) != "0":
        return ""
    return (f"; its gate pod requests {resource}, which this node does not advertise: the NVIDIA Network "
            "Operator's DOCA driver or RDMA shared device plugin is not running here (kubectl -n "
            f"nvidia-network-operator get pods -o wide --field-selector spec.nodeName={node['metadata']['name']})")


def watch_unstarted(api: Api, nodes: list[dict[str, Any]], policy: Policy, max_minutes: float,
                    gate_resources: dict[str, str], now: datetime.datetime,
                    done: dict[str, list[str]]) -> list[str]:
    """Nodes of a gated pool that no gate pod has put under the gate (no aksgpu.io/gpu-health label).
    The gate's pod may never schedule there: on an InfiniBand pool it requests the RDMA resource
    (`gate_resources`, pool -> resource), which only the Network Operator's RDMA shared device
    plugin advertises, after its DOCA driver has loaded. Such a node advertises no GPUs (the
    device plugin waits for the verdict), so the autoscaler counts it unready
    (processors/customresources/gpu_processor.go, cluster-autoscaler-1.36.1) and deletes it once
    unneeded for scale-down-unready-time: without this step it would come and go with no story.
    First seen: annotated with the time and kept from scale-down. Still unstarted `max_minutes`
    later: failed (or held, by the breaker) with the reason, the missing resource named. The clock
    starts when the watchdog first sees the node (up to one pass after it joins), not at its
    creation: a node that joined before the gate existed gets the gate's pod later, and is only
    labelled "unchecked" then. Returns the nodes newly seen; failed or held ones go to `done`."""
    seen = []
    for node in nodes:
        labels, annotations = _labels(node), _annotations(node)
        if HEALTH_LABEL in labels or node.get("spec", {}).get("unschedulable"):
            continue
        name = node["metadata"]["name"]
        since = _timestamp(annotations.get(UNSTARTED_SINCE_ANNOTATION))
        if since is None:
            if _per_node(name, lambda: _guarded(api, name, _state_is(None), lambda current: {
                    "metadata": {"annotations": {UNSTARTED_SINCE_ANNOTATION: _stamp(now), **_kept(current)}}})):
                seen.append(name)
            continue
        waited = (now - since).total_seconds() / 60
        if waited <= max_minutes:
            continue
        outcome = _per_node(name, lambda: fail_or_hold(
            api, name, "watchdog", "gate-unstarted",
            f"no gate pod started on it in {waited:.0f} minutes (limit {max_minutes:g}), so its check never "
            f"began{_unadvertised(node, gate_resources)}",
            {CHECKED_AT_ANNOTATION: _stamp(now), UNSTARTED_SINCE_ANNOTATION: None}, policy, now, _state_is(None)))
        if outcome:
            done[outcome].append(name)
    return seen


def release_unaccepted(api: Api, nodes: list[dict[str, Any]], policy: Policy, acceptance_pools: set[str],
                       max_minutes: float, now: datetime.datetime) -> list[str]:
    """The backstop of the cross-node acceptance (fabric_acceptance.py decides within its hold
    bound): a node still "accepting" past `max_minutes` (the acceptance pass stopped running), or on
    a pool that no longer has the acceptance (turned off in the spec), takes work with a Warning:
    the gate never strands a node."""
    released = []
    for node in nodes:
        if _labels(node).get(HEALTH_LABEL) != ACCEPTING:
            continue
        name = node["metadata"]["name"]
        since = _timestamp(_annotations(node).get(ACCEPTANCE_SINCE_ANNOTATION)) or now
        waited = (now - since).total_seconds() / 60
        if _labels(node).get(AGENT_POOL_LABEL) in acceptance_pools and waited <= max_minutes:
            continue
        why = (f"waited {waited:.0f} minutes for the cross-node acceptance, past its bound ({max_minutes:g}): the "
               "acceptance pass is not deciding" if _labels(node).get(AGENT_POOL_LABEL) in acceptance_pools else
               "its pool no longer has the cross-node acceptance")

        def change(current: dict[str, Any]) -> dict[str, Any] | None:
            return {"metadata": {"labels": {HEALTH_LABEL: "passed"}, "annotations": {
                ACCEPTANCE_SINCE_ANNOTATION: None, "aksgpu.io/gpu-health-acceptance": "released-unmeasured",
                REASON_ANNOTATION: why}}, "spec": {"taints": _taints_without_gate(current)}}

        if not _per_node(name, lambda: _guarded(api, name, _state_is(ACCEPTING), change)):
            continue
        entry = verdict_entry(node, "watchdog", "passed", "fabric-acceptance", f"released unaccepted: {why}", now)
        log_verdict(entry)
        emit_event(api, node, "Warning", "GpuFabricUnaccepted", f"watchdog: released: {why}", now)
        append_record(api, policy.namespace, entry)
        released.append(name)
    return released


def restore_operands(api: Api, nodes: list[dict[str, Any]], operator_pools: set[str]) -> list[str]:
    """Switch the GPU Operator's device plugin and exporter back on for admitted nodes that have
    them "false". The pool creates its nodes with "false" (so no controller sees another first
    value), and AKS writes a pool's labels onto all its nodes again whenever they are updated
    (azure-aks-docs use-labels.md, "Updating labels on existing node pools"; Azure/AKS#3152), which
    turns the operands off on nodes that passed long ago. A driver upgrade's
    "paused-for-driver-upgrade" is the GPU Operator's and is left alone."""
    restored = []
    for node in nodes:
        labels = _labels(node)
        if (labels.get(AGENT_POOL_LABEL) not in operator_pools
                or labels.get(HEALTH_LABEL) not in ("passed", "unchecked")):
            continue
        if not any(labels.get(label) == "false" for label in HELD_OPERAND_LABELS):
            continue

        def change(current: dict[str, Any]) -> dict[str, Any] | None:
            current_labels = _labels(current)
            if current_labels.get(HEALTH_LABEL) not in ("passed", "unchecked"):
                return None
            switched = {label: "true" for label in HELD_OPERAND_LABELS if current_labels.get(label) == "false"}
            return {"metadata": {"labels": switched}} if switched else None

        if _per_node(node["metadata"]["name"], lambda: update_node(api, node["metadata"]["name"], change)) is None:
            continue
        print(f"aksgpu: {node['metadata']['name']}: the GPU Operator's device plugin and exporter switched on again "
              "(its pool's labels were written onto it)", flush=True)
        restored.append(node["metadata"]["name"])
    return restored


def release_gate(api: Api, nodes: list[dict[str, Any]], policy: Policy, operator_pools: set[str],
                 now: datetime.datetime) -> list[str]:
    """The gate is off: no node may keep its taint, and the GPU Operator's operands come back."""
    released = []
    for node in nodes:
        labels = _labels(node)
        tainted = any(t.get("key") == GATE_TAINT_KEY for t in node.get("spec", {}).get("taints") or [])
        held_operands = labels.get(AGENT_POOL_LABEL) in operator_pools and any(
            labels.get(label) == "false" for label in HELD_OPERAND_LABELS)
        if not tainted and labels.get(HEALTH_LABEL) not in ("pending", "held", ACCEPTING) and not held_operands:
            continue

        def change(current: dict[str, Any]) -> dict[str, Any] | None:
            current_labels = _labels(current)
            new_labels: dict[str, Any] = {}
            if current_labels.get(HEALTH_LABEL) in ("pending", "held", ACCEPTING):
                new_labels[HEALTH_LABEL] = "unchecked"
            if current_labels.get(AGENT_POOL_LABEL) in operator_pools:
                new_labels.update({label: "true" for label in HELD_OPERAND_LABELS
                                   if current_labels.get(label) == "false"})
            return {"metadata": {"labels": new_labels,
                                 "annotations": {PENDING_SINCE_ANNOTATION: None, **_unkept(current)}
                                 if current_labels.get(HEALTH_LABEL) in ("pending", "held", ACCEPTING) else {}},
                    "spec": {"taints": _taints_without_gate(current)}}

        if _per_node(node["metadata"]["name"], lambda: update_node(api, node["metadata"]["name"], change)) is None:
            continue
        report(api, policy, node, "watchdog", "untainted", None, "the gate is off: its taint and operand "
               "holds are removed; the node takes work unchecked", now)
        released.append(node["metadata"]["name"])
    return released


def release_kept(api: Api, nodes: list[dict[str, Any]], policy: Policy, now: datetime.datetime) -> list[str]:
    """Failed nodes past the pool's bound (the newest are kept) or older than keep_failed_hours
    lose scale-down-disabled: the autoscaler drains and deletes them when the pool is above its
    minimum. Their record stays."""
    kept: dict[str | None, list[tuple[datetime.datetime, dict[str, Any]]]] = {}
    for node in nodes:
        annotations = _annotations(node)
        if _labels(node).get(HEALTH_LABEL) != "failed" or annotations.get(KEPT_ANNOTATION) != "true":
            continue  # only nodes the gate itself keeps
        since = _timestamp(annotations.get(CHECKED_AT_ANNOTATION)) or now
        kept.setdefault(_labels(node).get(AGENT_POOL_LABEL), []).append((since, node))
    released = []
    for pool_nodes in kept.values():
        pool_nodes.sort(key=lambda item: (item[0], item[1]["metadata"]["name"]), reverse=True)
        for rank, (since, node) in enumerate(pool_nodes):
            too_old = (now - since).total_seconds() / 3600 > policy.keep_failed_hours
            if rank < policy.keep_failed and not too_old:
                continue
            name = node["metadata"]["name"]
            released_patch = {"metadata": {"annotations": {**_unkept(node), RELEASED_AT_ANNOTATION: _stamp(now)}}}
            if _per_node(name, lambda: update_node(
                    api, name, lambda _node: copy.deepcopy(released_patch))) is None:
                continue
            why = (f"kept {policy.keep_failed_hours:g} hours" if too_old
                   else f"the pool keeps its newest {policy.keep_failed} failed nodes")
            report(api, policy, node, "watchdog", "released", _labels(node).get(FAILED_CHECK_LABEL),
                   f"{why}: handed to the cluster autoscaler, which drains and deletes it when the pool is above "
                   "its minimum", now)
            released.append(name)
    return released


def passive_cordon(api: Api, nodes: list[dict[str, Any]], policy: Policy, cordon: list[CordonCondition],
                   npd_cordon: set[str], exporter_namespaces: list[str], exporter_port: int,
                   fetch: Callable[[str], str], gate_enabled: bool,
                   now: datetime.datetime) -> tuple[list[str], list[str]]:
    """Cordon nodes whose exporter shows a critical condition or whose node-problem-detector
    raised a GPU condition, through the same failure step as the check. Per pool, when more than
    the breaker's share of its nodes would be (or within the breaker's window were) cordoned this
    way, and at least its minimum, none is: a metric or detector gone wrong must not empty a pool,
    at once or a few nodes a pass; the alerts still fire. A spared node is reported once an hour,
    as an Event and a log line, not in the record (whose entries are the verdicts)."""
    by_name = {node["metadata"]["name"]: node for node in nodes}
    since = now - datetime.timedelta(minutes=policy.breaker_window_minutes)
    _, entries = read_record(api, policy.namespace)
    recent: dict[str | None, set[str]] = {}
    for entry in entries:
        if entry.get("source") == "passive" and entry.get("verdict") == "failed" and \
                (_timestamp(entry.get("time")) or since) > since:
            recent.setdefault(entry.get("pool"), set()).add(str(entry.get("node")))
    findings: dict[str, list[str]] = {}
    for name, node in by_name.items():
        if _labels(node).get(HEALTH_LABEL) in ("failed", "pending", "held"):
            continue
        found = npd_findings(node, npd_cordon)
        if found:
            findings[name] = found
    if cordon:
        for namespace in exporter_namespaces:
            pods = _per_node(namespace, lambda: api.list_pods(
                namespace, "app=nvidia-dcgm-exporter", "status.phase=Running")) or []
            for pod in pods:
                node_name = pod.get("spec", {}).get("nodeName")
                pod_ip = pod.get("status", {}).get("podIP")
                if node_name not in by_name or not pod_ip:
                    continue
                if _labels(by_name[node_name]).get(HEALTH_LABEL) in ("failed", "pending", "held"):
                    continue
                host = f"[{pod_ip}]" if ":" in pod_ip else pod_ip
                try:
                    text = fetch(f"http://{host}:{exporter_port}/metrics")
                except (urllib.error.URLError, OSError, ValueError) as error:
                    print(f"aksgpu: could not read the DCGM exporter on {node_name}: {error}", file=sys.stderr)
                    continue
                found = critical_findings(parse_metrics(text), cordon)
                if found:
                    findings.setdefault(node_name, []).extend(found)
    pool_sizes: dict[str | None, int] = {}
    for node in nodes:
        pool = _labels(node).get(AGENT_POOL_LABEL)
        pool_sizes[pool] = pool_sizes.get(pool, 0) + 1
    per_pool: dict[str | None, list[str]] = {}
    for name in findings:
        per_pool.setdefault(_labels(by_name[name]).get(AGENT_POOL_LABEL), []).append(name)
    cordoned, spared = [], []
    for pool, names in per_pool.items():
        affected = len(set(names) | recent.get(pool, set()))
        systemic = (policy.breaker and affected >= policy.breaker_min_nodes
                    and affected / pool_sizes[pool] > policy.breaker_share)
        for name in sorted(names):
            reason = "; ".join(findings[name])[:1024]
            if systemic:
                spared.append(name)
                last = _timestamp(_annotations(by_name[name]).get(SPARED_AT_ANNOTATION))
                if last is not None and (now - last).total_seconds() < 3600:
                    continue
                if _per_node(name, lambda: update_node(api, name, lambda _node: {"metadata": {
                        "annotations": {SPARED_AT_ANNOTATION: _stamp(now)}}})) is None:
                    continue
                report(api, policy, by_name[name], "passive", "spared", "passive",
                       f"{affected} of the {pool_sizes[pool]} nodes of pool {pool} showed critical conditions "
                       f"within {policy.breaker_window_minutes:g} minutes, which looks like a metric or detector "
                       f"gone wrong: none is cordoned, the alerts still fire. This node: {reason}", now, record=False)
                continue
            check = label_value("passive-" + findings[name][0].split("{")[0].split(":")[0])
            if not _per_node(name, lambda: fail_node(
                    api, name, check, f"passive: {reason}", {CHECKED_AT_ANNOTATION: _stamp(now)},
                    keep=policy.keep_failed > 0, expected=_state_is_not("failed", "pending", "held"))):
                continue
            report(api, policy, by_name[name], "passive", "failed", check, reason, now)
            cordoned.append(name)
    return cordoned, spared


def regate_changed(api: Api, nodes: list[dict[str, Any]], policy: Policy, operator_pools: set[str],
                   now: datetime.datetime) -> list[str]:
    """A passed node whose node image, kernel or driver changed since its check (a node-image
    upgrade keeps the Node object and its labels; a GPU Operator driver upgrade restarts the
    driver in place) is gated again, once no pod on it holds GPUs: those upgrades drain the node,
    so it is normally empty. A part first known now is recorded, not a change."""
    regated = []
    for node in nodes:
        if _labels(node).get(HEALTH_LABEL) != "passed":
            continue
        name = node["metadata"]["name"]
        recorded, current = recorded_fingerprint(node), fingerprint(node)
        changes = fingerprint_changes(recorded, current)
        if not changes:
            if current.keys() - recorded.keys():
                patch = {"metadata": {"annotations": {
                    FINGERPRINT_ANNOTATION: json.dumps({**recorded, **current}, sort_keys=True)}}}
                _per_node(name, lambda: update_node(api, name, lambda _node: copy.deepcopy(patch)))
            continue
        # Every pod bound to the node that has not finished: one still starting holds GPUs too.
        pods = _per_node(name, lambda: api.list_pods(
            field_selector=f"spec.nodeName={name},status.phase!=Succeeded,status.phase!=Failed"))
        if pods is None:
            continue
        busy = [pod for pod in pods if _requests_gpus(pod)]
        if busy:
            print(f"aksgpu: {name} changed ({', '.join(changes)}) but {len(busy)} pod(s) hold its GPUs: "
                  "gated again once they are gone", flush=True)
            continue
        hold_operands = _labels(node).get(AGENT_POOL_LABEL) in operator_pools

        def change(current_node: dict[str, Any]) -> dict[str, Any] | None:
            labels: dict[str, Any] = {HEALTH_LABEL: "pending"}
            if hold_operands:
                labels.update({label: "false" for label in HELD_OPERAND_LABELS})
            return {"metadata": {"labels": labels, "annotations": {PENDING_SINCE_ANNOTATION: _stamp(now)}},
                    "spec": {"taints": _taints_without_gate(current_node) + [_gate_taint("pending")]}}

        if not _per_node(name, lambda: _guarded(api, name, _state_is("passed"), change)):
            continue
        detail = ", ".join(f"{key} {recorded[key]} -> {current[key]}" for key in changes)
        report(api, policy, node, "watchdog", "regated", None, f"changed since its check: {detail}", now)
        regated.append(name)
    return regated


def _requests_gpus(pod: dict[str, Any]) -> bool:
    spec = pod.get("spec", {})
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = container.get("resources") or {}
        for kind in ("requests", "limits"):
            if any(key.endswith("/gpu") for key in (resources.get(kind) or {})):
                return True
    return False


def wait_for_driver(validations: str, timeout_seconds: float, interval: float = 5.0) -> bool:
    """Wait until the GPU Operator's validator marked the driver and toolkit ready on this node."""
    deadline = time.monotonic() + timeout_seconds
    ready = os.path.join(validations, "toolkit-ready")
    while time.monotonic() < deadline:
        if os.path.exists(ready):
            return True
        time.sleep(interval)
    return os.path.exists(ready)


def _names(text: str | None) -> list[str]:
    return [name for name in (text or "").split(",") if name]


def _pairs(text: str | None) -> dict[str, str]:
    """'pool=resource,...' as a dict."""
    return {key: value for key, _, value in (pair.partition("=") for pair in _names(text))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="node_gate.py", description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["pending", "wait-for-driver", "verdict", "hold", "watchdog"])
    parser.add_argument("--results", default="/var/run/aksgpu", help="folder shared with the check")
    parser.add_argument("--gate-daemonset", help="namespace/name of this gate's DaemonSet: nodes that joined "
                                                 "before it existed are not tainted")
    parser.add_argument("--hold-operands", action="store_true",
                        help="keep the GPU Operator's device plugin and DCGM exporter off the node until the verdict")
    parser.add_argument("--release-operands", action="store_true",
                        help="on a pass, hand them back to the GPU Operator")
    parser.add_argument("--recheck", action="store_true", help="a re-check of an admitted node")
    parser.add_argument("--validations", default="/run/nvidia/validations")
    parser.add_argument("--timeout-seconds", type=float, default=600.0)
    parser.add_argument("--max-pending-minutes", type=float, default=30.0)
    parser.add_argument("--hold", action="store_true", help="keep running after the verdict (a DaemonSet pod)")
    parser.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE", "aksgpu-system"),
                        help="where the Events and the record go")
    parser.add_argument("--keep-failed", type=int, default=2, help="failed nodes per pool kept from scale-down")
    parser.add_argument("--keep-failed-hours", type=float, default=24.0)
    parser.add_argument("--no-breaker", action="store_true", help="always fail, never hold")
    parser.add_argument("--breaker-share", type=float, default=0.5)
    parser.add_argument("--breaker-window-minutes", type=float, default=120.0)
    parser.add_argument("--breaker-min-nodes", type=int, default=3)
    parser.add_argument("--acceptance-pools", help="verdict: agent pools whose passed nodes wait for the "
                                                   "cross-node acceptance (InfiniBand), comma-separated")
    parser.add_argument("--max-accepting-minutes", type=float,
                        help="watchdog: release nodes held for the cross-node acceptance longer than this")
    parser.add_argument("--pools", help="watchdog: the GPU agent pools, comma-separated")
    parser.add_argument("--gate-resources",
                        help="watchdog: pool=resource pairs, comma-separated: what the gate's pod requests there "
                             "besides the GPUs (the RDMA resource on InfiniBand pools)")
    parser.add_argument("--operator-pools", help="watchdog: the GPU Operator pools among them")
    parser.add_argument("--gate-off", action="store_true", help="watchdog: the gate is off; release its nodes")
    parser.add_argument("--cordon-conditions", help="watchdog: JSON list of the exporter conditions that cordon")
    parser.add_argument("--npd-conditions", help="watchdog: node-problem-detector conditions that cordon")
    parser.add_argument("--exporter-namespaces", help="watchdog: where the DCGM exporters run")
    parser.add_argument("--exporter-port", type=int, default=9400)
    args = parser.parse_args(argv)
    policy = Policy(args.namespace, args.keep_failed, args.keep_failed_hours, not args.no_breaker,
                    args.breaker_share, args.breaker_window_minutes, args.breaker_min_nodes)
    if args.step == "hold":
        hold_forever()
    if args.step == "watchdog":
        conditions = [CordonCondition.parse(raw) for raw in json.loads(args.cordon_conditions or "[]")]
        done = watchdog(Api.in_cluster(), args.max_pending_minutes, policy=policy, pools=_names(args.pools),
                        gate_enabled=not args.gate_off, operator_pools=_names(args.operator_pools),
                        cordon=conditions, npd_cordon=set(_names(args.npd_conditions)),
                        exporter_namespaces=_names(args.exporter_namespaces), exporter_port=args.exporter_port,
                        acceptance_pools=set(_names(args.acceptance_pools)),
                        max_accepting_minutes=args.max_accepting_minutes,
                        gate_resources=_pairs(args.gate_resources))
        print("; ".join(f"{action}: {', '.join(names)}" for action, names in done.items() if names)
              or "nothing to do", flush=True)
        return 0
    node_name = os.environ["NODE_NAME"]
    if args.step == "wait-for-driver":
        ready = wait_for_driver(args.validations, args.timeout_seconds)
        print(f"{node_name}: GPU Operator driver and toolkit {'ready' if ready else 'not ready in time'}")
        return 0  # never block the check: it fails on its own if the driver is missing
    api = Api.in_cluster()
    if args.step == "pending":
        gate_since = None
        if args.gate_daemonset:
            namespace, _, name = args.gate_daemonset.partition("/")
            gate_since = _timestamp(api.get_daemonset(namespace, name)["metadata"].get("creationTimestamp"))
        print(f"{node_name}: {pending(api, node_name, args.results, gate_since, args.hold_operands)}")
        return 0
    outcome = verdict(api, node_name, args.results, recheck=args.recheck,
                      release_operands=args.release_operands, policy=policy,
                      acceptance_pools=frozenset(_names(args.acceptance_pools)))
    print(f"{node_name}: {outcome}", flush=True)
    if args.hold:
        hold_forever()
    return 0


def hold_forever() -> None:
    """A DaemonSet pod must keep running; the controller removes it once the node's
    aksgpu.io/gpu-health label no longer matches the DaemonSet's node affinity."""
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
