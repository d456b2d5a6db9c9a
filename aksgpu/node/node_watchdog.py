"""The gate watchdog: the periodic pass over the GPU nodes (node_gate.py's `watchdog` step, a
CronJob). It fails (or holds) nodes pending too long and nodes on which no gate pod ever started,
hands failed nodes past the pool's bound or age to the autoscaler, releases nodes the cross-node
acceptance stopped deciding, cordons nodes with a critical condition (node_passive.py), gates again
a passed node whose node image, kernel or driver changed, switches the GPU Operator's operands on
again where a pool label update turned them off, and, with the gate off, releases every node it
left tainted.

Standard library only: shipped beside node_gate.py as a key of the gate's ConfigMap."""

from __future__ import annotations

import copy
import datetime
import json
from collections.abc import Callable
from typing import Any

try:
    from aksgpu.node import node_api, node_passive, node_verdicts
except ImportError:  # in the cluster: sibling files of one folder (the ConfigMap's keys)
    import node_api  # type: ignore[no-redef,import-not-found]
    import node_passive  # type: ignore[no-redef,import-not-found]
    import node_verdicts  # type: ignore[no-redef,import-not-found]


def watchdog(api: node_api.Api, max_pending_minutes: float, now: datetime.datetime | None = None,
             policy: node_verdicts.Policy | None = None, pools: list[str] | None = None, gate_enabled: bool = True,
             operator_pools: list[str] | None = None, cordon: list[node_passive.CordonCondition] | None = None,
             npd_cordon: set[str] | None = None, exporter_namespaces: list[str] | None = None,
             exporter_port: int = 9400, fetch: Callable[[str], str] = node_passive.get_text,
             acceptance_pools: set[str] | None = None,
             max_accepting_minutes: float | None = None,
             gate_resources: dict[str, str] | None = None) -> dict[str, list[str]]:
    """One pass over the GPU nodes of `pools`; returns the node names per action taken."""
    policy = policy or node_verdicts.Policy()
    now = node_api._now(now)
    done: dict[str, list[str]] = {"failed": [], "held": [], "released": [], "cordoned": [], "spared": [],
                                  "regated": [], "untainted": [], "operands": [], "stale": [], "unaccepted": [],
                                  "unstarted": []}
    if gate_enabled:
        for node in api.list_nodes(f"{node_api.HEALTH_LABEL}=pending"):
            metadata = node["metadata"]
            since = node_api._timestamp(node_api._annotations(node).get(node_api.PENDING_SINCE_ANNOTATION)) or \
                node_api._timestamp(metadata.get("creationTimestamp"))
            if since is None or (now - since).total_seconds() / 60 <= max_pending_minutes:
                continue
            outcome = node_api._per_node(metadata["name"], lambda: node_verdicts.fail_or_hold(
                api, metadata["name"], "watchdog", "gate-timeout",
                f"pending for more than {max_pending_minutes:g} minutes: the check never ran or never finished "
                "(an image that cannot be pulled, a driver that never loads)"
                f"{_unadvertised(node, gate_resources or {})}",
                {node_api.CHECKED_AT_ANNOTATION: node_api._stamp(now), node_api.PENDING_SINCE_ANNOTATION: None},
                policy, now,
                node_api._state_is("pending")))
            if outcome:
                done[outcome].append(metadata["name"])
    if not pools:
        return done
    nodes = api.list_nodes(node_api._pool_selector(pools))
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
        cordoned, spared = node_passive.passive_cordon(api, nodes, policy, cordon or [], npd_cordon or set(),
                                                       exporter_namespaces or [], exporter_port, fetch, gate_enabled,
                                                       now)
        done["cordoned"], done["spared"] = cordoned, spared
    return done


def _unadvertised(node: dict[str, Any], gate_resources: dict[str, str]) -> str:
    """Why a gate pod could not be scheduled on the node, when its pool's gate resource (the RDMA
    resource of an InfiniBand pool) is not in the node's allocatable; else nothing."""
    resource = gate_resources.get(node_api._labels(node).get(node_api.AGENT_POOL_LABEL, ""))
    if not resource or str((node.get("status", {}).get("allocatable") or {}).get(resource, "0")) != "0":
        return ""
    return (f"; its gate pod requests {resource}, which this node does not advertise: the NVIDIA Network "
            "Operator's DOCA driver or RDMA shared device plugin is not running here (kubectl -n "
            f"nvidia-network-operator get pods -o wide --field-selector spec.nodeName={node['metadata']['name']})")


