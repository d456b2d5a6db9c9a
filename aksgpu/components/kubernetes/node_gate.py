"""aksgpu's GPU node gate: the steps around a GPU check that change the node, run in the cluster.

This file is shipped to the cluster as a ConfigMap and run by `python3` (standard library only)
in the gate DaemonSets, the re-check CronJobs and the gate watchdog that GpuHealth declares. It
talks to the API server with its pod's service account (nodes: get and patch; the watchdog also
lists nodes; the gate reads its own DaemonSet). Every node change is a JSON merge patch carrying
the node's resourceVersion, retried on conflict, so it never overwrites a concurrent change.

Steps:
  pending   (init)  a node without a verdict gets the startup taint, aksgpu.io/gpu-health=pending
                    and the time it started waiting; with --hold-operands also
                    nvidia.com/gpu.deploy.device-plugin=false and ...dcgm-exporter=false, which the
                    GPU Operator honours: no GPU is advertised before the verdict, and no DCGM
                    client competes with the check. A node that joined before the gate's
                    DaemonSet existed, and was never checked, is only labelled "unchecked":
                    checking it could disturb its work; the re-checks cover it once idle.
  wait-for-driver   (init, GPU Operator pools) wait until the operator's validator has marked the
                    driver and container toolkit ready on this node.
  (the check itself runs between these, in the check's own image; see GpuHealth)
  verdict   (main)  read the check's exit code and report; pass: remove the taint, label passed
                    (and switch the held operands back on); fail: cordon, label failed
                    and the failed check, remove the taint, annotate why.
  hold      (main)  keep the pod alive until the node's verdict moves it off the node.
  watchdog  (CronJob) fail every node that has been pending too long: its check never ran or
                    never finished (an image that cannot be pulled, a driver that never loads).

The contract with the check: exit 0 passes the node, any other code fails it (1 a check failed,
124 the time limit ran out, others: the check could not run). It may write a JSON object to
$AKSGPU_REPORT; a string "failedCheck" there names the check in the node's label, and a string
"reason" is copied into the node's annotation.
"""

from __future__ import annotations

import argparse
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
from typing import Any

GATE_TAINT_KEY = "startup-taint.cluster-autoscaler.kubernetes.io/aksgpu-gpu-check"
HEALTH_LABEL = "aksgpu.io/gpu-health"
FAILED_CHECK_LABEL = "aksgpu.io/gpu-health-failed-check"
EXIT_CODE_ANNOTATION = "aksgpu.io/gpu-health-exit-code"
REASON_ANNOTATION = "aksgpu.io/gpu-health-reason"
CHECKED_AT_ANNOTATION = "aksgpu.io/gpu-health-checked-at"
PENDING_SINCE_ANNOTATION = "aksgpu.io/gpu-health-pending-since"
# The GPU Operator's per-node switches for the operands that must wait for the verdict; it keeps
# a value it finds (controllers/state_manager.go, v26.7.0) and sets "true" where there is none.
HELD_OPERAND_LABELS = ("nvidia.com/gpu.deploy.device-plugin", "nvidia.com/gpu.deploy.dcgm-exporter")
SKIP_FILE = "skip"  # in the results folder: the check must not run on this node
EXIT_CODE_FILE = "exit-code"
REPORT_FILE = "report.json"  # the check's JSON report ($AKSGPU_REPORT)
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
_LABEL_VALUE = re.compile(r"[^A-Za-z0-9_.-]+")


class Api:
    """The few node calls the gate needs, over the API server's REST interface."""

    def __init__(self, base_url: str, token: str | None, context: ssl.SSLContext | None) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.context = context

    @classmethod
    def in_cluster(cls) -> Api:
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

    def get_daemonset(self, namespace: str, name: str) -> dict[str, Any]:
        return self._request("GET", f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}")

    def merge_patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self._request("PATCH", f"/api/v1/nodes/{name}", patch, "application/merge-patch+json")


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


def _timestamp(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)


