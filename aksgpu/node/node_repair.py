"""aksgpu's GPU node repair loop: read the cluster, decide (repair_decision.py), act, record.

Run by the aksgpu-gpu-repair CronJob on the system pool (python3, standard library only, from a
ConfigMap beside node_api.py, node_verdicts.py, repair_decision.py and repair_azure.py). Each pass:
  read     the GPU pools' nodes (the gate's verdict and failure time, the repair's own marks, the
           VMSS instance in the providerID, AKS node-problem-detector's VMEventScheduled condition),
           the pods still on each (DaemonSet, mirror and finished pods stay) and the
           PodDisruptionBudgets that allow no disruption of them, Azure Scheduled Events from IMDS
           (--imds-events), and the repair actions in the gate's record ConfigMap;
  decide   repair_decision.decide: nothing, wait, drain, reimage, delete or release per node;
  act      drain: cordon and evict through the Eviction API (a budget that allows no disruption
           answers 429 and the pod stays); reimage: the VMSS instance through Azure Resource
           Manager, then the node goes back under the gate (label pending, the gate's taint,
           uncordoned: the gate checks it again), or, where Azure denies that (403: node resource
           group lockdown), a delete instead; delete: the node through AKS (agentPools/deleteMachines,
           never the scale set directly); release: a node drained for a Scheduled Event that is over
           is uncordoned;
  record   every action: a Kubernetes Event on the Node, the node's aksgpu.io/gpu-repair
           annotations, a JSON log line, and an entry (source "repair") in the record ConfigMap.
With --dry-run it changes nothing and calls nothing of Azure: it prints what it would do."""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import urllib.error
from typing import Any, Protocol

try:
    from aksgpu.node import node_api, node_verdicts, repair_azure, repair_decision
except ImportError:  # in the cluster: sibling files of one folder (the ConfigMap's keys)
    import node_api  # type: ignore[no-redef,import-not-found]
    import node_verdicts  # type: ignore[no-redef,import-not-found]
    import repair_azure  # type: ignore[no-redef,import-not-found]
    import repair_decision  # type: ignore[no-redef,import-not-found]


REPAIR_ANNOTATION = "aksgpu.io/gpu-repair"  # draining, reimaging, deleting, event-drained, repaired
REPAIR_AT_ANNOTATION = "aksgpu.io/gpu-repair-at"
REPAIR_REASON_ANNOTATION = "aksgpu.io/gpu-repair-reason"
REIMAGES_ANNOTATION = "aksgpu.io/gpu-repair-reimages"
EVENT_DRAINED = "event-drained"
EVENT_CONDITION = "VMEventScheduled"  # AKS node-problem-detector (azure-aks-docs node-problem-detector.md)
SOURCE = "repair"
AFTERWARDS = {"release": "the Azure Scheduled Event it was drained for is over: uncordoned unless the gate "
                         "keeps it out", "repaired": "passed the gate's check after its reimage"}
EVENT_REASONS = {"drain": "GpuRepairDrain", "reimage": "GpuRepairReimage", "delete": "GpuRepairDelete",
                 "release": "GpuRepairRelease", "repaired": "GpuRepairDone", "error": "GpuRepairFailed"}


class Compute(Protocol):
    """What the loop needs of Azure (repair_azure.AzureCompute; a fake in the tests)."""

    def reimage(self, instance: repair_azure.Instance) -> None: ...

    def delete_machine(self, pool: str, machine: str) -> None: ...


