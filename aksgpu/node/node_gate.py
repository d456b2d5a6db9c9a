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
                    joined before the gate's DaemonSet existed, and was never checked, is only
                    labelled "unchecked": checking it could disturb its work; the re-checks cover it
                    once idle. A node the breaker held is checked again.
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
import datetime
import json
import os
import sys
import time
from typing import Any

try:
    from aksgpu.node import node_api, node_passive, node_verdicts, node_watchdog
except ImportError:  # in the cluster: sibling files of one folder (the ConfigMap's keys)
    import node_api  # type: ignore[no-redef,import-not-found]
    import node_passive  # type: ignore[no-redef,import-not-found]
    import node_verdicts  # type: ignore[no-redef,import-not-found]
    import node_watchdog  # type: ignore[no-redef,import-not-found]


SKIP_FILE = "skip"  # in the results folder: the check must not run on this node
EXIT_CODE_FILE = "exit-code"
REPORT_FILE = "report.json"  # the check's JSON report ($AKSGPU_REPORT)


def pending(api: node_api.Api, node_name: str, results: str, gate_since: datetime.datetime | None,
            hold_operands: bool = False, now: datetime.datetime | None = None) -> str:
    """Put a node without a verdict under the gate. `gate_since` is when the gate's DaemonSet was
    created (None: unknown, every such node is checked). Returns tainted, unchecked or kept."""
    now = node_api._now(now)
    outcome = "kept"

    def change(node: dict[str, Any]) -> dict[str, Any] | None:
        nonlocal outcome
        labels = node_api._labels(node)
        annotations = node_api._annotations(node)
        if labels.get(node_api.HEALTH_LABEL) in ("passed", "failed", "unchecked", node_api.ACCEPTING):
            outcome = "kept"
            return None
        created = node_api._timestamp(node["metadata"].get("creationTimestamp"))
        checked_before = node_api.CHECKED_AT_ANNOTATION in annotations  # a repaired or held node
        # The watchdog's marks on a node no gate pod had reached yet (watch_unstarted) go now.
        unstarted: dict[str, Any] = ({node_api.UNSTARTED_SINCE_ANNOTATION: None, **node_api._unkept(node)}
                                     if node_api.UNSTARTED_SINCE_ANNOTATION in annotations else {})
        if (labels.get(node_api.HEALTH_LABEL) != "pending" and not checked_before and gate_since is not None
                and created is not None and created < gate_since):
            outcome = "unchecked"
            return {"metadata": {"labels": {node_api.HEALTH_LABEL: "unchecked"}, "annotations": unstarted}}
        outcome = "tainted"
        new_labels: dict[str, Any] = {node_api.HEALTH_LABEL: "pending"}
        if hold_operands:
            new_labels.update({label: "false" for label in node_api.HELD_OPERAND_LABELS})
        since = annotations.get(node_api.PENDING_SINCE_ANNOTATION) or node_api._stamp(now)
        new_annotations: dict[str, Any] = {node_api.PENDING_SINCE_ANNOTATION: since, **unstarted}
        if labels.get(node_api.HEALTH_LABEL) == "held":
            # Checked again (a new gate pod: a fixed image, or deleted by hand): the watchdog's
            # pending limit applies again, and so does the autoscaler.
            new_annotations.update({node_api.PENDING_SINCE_ANNOTATION: node_api._stamp(now), **node_api._unkept(node)})
        return {"metadata": {"labels": new_labels, "annotations": new_annotations},
                "spec": {"taints": node_api._taints_without_gate(node) + [node_api._gate_taint("pending")]}}

    node_api.update_node(api, node_name, change)
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
    return node_api.label_value(check), reason[:1024]


