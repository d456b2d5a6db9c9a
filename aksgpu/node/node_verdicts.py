"""What a verdict does to a GPU node and what it leaves behind: the policy over failed nodes
(gpuHealth.gate), the node's software fingerprint, the three traces of every verdict (a JSON log
line, a Kubernetes Event on the Node, an entry in the record ConfigMap), the circuit breaker that
holds rather than fails when a pool's recent verdicts are mostly failures, and the failing and
holding of a node.

Standard library only: shipped beside node_gate.py as a key of the gate's ConfigMap."""

from __future__ import annotations

import datetime
import json
import os
import statistics
import sys
import time
import urllib.error
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

try:
    from aksgpu.node import node_api
except ImportError:  # in the cluster: sibling files of one folder (the ConfigMap's keys)
    import node_api  # type: ignore[no-redef,import-not-found]


RECORD_CONFIGMAP = "aksgpu-gpu-health-record"
RECORD_KEY = "verdicts"  # JSON lines, newest last
RECORD_ENTRIES = 500  # about 150-400 KB (entries with fingerprint and measurements): inside a ConfigMap's 1 MiB
# A ConfigMap's data is limited to 1 MiB (k8s.io/api core/v1 types.go ConfigMap; MaxSecretSize
# in pkg/apis/core/validation). The record keeps the newest entries within RECORD_BYTES too, so
# unusually long entries (non-ASCII reasons escaped by json.dumps) cannot push it over.
RECORD_BYTES = 900_000
LOG_PREFIX = "aksgpu-gpu-health"  # every verdict's JSON log line starts with it (Container Insights keeps it)
EVENT_SOURCE = "aksgpu-gpu-gate"
# Where Events about a Node go. The API server accepts an Event (without eventTime) whose
# involvedObject has no namespace, as a Node's, only in "default" (or no namespace)
# (kubernetes/kubernetes pkg/apis/core/validation/events.go legacyValidateEvent); the kubelet
# writes its node Events there too.
NODE_EVENT_NAMESPACE = "default"


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


ZONE_LABEL = "topology.kubernetes.io/zone"  # e.g. "eastus2-1"; absent on regional pools
# The GPU Operator (v26.7.0) puts no version of its own on a node (controllers/state_manager.go
# labels only operand switches and nvidia.com/vgpu.host-driver-version), so the gate learns the
# chart version from its pod's environment where aksgpu sets it.
GPU_OPERATOR_VERSION_ENV = "AKSGPU_GPU_OPERATOR_VERSION"


def fingerprint(node: dict[str, Any]) -> dict[str, str]:
    """What the GPUs run on: the node image (AKS's driver comes with it), the kernel, and, on GPU
    Operator pools, the driver GPU Feature Discovery reports. A change means a check is due."""
    labels = node_api._labels(node)
    info = node.get("status", {}).get("nodeInfo") or {}
    found = {"nodeImage": labels.get(node_api.NODE_IMAGE_LABEL), "kernel": info.get("kernelVersion"),
             "driver": ".".join(labels[key] for key in node_api.DRIVER_LABELS if labels.get(key)) or None}
    return {key: value for key, value in found.items() if value}


def recorded_fingerprint(node: dict[str, Any]) -> dict[str, str]:
    try:
        loaded = json.loads(node_api._annotations(node).get(node_api.FINGERPRINT_ANNOTATION) or "{}")
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


def emit_event(api: node_api.Api, node: dict[str, Any], kind: str, reason: str, message: str,
               now: datetime.datetime | None = None) -> None:
    """A core/v1 Event about the Node, where `kubectl describe node` finds it: kubectl looks up a
    node's Events by kind, name and a uid equal to the node's name (kubectl pkg/describe
    describe.go NodeDescriber; the kubelet's node reference uses the name as uid too). Best effort:
    a lost Event must not stop a verdict."""
    metadata = node.get("metadata", {})
    stamp = node_api._stamp(node_api._now(now))
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