class Api(node_api.Api):
    """The gate's client, with the calls a drain needs."""

    def list_budgets(self) -> list[dict[str, Any]]:
        return self._request("GET", "/apis/policy/v1/poddisruptionbudgets").get("items") or []

    def evict(self, namespace: str, name: str) -> None:
        """The Eviction API: a PodDisruptionBudget that allows no disruption answers 429."""
        self._request("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", {
            "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}})


def _matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A label selector (matchLabels, matchExpressions) against a pod's labels; a null selector
    selects nothing, an empty one everything (policy/v1 PodDisruptionBudget)."""
    if selector is None:
        return False
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
        present = key in labels
        if ((operator == "In" and labels.get(key) not in values) or (operator == "NotIn" and present
                                                                     and labels[key] in values)
                or (operator == "Exists" and not present) or (operator == "DoesNotExist" and present)):
            return False
    return True


def evictable(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods a drain moves: not a DaemonSet's (its controller ignores cordons), not a mirror pod,
    not finished (kubectl drain's filters)."""
    return [pod for pod in pods
            if pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")
            and "kubernetes.io/config.mirror" not in (pod["metadata"].get("annotations") or {})
            and not any(owner.get("kind") == "DaemonSet" for owner in pod["metadata"].get("ownerReferences") or [])]


def blocking_budgets(pods: list[dict[str, Any]], budgets: list[dict[str, Any]]) -> tuple[str, ...]:
    """namespace/name of the budgets that cover one of `pods` and allow no disruption now."""
    found = set()
    for budget in budgets:
        if (budget.get("status") or {}).get("disruptionsAllowed", 0) > 0:
            continue
        namespace = budget["metadata"].get("namespace")
        if any(pod["metadata"].get("namespace") == namespace
               and _matches(budget.get("spec", {}).get("selector"), pod["metadata"].get("labels") or {})
               for pod in pods):
            found.add(f"{namespace}/{budget['metadata']['name']}")
    return tuple(sorted(found))


def node_events(node: dict[str, Any], imds_events: list[dict[str, Any]]) -> tuple[repair_decision.ScheduledEvent, ...]:
    """The node's Scheduled Events: IMDS's that name its VMSS instance in Resources, and AKS
    node-problem-detector's VMEventScheduled condition (its message format is not documented: a
    type named in it is taken, otherwise the event counts as a Reboot)."""
    found = []
    instance = repair_azure.instance_of(node.get("spec", {}).get("providerID"))
    for event in imds_events:
        names = {str(name).lower().lstrip("_") for name in event.get("Resources") or []}
        if instance and instance.event_name in names:
            found.append(repair_decision.ScheduledEvent(str(event.get("EventType")), str(event.get("NotBefore") or ""),
                                                        str(event.get("EventId") or ""),
                                                        str(event.get("EventStatus") or "Scheduled")))
    for condition in node.get("status", {}).get("conditions") or []:
        if condition.get("type") == EVENT_CONDITION and condition.get("status") == "True":
            message = str(condition.get("message") or "")
            kind = next((t for t in repair_decision.EVENT_TYPES if t.lower() in message.lower()), "Reboot")
            found.append(repair_decision.ScheduledEvent(kind, "", EVENT_CONDITION))
    return tuple(found)


def node_state(node: dict[str, Any], pods: list[dict[str, Any]], budgets: list[dict[str, Any]],
               imds_events: list[dict[str, Any]]) -> repair_decision.NodeState:
    labels, annotations = node_api._labels(node), node_api._annotations(node)
    moving = evictable(pods)
    try:
        reimages = int(annotations.get(REIMAGES_ANNOTATION) or 0)
    except ValueError:
        reimages = 0
    return repair_decision.NodeState(
        name=node["metadata"]["name"], pool=labels.get(node_api.AGENT_POOL_LABEL),
        health=labels.get(node_api.HEALTH_LABEL),
        failed_at=node_api._timestamp(annotations.get(node_api.CHECKED_AT_ANNOTATION)),
        failed_check=labels.get(node_api.FAILED_CHECK_LABEL), repair=annotations.get(REPAIR_ANNOTATION),
        repair_at=node_api._timestamp(annotations.get(REPAIR_AT_ANNOTATION)), reimages=reimages,
        pods_left=len(moving), blocking_budgets=blocking_budgets(moving, budgets),
        events=node_events(node, imds_events),
        vmss_instance=repair_azure.instance_of(node.get("spec", {}).get("providerID")) is not None)


def recent_actions(entries: list[dict[str, Any]]) -> list[repair_decision.RecentAction]:
    found = []
    for entry in entries:
        when = node_api._timestamp(entry.get("time"))
        if entry.get("source") == SOURCE and when is not None:
            found.append(repair_decision.RecentAction(str(entry.get("node")), entry.get("pool"),
                                                      str(entry.get("verdict")), when))
    return found


def _mark(state: str, reason: str, now: datetime.datetime, **extra: Any) -> dict[str, Any]:
    return {REPAIR_ANNOTATION: state, REPAIR_AT_ANNOTATION: node_api._stamp(now),
            REPAIR_REASON_ANNOTATION: reason[:1024], **extra}


def _record(api: Api, namespace: str, node: dict[str, Any], decision: repair_decision.Decision, action: str,
            now: datetime.datetime, warning: bool = False) -> None:
    """The log line, the Event on the Node and the record entry of one action."""
    entry = node_verdicts.verdict_entry(node, SOURCE, action, None, decision.reason, now)
    node_verdicts.log_verdict(entry)
    node_verdicts.emit_event(api, node, "Warning" if warning or action in ("reimage", "delete") else "Normal",
                             EVENT_REASONS.get(action, "GpuRepair"), f"{SOURCE}: {action}: {decision.reason}", now)
    node_verdicts.append_record(api, namespace, entry)


def drain(api: Api, node: dict[str, Any], pods: list[dict[str, Any]], decision: repair_decision.Decision,
          now: datetime.datetime) -> tuple[int, int]:
    """Cordon, mark and evict: (evicted, refused by a budget). The mark changes once per drain."""
    name = node["metadata"]["name"]
    state = EVENT_DRAINED if decision.event is not None else "draining"
    node_api.update_node(api, name, lambda current: None if (
        current.get("spec", {}).get("unschedulable") and node_api._annotations(current).get(REPAIR_ANNOTATION) == state
    ) else {"metadata": {"annotations": _mark(state, decision.reason, now)}, "spec": {"unschedulable": True}})
    evicted = refused = 0
    for pod in evictable(pods):
        try:
            api.evict(pod["metadata"]["namespace"], pod["metadata"]["name"])
            evicted += 1
        except urllib.error.HTTPError as error:
            if error.code == 429:
                refused += 1
            elif error.code != 404:  # gone already
                raise
    return evicted, refused


def back_under_gate(node: dict[str, Any], reason: str, now: datetime.datetime) -> dict[str, Any]:
    """The patch that puts a reimaged node back under the gate: labelled pending with the gate's
    taint (its DaemonSet's pod comes and checks it, as a new node's), uncordoned (the taint keeps
    work off until the verdict), its failure and the gate's hold on it cleared."""
    reimages = int(node_api._annotations(node).get(REIMAGES_ANNOTATION) or 0) + 1
    return {"metadata": {
        "labels": {node_api.HEALTH_LABEL: "pending", node_api.FAILED_CHECK_LABEL: None},
        "annotations": {**_mark("reimaging", reason, now, **{REIMAGES_ANNOTATION: str(reimages)}),
                        node_api.PENDING_SINCE_ANNOTATION: node_api._stamp(now), node_api.REASON_ANNOTATION: None,
                        **node_api._unkept(node)}},
        "spec": {"unschedulable": False,
                 "taints": node_api._taints_without_gate(node) + [node_api._gate_taint("pending")]}}


def _delete(api: Api, compute: Compute, node: dict[str, Any], reason: str, now: datetime.datetime) -> None:
    """Delete the node through AKS (its agent pool's deleteMachines; the machine name is the node
    name) and mark it deleting."""
    name = node["metadata"]["name"]
    compute.delete_machine(node_api._labels(node).get(node_api.AGENT_POOL_LABEL) or "", name)
    node_api.update_node(api, name, lambda _current: {"metadata": {"annotations": _mark("deleting", reason, now)}})


def apply(api: Api, compute: Compute, namespace: str, nodes: dict[str, dict[str, Any]],
          pods: dict[str, list[dict[str, Any]]], decisions: list[repair_decision.Decision],
          now: datetime.datetime) -> dict[str, list[str]]:
    """Carry out the decisions; one node's error is recorded and the pass goes on."""
    done: dict[str, list[str]] = {"drain": [], "reimage": [], "delete": [], "release": [], "repaired": [],
                                  "error": []}
    for decision in decisions:
        node = nodes[decision.node]
        try:
            acted = _act(api, compute, node, pods.get(decision.node, []), decision, now)
        except (OSError, ValueError) as error:  # urllib's HTTPError and URLError are OSErrors
            failed = repair_decision.Decision(decision.node, decision.pool, decision.action,
                                              f"{decision.action} failed: {error}; tried again next pass")
            _record(api, namespace, node, failed, "error", now, warning=True)
            done["error"].append(decision.node)
            continue
        if acted:
            # The reason recorded: what was decided, what is over (AFTERWARDS), or why it went otherwise.
            action, reason = acted
            done[action].append(decision.node)
            _record(api, namespace, node, repair_decision.Decision(decision.node, decision.pool, decision.action,
                                                                   reason), action, now)
    return done


def _act(api: Api, compute: Compute, node: dict[str, Any], pods: list[dict[str, Any]],
         decision: repair_decision.Decision, now: datetime.datetime) -> tuple[str, str] | None:
    """One decision; the action to record and why, or None (nothing new to record)."""
    name = node["metadata"]["name"]
    annotations = node_api._annotations(node)
    health = node_api._labels(node).get(node_api.HEALTH_LABEL)
    if decision.action == "drain":
        evicted, refused = drain(api, node, pods, decision, now)
        print(f"aksgpu: {name}: {evicted} pod(s) evicted, {refused} kept by their budgets", flush=True)
        return ("drain", decision.reason) if annotations.get(REPAIR_ANNOTATION) not in ("draining", EVENT_DRAINED) \
            else None
    if decision.action in ("reimage", "delete"):
        instance = repair_azure.instance_of(node.get("spec", {}).get("providerID"))
        if instance is None:
            raise ValueError(f"providerID {node.get('spec', {}).get('providerID')!r} names no VMSS instance")
        if decision.action == "reimage":
            try:
                compute.reimage(instance)
            except urllib.error.HTTPError as error:
                if error.code != 403:
                    raise
                # Denied: node resource group lockdown (ReadOnly) forbids the scale set's reimage,
                # and AKS has no reimage of one node; its delete through AKS is allowed.
                reason = (f"{decision.reason}; the reimage was denied (403 {error.reason}: node resource group "
                          "lockdown?), so the node is deleted through AKS instead")
                _delete(api, compute, node, reason, now)
                return "delete", reason
            node_api.update_node(api, name, lambda current: back_under_gate(current, decision.reason, now))
        else:
            _delete(api, compute, node, decision.reason, now)
        return decision.action, decision.reason
    if annotations.get(REPAIR_ANNOTATION) == EVENT_DRAINED and decision.event is None:
        # The Scheduled Event is over: a node the gate admitted takes work again.
        uncordon = health in ("passed", "unchecked", None)
        node_api.update_node(api, name, lambda _current: {"metadata": {"annotations": _mark(
            "released", AFTERWARDS["release"], now)},
            **({"spec": {"unschedulable": False}} if uncordon else {})})
        return "release", AFTERWARDS["release"]
    if annotations.get(REPAIR_ANNOTATION) == "reimaging" and health in ("passed", "unchecked"):
        node_api.update_node(api, name, lambda _current: {"metadata": {"annotations": _mark(
            "repaired", AFTERWARDS["repaired"], now)}})
        return "repaired", AFTERWARDS["repaired"]
    return None


def describe(decisions: list[repair_decision.Decision], dry_run: bool) -> list[str]:
    """One line per decision worth reading (a node with nothing to do and nothing in its way is left out)."""
    prefix = "dry-run: would " if dry_run else ""
    return [f"{d.node} ({d.pool}): {prefix if d.action not in ('nothing', 'wait') else ''}{d.action}: {d.reason}"
            for d in decisions if d.action != "nothing" or not d.reason.startswith("gate verdict")]


def run(api: Api, compute: Compute | None, pools: list[str], policy: repair_decision.RepairPolicy, namespace: str,
        now: datetime.datetime, dry_run: bool, imds_events: list[dict[str, Any]] | None = None) -> list[str]:
    """One pass; the lines it prints."""
    found = api.list_nodes(node_api._pool_selector(pools))
    nodes = {node["metadata"]["name"]: node for node in found}
    budgets = api.list_budgets()
    pods = {name: api.list_pods(field_selector=f"spec.nodeName={name}") for name in sorted(nodes)}
    _, entries = node_verdicts.read_record(api, namespace)
    states = [node_state(nodes[name], pods[name], budgets, imds_events or []) for name in sorted(nodes)]
    decisions = repair_decision.decide(states, policy, recent_actions(entries), now)
    lines = describe(decisions, dry_run)
    if not dry_run and compute is not None:
        done = apply(api, compute, namespace, nodes, pods, decisions, now)
        lines.append("; ".join(f"{action}: {', '.join(names)}" for action, names in done.items() if names)
                     or "nothing to do")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="node_repair.py", description=__doc__.splitlines()[0])
    parser.add_argument("--pools", required=True, help="the GPU agent pools to repair, comma-separated")
    parser.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE", "aksgpu-system"))
    parser.add_argument("--dry-run", action="store_true", help="print what it would do; change nothing")
    parser.add_argument("--imds-events", action="store_true",
                        help="also read Azure Scheduled Events from IMDS (those of this VM's placement group)")
    parser.add_argument("--diagnosis-window-minutes", type=float, default=60.0)
    parser.add_argument("--max-unavailable-percent", type=float, default=10.0)
    parser.add_argument("--reimage-attempts", type=int, default=1)
    parser.add_argument("--breaker-pool-percent", type=float, default=50.0)
    parser.add_argument("--breaker-cluster-percent", type=float, default=30.0)
    parser.add_argument("--breaker-window-minutes", type=float, default=60.0)
    parser.add_argument("--breaker-min-failures", type=int, default=3)
    parser.add_argument("--drain-event-types", default=",".join(repair_decision.DEFAULT_DRAIN_EVENTS))
    parser.add_argument("--cluster-id", default="",
                        help="the cluster's resource ID: nodes are deleted through its agent pools' deleteMachines")
    args = parser.parse_args(argv)
    policy = repair_decision.RepairPolicy(
        args.diagnosis_window_minutes, args.max_unavailable_percent, args.reimage_attempts,
        args.breaker_pool_percent, args.breaker_cluster_percent, args.breaker_window_minutes,
        args.breaker_min_failures, drain_event_types=tuple(t for t in args.drain_event_types.split(",") if t))
    azure = repair_azure.AzureCompute(cluster_id=args.cluster_id)
    events: list[dict[str, Any]] = []
    if args.imds_events:
        try:
            events = azure.scheduled_events()
        except OSError as error:
            print(f"aksgpu: could not read Scheduled Events from IMDS: {error}", file=sys.stderr)
    lines = run(Api.in_cluster(), None if args.dry_run else azure, [p for p in args.pools.split(",") if p], policy,
                args.namespace, node_api._now(None), args.dry_run, events)
    print("\n".join(lines) or "nothing to do", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