def verdict(api: node_api.Api, node_name: str, results: str, recheck: bool = False,
            release_operands: bool = False, now: datetime.datetime | None = None,
            policy: node_verdicts.Policy | None = None, acceptance_pools: frozenset[str] = frozenset()) -> str:
    """Apply the check's result to the node: passed (or accepting, on a pool in `acceptance_pools`:
    the cross-node acceptance decides), failed, held or skipped."""
    policy = policy or node_verdicts.Policy()
    now = node_api._now(now)
    code, check_report = read_result(results)
    if code is None:
        return "skipped"
    source = "recheck" if recheck else "gate"
    annotations = {node_api.CHECKED_AT_ANNOTATION: node_api._stamp(now), node_api.EXIT_CODE_ANNOTATION: str(code),
                   node_api.PENDING_SINCE_ANNOTATION: None}
    # A gate's check belongs to a pending node; a re-check's to an admitted one (any node but a
    # failed or gated one where the gate is off).
    expected = node_api._state_is_not("failed", "pending", "held") if recheck else node_api._state_is("pending")
    if code == 0:
        applied = True
        state = "passed"

        def change(node: dict[str, Any]) -> dict[str, Any] | None:
            nonlocal applied, state
            if not expected(node):
                applied = False
                return None
            accepting = not recheck and node_api._labels(node).get(node_api.AGENT_POOL_LABEL) in acceptance_pools
            state = node_api.ACCEPTING if accepting else "passed"
            labels: dict[str, Any] = {node_api.HEALTH_LABEL: state, node_api.FAILED_CHECK_LABEL: None}
            if release_operands:
                # "true", the operator's own value: it only relabels a node on other events, so a
                # label left out would keep the operands off until the next node joins.
                labels.update({label: "true" for label in node_api.HELD_OPERAND_LABELS})
            patch: dict[str, Any] = {"metadata": {"labels": labels, "annotations": {
                **annotations, node_api.REASON_ANNOTATION: None, **node_api._unkept(node),
                node_api.FINGERPRINT_ANNOTATION: json.dumps(node_verdicts.fingerprint(node), sort_keys=True)}}}
            if accepting:
                # Held for the acceptance: the taint stays with a value of its own, the device plugin
                # starts (its affinity takes "accepting"), only the acceptance job tolerates the taint.
                patch["metadata"]["annotations"][node_api.ACCEPTANCE_SINCE_ANNOTATION] = node_api._stamp(now)
                held = node_api._gate_taint(node_api.ACCEPTING)
                patch["spec"] = {"taints": node_api._taints_without_gate(node) + [held]}
            elif not recheck:
                patch["spec"] = {"taints": node_api._taints_without_gate(node)}
            return patch

        node = node_api.update_node(api, node_name, change)
        if not applied:
            return node_verdicts._stale(node_name, source, "passed", node)
        # "accepting" in the record, not "passed": the breaker counts the acceptance's own verdict of
        # the node, and a pass of the local check beside it would halve any systemic failure share.
        node_verdicts.report(api, policy, node, source, state, None,
                             "passed its check; held for the cross-node acceptance on this InfiniBand pool"
                             if state == node_api.ACCEPTING else "", now,
                             measurements=node_verdicts.measurements(check_report))
        return state
    check, reason = failure_reason(code, check_report)
    return node_verdicts.fail_or_hold(api, node_name, source, check, reason, annotations, policy, now, expected,
                                      measurements=node_verdicts.measurements(check_report))


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
    policy = node_verdicts.Policy(args.namespace, args.keep_failed, args.keep_failed_hours, not args.no_breaker,
                                  args.breaker_share, args.breaker_window_minutes, args.breaker_min_nodes)
    if args.step == "hold":
        hold_forever()
    if args.step == "watchdog":
        conditions = [node_passive.CordonCondition.parse(raw) for raw in json.loads(args.cordon_conditions or "[]")]
        done = node_watchdog.watchdog(node_api.Api.in_cluster(), args.max_pending_minutes, policy=policy,
                                      pools=_names(args.pools), gate_enabled=not args.gate_off,
                                      operator_pools=_names(args.operator_pools),
                                      cordon=conditions, npd_cordon=set(_names(args.npd_conditions)),
                                      exporter_namespaces=_names(args.exporter_namespaces),
                                      exporter_port=args.exporter_port,
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
    api = node_api.Api.in_cluster()
    if args.step == "pending":
        gate_since = None
        if args.gate_daemonset:
            namespace, _, name = args.gate_daemonset.partition("/")
            gate_since = node_api._timestamp(api.get_daemonset(namespace, name)["metadata"].get("creationTimestamp"))
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