def read_record(api: node_api.Api, namespace: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
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


def append_record(api: node_api.Api, namespace: str,
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
        while len(lines) > 1 and sum(len(line.encode()) + 1 for line in lines) > RECORD_BYTES:
            lines.pop(0)
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


def report(api: node_api.Api, policy: Policy, node: dict[str, Any], source: str, outcome: str, check: str | None,
           reason: str, now: datetime.datetime | None = None, record: bool = True,
           measurements: dict[str, float] | None = None) -> dict[str, Any]:
    """Leave the three traces of a verdict: the log line, the Event and (unless `record` is off:
    already recorded, or not a verdict) the record entry."""
    entry = verdict_entry(node, source, outcome, check, reason, now, measurements)
    log_verdict(entry)
    kind = "Normal" if outcome in ("passed", "released", node_api.ACCEPTING) else "Warning"
    event_reason = {"passed": "GpuCheckPassed", node_api.ACCEPTING: "GpuCheckPassed", "failed": "GpuCheckFailed",
                    "held": "GpuGateBreakerOpen",
                    "released": "GpuNodeReleased", "regated": "GpuNodeRegated",
                    "spared": "GpuPassiveBreakerOpen", "untainted": "GpuGateOff"}.get(outcome, "GpuHealth")
    text = f"{source}: {outcome}" + (f" ({check})" if check else "") + (f": {reason}" if reason else "")
    emit_event(api, node, kind, event_reason, text, now)
    if record:
        append_record(api, policy.namespace, entry)
    return entry


def verdict_entry(node: dict[str, Any], source: str, outcome: str, check: str | None, reason: str,
                  now: datetime.datetime | None = None,
                  measurements: dict[str, float] | None = None) -> dict[str, Any]:
    """One verdict as the log line, the record and `aksgpu promote` read it (the contract of
    docs/guides/promotion.md): time, node, pool, vmSize, source, verdict, check, reason; and where
    known zone, secondsToVerdict (gate verdicts: from the Node's creation), fingerprint (nodeImage,
    kernel, driver, gpuOperator) and measurements (see `measurements`)."""
    labels = node_api._labels(node)
    metadata = node.get("metadata", {})
    moment = node_api._now(now)
    entry: dict[str, Any] = {
        "time": node_api._stamp(moment), "node": metadata.get("name"),
        "pool": labels.get(node_api.AGENT_POOL_LABEL), "vmSize": labels.get("node.kubernetes.io/instance-type"),
        "source": source, "verdict": outcome, "check": check, "reason": reason[:512]}
    if labels.get(ZONE_LABEL):
        entry["zone"] = labels[ZONE_LABEL]
    created = node_api._timestamp(metadata.get("creationTimestamp"))
    if source == "gate" and created is not None:
        entry["secondsToVerdict"] = max(0, int((moment - created).total_seconds()))
    found = fingerprint(node)
    operator = os.environ.get(GPU_OPERATOR_VERSION_ENV)
    if operator:
        found["gpuOperator"] = operator
    if found:
        entry["fingerprint"] = found
    if measurements:
        entry["measurements"] = measurements
    return entry


def measurements(check_report: dict[str, Any]) -> dict[str, float]:
    """What the check measured, from its JSON report (gpu_check/report.py report_json): the median
    over the node's GPUs of the dense GEMM (TFLOPS) and of the device memory bandwidth (GB/s; the
    check reports TB/s), and the intra-node all-reduce bus bandwidth (GB/s, nccl-tests' busbw).
    Keys are absent where the check did not measure (level, one GPU, a failure before)."""
    per_gpu: dict[str, list[float]] = {"gemm": [], "memory-bandwidth": []}
    gpus = check_report.get("gpus")
    for gpu in (gpus.values() if isinstance(gpus, dict) else []):
        for result in (gpu.get("checks") or []) if isinstance(gpu, dict) else []:
            value = result.get("value") if isinstance(result, dict) else None
            if isinstance(value, (int, float)) and result.get("check") in per_gpu:
                scale = 1000.0 if result.get("unit") == "TB/s" else 1.0
                per_gpu[result["check"]].append(float(value) * scale)
    found: dict[str, float] = {}
    if per_gpu["gemm"]:
        found["gemmTflopsMedian"] = round(statistics.median(per_gpu["gemm"]), 1)
    if per_gpu["memory-bandwidth"]:
        found["hbmBandwidthGbpsMedian"] = round(statistics.median(per_gpu["memory-bandwidth"]), 1)
    node_checks = check_report.get("nodeChecks")
    for result in node_checks if isinstance(node_checks, list) else []:
        value = result.get("value") if isinstance(result, dict) else None
        if isinstance(value, (int, float)) and result.get("check") == "nccl-allreduce":
            found["ncclBusBwGbps"] = round(float(value), 1)
    return found


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
              and (node_api._timestamp(e.get("time")) or since) > since]
    failures = sum(1 for e in recent if e.get("verdict") in ("failed", "held")) + 1
    total = len(recent) + 1
    figures = (f"{failures} of the last {total} check verdicts of pool {pool} within "
               f"{policy.breaker_window_minutes:g} minutes failed")
    return total >= policy.breaker_min_nodes and failures / total > policy.breaker_share, figures


def _stale(node_name: str, source: str, outcome: str, node: dict[str, Any]) -> str:
    print(f"aksgpu: {node_name}: {source} verdict {outcome} not applied: the node is "
          f"{node_api._labels(node).get(node_api.HEALTH_LABEL) or 'unlabelled'} now", flush=True)
    return "stale"


def fail_or_hold(api: node_api.Api, node_name: str, source: str, check: str, reason: str, annotations: dict[str, Any],
                 policy: Policy, now: datetime.datetime,
                 expected: Callable[[dict[str, Any]], bool] | None = None,
                 measurements: dict[str, float] | None = None) -> str:
    """A check failed: fail the node, unless the pool's breaker is open, then hold it; "stale" when
    the node is no longer in the `expected` state. `measurements` go into the record as they are."""
    node = api.get_node(node_name)
    decision: dict[str, str] = {}

    def decide(entries: list[dict[str, Any]]) -> dict[str, Any]:
        # Made on the record it is added to: verdicts of a burst, landing together, each see the
        # ones before them (a conflict makes append_record read again and decide again).
        is_open, figures = breaker_open(entries, node_api._labels(node).get(node_api.AGENT_POOL_LABEL), policy, now)
        decision["outcome"] = "held" if is_open else "failed"
        decision["reason"] = (f"circuit breaker open: {figures}, which points at the check's image, the driver or "
                              f"the node image rather than this node's GPUs; held, not failed. The check said: "
                              f"{reason}") if is_open else reason
        return verdict_entry(node, source, decision["outcome"], check, decision["reason"], now, measurements)

    recorded = append_record(api, policy.namespace, decide)
    if not decision:
        decide([])  # the record could not be read: decide without it
    outcome, why = decision["outcome"], decision["reason"]
    applied = (hold_node(api, node_name, check, why, annotations, expected) if outcome == "held" else
               fail_node(api, node_name, check, why, annotations, keep=policy.keep_failed > 0, expected=expected))
    if not applied:
        return _stale(node_name, source, outcome, api.get_node(node_name))
    report(api, policy, node, source, outcome, check, why, now, record=not recorded, measurements=measurements)
    return outcome


def fail_node(api: node_api.Api, node_name: str, label: str, reason: str, annotations: dict[str, Any],
              keep: bool = True, expected: Callable[[dict[str, Any]], bool] | None = None) -> bool:
    """Cordon the node and say why. Cordoned, not left with the startup taint: the autoscaler
    would count a node that is "starting" forever as unready, and too many unready nodes stop it
    from scaling. Kept from scale-down for diagnosis (the watchdog enforces the pool's bound)."""
    return node_api._guarded(api, node_name, expected, lambda node: {
        "metadata": {"labels": {node_api.HEALTH_LABEL: "failed", node_api.FAILED_CHECK_LABEL: label},
                     "annotations": {**annotations, **(node_api._kept(node) if keep else {}),
                                     node_api.REASON_ANNOTATION: reason}},
        "spec": {"unschedulable": True, "taints": node_api._taints_without_gate(node)}})


def hold_node(api: node_api.Api, node_name: str, label: str, reason: str, annotations: dict[str, Any],
              expected: Callable[[dict[str, Any]], bool] | None = None) -> bool:
    """The breaker's hold: the startup taint stays (value "held": nothing lands, kube-state-metrics'
    kube_node_spec_taint shows it to the GpuGateBreakerOpen alert), and the node is kept from
    scale-down: the autoscaler would otherwise delete it and bring up another that fails the
    same way. It does not stop the autoscaler from adding nodes while pods wait (README, "held")."""
    return node_api._guarded(api, node_name, expected, lambda node: {
        "metadata": {"labels": {node_api.HEALTH_LABEL: "held", node_api.FAILED_CHECK_LABEL: label},
                     "annotations": {**annotations, **node_api._kept(node), node_api.REASON_ANNOTATION: reason[:1024]}},
        "spec": {"taints": node_api._taints_without_gate(node) + [node_api._gate_taint("held")]}})