def watch_unstarted(api: node_api.Api, nodes: list[dict[str, Any]], policy: node_verdicts.Policy, max_minutes: float,
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
        labels, annotations = node_api._labels(node), node_api._annotations(node)
        if node_api.HEALTH_LABEL in labels or node.get("spec", {}).get("unschedulable"):
            continue
        name = node["metadata"]["name"]
        since = node_api._timestamp(annotations.get(node_api.UNSTARTED_SINCE_ANNOTATION))
        if since is None:
            if node_api._per_node(name, lambda: node_api._guarded(api, name, node_api._state_is(None), lambda current: {
                    "metadata": {"annotations": {node_api.UNSTARTED_SINCE_ANNOTATION: node_api._stamp(now),
                                                 **node_api._kept(current)}}})):
                seen.append(name)
            continue
        waited = (now - since).total_seconds() / 60
        if waited <= max_minutes:
            continue
        outcome = node_api._per_node(name, lambda: node_verdicts.fail_or_hold(
            api, name, "watchdog", "gate-unstarted",
            f"no gate pod started on it in {waited:.0f} minutes (limit {max_minutes:g}), so its check never "
            f"began{_unadvertised(node, gate_resources)}",
            {node_api.CHECKED_AT_ANNOTATION: node_api._stamp(now), node_api.UNSTARTED_SINCE_ANNOTATION: None},
            policy, now, node_api._state_is(None)))
        if outcome:
            done[outcome].append(name)
    return seen


def release_unaccepted(api: node_api.Api, nodes: list[dict[str, Any]], policy: node_verdicts.Policy,
                       acceptance_pools: set[str],
                       max_minutes: float, now: datetime.datetime) -> list[str]:
    """The backstop of the cross-node acceptance (fabric_acceptance.py decides within its hold
    bound): a node still "accepting" past `max_minutes` (the acceptance pass stopped running), or on
    a pool that no longer has the acceptance (turned off in the spec), takes work with a Warning:
    the gate never strands a node."""
    released = []
    for node in nodes:
        if node_api._labels(node).get(node_api.HEALTH_LABEL) != node_api.ACCEPTING:
            continue
        name = node["metadata"]["name"]
        since = node_api._timestamp(node_api._annotations(node).get(node_api.ACCEPTANCE_SINCE_ANNOTATION)) or now
        waited = (now - since).total_seconds() / 60
        if node_api._labels(node).get(node_api.AGENT_POOL_LABEL) in acceptance_pools and waited <= max_minutes:
            continue
        in_acceptance = node_api._labels(node).get(node_api.AGENT_POOL_LABEL) in acceptance_pools
        why = (f"waited {waited:.0f} minutes for the cross-node acceptance, past its bound ({max_minutes:g}): the "
               "acceptance pass is not deciding" if in_acceptance
               else "its pool no longer has the cross-node acceptance")

        def change(current: dict[str, Any]) -> dict[str, Any] | None:
            return {"metadata": {"labels": {node_api.HEALTH_LABEL: "passed"}, "annotations": {
                node_api.ACCEPTANCE_SINCE_ANNOTATION: None, "aksgpu.io/gpu-health-acceptance": "released-unmeasured",
                node_api.REASON_ANNOTATION: why}}, "spec": {"taints": node_api._taints_without_gate(current)}}

        if not node_api._per_node(name, lambda: node_api._guarded(api, name, node_api._state_is(node_api.ACCEPTING),
                                                                  change)):
            continue
        entry = node_verdicts.verdict_entry(node, "watchdog", "passed", "fabric-acceptance",
                                            f"released unaccepted: {why}", now)
        node_verdicts.log_verdict(entry)
        node_verdicts.emit_event(api, node, "Warning", "GpuFabricUnaccepted", f"watchdog: released: {why}", now)
        node_verdicts.append_record(api, policy.namespace, entry)
        released.append(name)
    return released


def restore_operands(api: node_api.Api, nodes: list[dict[str, Any]], operator_pools: set[str]) -> list[str]:
    """Switch the GPU Operator's device plugin and exporter back on for admitted nodes that have
    them "false". The pool creates its nodes with "false" (so no controller sees another first
    value), and AKS writes a pool's labels onto all its nodes again whenever they are updated
    (azure-aks-docs use-labels.md, "Updating labels on existing node pools"; Azure/AKS#3152), which
    turns the operands off on nodes that passed long ago. A driver upgrade's
    "paused-for-driver-upgrade" is the GPU Operator's and is left alone."""
    restored = []
    for node in nodes:
        labels = node_api._labels(node)
        if (labels.get(node_api.AGENT_POOL_LABEL) not in operator_pools
                or labels.get(node_api.HEALTH_LABEL) not in ("passed", "unchecked")):
            continue
        if not any(labels.get(label) == "false" for label in node_api.HELD_OPERAND_LABELS):
            continue

        def change(current: dict[str, Any]) -> dict[str, Any] | None:
            current_labels = node_api._labels(current)
            if current_labels.get(node_api.HEALTH_LABEL) not in ("passed", "unchecked"):
                return None
            switched = {label: "true" for label in node_api.HELD_OPERAND_LABELS if current_labels.get(label) == "false"}
            return {"metadata": {"labels": switched}} if switched else None

        if node_api._per_node(node["metadata"]["name"], lambda: node_api.update_node(api, node["metadata"]["name"],
                                                                                     change)) is None:
            continue
        print(f"aksgpu: {node['metadata']['name']}: the GPU Operator's device plugin and exporter switched on again "
              "(its pool's labels were written onto it)", flush=True)
        restored.append(node["metadata"]["name"])
    return restored


def release_gate(api: node_api.Api, nodes: list[dict[str, Any]], policy: node_verdicts.Policy, operator_pools: set[str],
                 now: datetime.datetime) -> list[str]:
    """The gate is off: no node may keep its taint, and the GPU Operator's operands come back."""
    released = []
    for node in nodes:
        labels = node_api._labels(node)
        tainted = any(t.get("key") == node_api.GATE_TAINT_KEY for t in node.get("spec", {}).get("taints") or [])
        held_operands = labels.get(node_api.AGENT_POOL_LABEL) in operator_pools and any(
            labels.get(label) == "false" for label in node_api.HELD_OPERAND_LABELS)
        # A node the watchdog marked while no gate pod had reached it (watch_unstarted) is kept
        # from scale-down by that mark: with the gate off, the mark goes too.
        unstarted = node_api.UNSTARTED_SINCE_ANNOTATION in node_api._annotations(node)
        if not tainted and labels.get(node_api.HEALTH_LABEL) not in ("pending", "held",
                                                                     node_api.ACCEPTING) and not held_operands \
                and not unstarted:
            continue

        def change(current: dict[str, Any]) -> dict[str, Any] | None:
            current_labels = node_api._labels(current)
            marked = (current_labels.get(node_api.HEALTH_LABEL) in ("pending", "held", node_api.ACCEPTING)
                      or node_api.UNSTARTED_SINCE_ANNOTATION in node_api._annotations(current))
            new_labels: dict[str, Any] = {node_api.HEALTH_LABEL: "unchecked"} if marked else {}
            if current_labels.get(node_api.AGENT_POOL_LABEL) in operator_pools:
                new_labels.update({label: "true" for label in node_api.HELD_OPERAND_LABELS
                                   if current_labels.get(label) == "false"})
            return {"metadata": {"labels": new_labels,
                                 "annotations": {node_api.PENDING_SINCE_ANNOTATION: None,
                                                 node_api.UNSTARTED_SINCE_ANNOTATION: None,
                                                 **node_api._unkept(current)} if marked else {}},
                    "spec": {"taints": node_api._taints_without_gate(current)}}

        if node_api._per_node(node["metadata"]["name"], lambda: node_api.update_node(api, node["metadata"]["name"],
                                                                                     change)) is None:
            continue
        node_verdicts.report(api, policy, node, "watchdog", "untainted", None, "the gate is off: its taint and operand "
                             "holds are removed; the node takes work unchecked", now)
        released.append(node["metadata"]["name"])
    return released


def release_kept(api: node_api.Api, nodes: list[dict[str, Any]], policy: node_verdicts.Policy,
                 now: datetime.datetime) -> list[str]:
    """Failed nodes past the pool's bound (the newest are kept) or older than keep_failed_hours
    lose scale-down-disabled: the autoscaler drains and deletes them when the pool is above its
    minimum. Their record stays."""
    kept: dict[str | None, list[tuple[datetime.datetime, dict[str, Any]]]] = {}
    for node in nodes:
        annotations = node_api._annotations(node)
        failed = node_api._labels(node).get(node_api.HEALTH_LABEL) == "failed"
        if not failed or annotations.get(node_api.KEPT_ANNOTATION) != "true":
            continue  # only nodes the gate itself keeps
        since = node_api._timestamp(annotations.get(node_api.CHECKED_AT_ANNOTATION)) or now
        kept.setdefault(node_api._labels(node).get(node_api.AGENT_POOL_LABEL), []).append((since, node))
    released = []
    for pool_nodes in kept.values():
        pool_nodes.sort(key=lambda item: (item[0], item[1]["metadata"]["name"]), reverse=True)
        for rank, (since, node) in enumerate(pool_nodes):
            too_old = (now - since).total_seconds() / 3600 > policy.keep_failed_hours
            if rank < policy.keep_failed and not too_old:
                continue
            name = node["metadata"]["name"]
            released_patch = {"metadata": {"annotations": {**node_api._unkept(node),
                                                           node_api.RELEASED_AT_ANNOTATION: node_api._stamp(now)}}}
            if node_api._per_node(name, lambda: node_api.update_node(
                    api, name, lambda _node: copy.deepcopy(released_patch))) is None:
                continue
            why = (f"kept {policy.keep_failed_hours:g} hours" if too_old
                   else f"the pool keeps its newest {policy.keep_failed} failed nodes")
            node_verdicts.report(api, policy, node, "watchdog", "released",
                                 node_api._labels(node).get(node_api.FAILED_CHECK_LABEL),
                                 f"{why}: handed to the cluster autoscaler, which drains and deletes it when the pool "
                                 "is above its minimum", now)
            released.append(name)
    return released


def regate_changed(api: node_api.Api, nodes: list[dict[str, Any]], policy: node_verdicts.Policy,
                   operator_pools: set[str],
                   now: datetime.datetime) -> list[str]:
    """A passed node whose node image, kernel or driver changed since its check (a node-image
    upgrade keeps the Node object and its labels; a GPU Operator driver upgrade restarts the
    driver in place) is gated again, once no pod on it holds GPUs: those upgrades drain the node,
    so it is normally empty. A part first known now is recorded, not a change."""
    regated = []
    for node in nodes:
        if node_api._labels(node).get(node_api.HEALTH_LABEL) != "passed":
            continue
        name = node["metadata"]["name"]
        recorded, current = node_verdicts.recorded_fingerprint(node), node_verdicts.fingerprint(node)
        changes = node_verdicts.fingerprint_changes(recorded, current)
        if not changes:
            if current.keys() - recorded.keys():
                patch = {"metadata": {"annotations": {
                    node_api.FINGERPRINT_ANNOTATION: json.dumps({**recorded, **current}, sort_keys=True)}}}
                node_api._per_node(name, lambda: node_api.update_node(api, name, lambda _node: copy.deepcopy(patch)))
            continue
        # Every pod bound to the node that has not finished: one still starting holds GPUs too.
        pods = node_api._per_node(name, lambda: api.list_pods(
            field_selector=f"spec.nodeName={name},status.phase!=Succeeded,status.phase!=Failed"))
        if pods is None:
            continue
        busy = [pod for pod in pods if node_api._requests_gpus(pod)]
        if busy:
            print(f"aksgpu: {name} changed ({', '.join(changes)}) but {len(busy)} pod(s) hold its GPUs: "
                  "gated again once they are gone", flush=True)
            continue
        hold_operands = node_api._labels(node).get(node_api.AGENT_POOL_LABEL) in operator_pools

        def change(current_node: dict[str, Any]) -> dict[str, Any] | None:
            labels: dict[str, Any] = {node_api.HEALTH_LABEL: "pending"}
            if hold_operands:
                labels.update({label: "false" for label in node_api.HELD_OPERAND_LABELS})
            return {"metadata": {"labels": labels,
                                 "annotations": {node_api.PENDING_SINCE_ANNOTATION: node_api._stamp(now)}},
                    "spec": {"taints": node_api._taints_without_gate(current_node) + [node_api._gate_taint("pending")]}}

        if not node_api._per_node(name, lambda: node_api._guarded(api, name, node_api._state_is("passed"), change)):
            continue
        detail = ", ".join(f"{key} {recorded[key]} -> {current[key]}" for key in changes)
        node_verdicts.report(api, policy, node, "watchdog", "regated", None, f"changed since its check: {detail}", now)
        regated.append(name)
    return regated