def _stamp(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def pending(api: Api, node_name: str, results: str, gate_since: datetime.datetime | None,
            hold_operands: bool = False, now: datetime.datetime | None = None) -> str:
    """Put a node without a verdict under the gate. `gate_since` is when the gate's DaemonSet was
    created (None: unknown, every such node is checked). Returns tainted, unchecked or kept."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    outcome = "kept"

    def change(node: dict[str, Any]) -> dict[str, Any] | None:
        nonlocal outcome
        metadata = node["metadata"]
        labels = metadata.get("labels") or {}
        annotations = metadata.get("annotations") or {}
        if labels.get(HEALTH_LABEL) in ("passed", "failed", "unchecked"):
            outcome = "kept"
            return None
        created = _timestamp(metadata.get("creationTimestamp"))
        checked_before = CHECKED_AT_ANNOTATION in annotations  # e.g. a repaired node handed back
        if (labels.get(HEALTH_LABEL) != "pending" and not checked_before and gate_since is not None
                and created is not None and created < gate_since):
            outcome = "unchecked"
            return {"metadata": {"labels": {HEALTH_LABEL: "unchecked"}}}
        outcome = "tainted"
        taints = _taints_without_gate(node) + [{"key": GATE_TAINT_KEY, "value": "pending", "effect": "NoSchedule"}]
        new_labels: dict[str, Any] = {HEALTH_LABEL: "pending"}
        if hold_operands:
            new_labels.update({label: "false" for label in HELD_OPERAND_LABELS})
        return {"metadata": {"labels": new_labels,
                             "annotations": {PENDING_SINCE_ANNOTATION: annotations.get(PENDING_SINCE_ANNOTATION)
                                             or _stamp(now)}},
                "spec": {"taints": taints}}

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
    report: dict[str, Any] = {}
    try:
        with open(os.path.join(results, REPORT_FILE), encoding="utf-8") as handle:
            loaded = json.load(handle)
        report = loaded if isinstance(loaded, dict) else {}
    except (OSError, ValueError):
        pass
    return code, report


def failure_reason(code: int, report: dict[str, Any]) -> tuple[str, str]:
    """(label value naming the failed check, human-readable reason) of a failed check."""
    check = report.get("failedCheck") if isinstance(report.get("failedCheck"), str) else None
    if check is None:
        check = {124: "timeout", 1: "check"}.get(code, "checker-error")
    label = _LABEL_VALUE.sub("-", check).strip("-._")[:63].strip("-._") or "check"
    reason = report.get("reason") if isinstance(report.get("reason"), str) else f"the check exited with code {code}"
    return label, reason[:1024]


def verdict(api: Api, node_name: str, results: str, recheck: bool = False,
            release_operands: bool = False, now: datetime.datetime | None = None) -> str:
    """Apply the check's result to the node: passed, failed or skipped."""
    code, report = read_result(results)
    if code is None:
        return "skipped"
    stamp = _stamp(now or datetime.datetime.now(datetime.timezone.utc))
    annotations = {CHECKED_AT_ANNOTATION: stamp, EXIT_CODE_ANNOTATION: str(code), PENDING_SINCE_ANNOTATION: None}
    if code == 0:
        def change(node: dict[str, Any]) -> dict[str, Any] | None:
            labels: dict[str, Any] = {HEALTH_LABEL: "passed", FAILED_CHECK_LABEL: None}
            if release_operands:
                # "true", the operator's own value: it only relabels a node on other events, so a
                # label left out would keep the operands off until the next node joins.
                labels.update({label: "true" for label in HELD_OPERAND_LABELS})
            patch: dict[str, Any] = {"metadata": {"labels": labels,
                                                  "annotations": {**annotations, REASON_ANNOTATION: None}}}
            if not recheck:
                patch["spec"] = {"taints": _taints_without_gate(node)}
            return patch

        update_node(api, node_name, change)
        return "passed"
    fail_node(api, node_name, *failure_reason(code, report), annotations)
    return "failed"


def fail_node(api: Api, node_name: str, label: str, reason: str, annotations: dict[str, Any]) -> None:
    """Cordon the node and say why. Cordoned, not left with the startup taint: the autoscaler
    would count a node that is "starting" forever as unready, and too many unready nodes stop it
    from scaling."""
    def change(node: dict[str, Any]) -> dict[str, Any] | None:
        return {"metadata": {"labels": {HEALTH_LABEL: "failed", FAILED_CHECK_LABEL: label},
                             "annotations": {**annotations, REASON_ANNOTATION: reason}},
                "spec": {"unschedulable": True, "taints": _taints_without_gate(node)}}

    update_node(api, node_name, change)


def watchdog(api: Api, max_pending_minutes: float, now: datetime.datetime | None = None) -> list[str]:
    """Fail every node pending for longer than `max_pending_minutes`; returns their names."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    failed = []
    for node in api.list_nodes(f"{HEALTH_LABEL}=pending"):
        metadata = node["metadata"]
        since = _timestamp((metadata.get("annotations") or {}).get(PENDING_SINCE_ANNOTATION)) or \
            _timestamp(metadata.get("creationTimestamp"))
        if since is None or (now - since).total_seconds() / 60 <= max_pending_minutes:
            continue
        fail_node(api, metadata["name"], "gate-timeout",
                  f"pending for more than {max_pending_minutes:g} minutes: the check never ran or never finished",
                  {CHECKED_AT_ANNOTATION: _stamp(now), PENDING_SINCE_ANNOTATION: None})
        failed.append(metadata["name"])
    return failed


def wait_for_driver(validations: str, timeout_seconds: float, interval: float = 5.0) -> bool:
    """Wait until the GPU Operator's validator marked the driver and toolkit ready on this node."""
    deadline = time.monotonic() + timeout_seconds
    ready = os.path.join(validations, "toolkit-ready")
    while time.monotonic() < deadline:
        if os.path.exists(ready):
            return True
        time.sleep(interval)
    return os.path.exists(ready)


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
    args = parser.parse_args(argv)
    if args.step == "hold":
        hold_forever()
    if args.step == "watchdog":
        failed = watchdog(Api.in_cluster(), args.max_pending_minutes)
        print(f"failed {len(failed)} node(s) pending too long: {', '.join(failed) or 'none'}")
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
                      release_operands=args.release_operands)
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
