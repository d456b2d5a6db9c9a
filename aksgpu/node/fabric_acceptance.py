"""aksgpu's cross-node acceptance of new InfiniBand nodes, run in the cluster.

A GPU node of an InfiniBand pool that passes the gate's local check is not admitted at once: the
gate's verdict labels it aksgpu.io/gpu-health=accepting and keeps its startup taint (value
"accepting"), while the device plugin starts so that the acceptance job can request its GPUs and
nothing else can land (no team pod tolerates the gate's taint). This program, run every few
minutes by the CronJob aksgpu-fabric-acceptance, pairs such nodes, runs an NCCL all-reduce across
each pairing (an Indexed Job through Kueue, pods pinned one per node), and decides:

  passed    a pairing reached the VM size's floor: both nodes are good (the pair's bus bandwidth is
            bounded by its slower member), the taint goes, the label becomes passed;
  failed    the node fell short with a peer known to be good (an in-service node, or one that
            passed with another peer), or with two different peers: failed through the gate's own
            verdict path (cordon, label, Event, record, circuit breaker), the reason naming the
            peers and the measured against the floor;
  released  no decision within the hold bound (no peer free, or only unconfirmed failures): the
            node takes work with a Warning Event and record entry saying what was not measured.

Pairing follows Azure's own procedure (Azure/ai-infrastructure-on-azure
skills/slurm/nccl_performance_diagnosis/SKILL.md): new nodes two by two; a suspect (a node that
failed once) with a different known-good node; a lone new node with an idle in-service node of its
pool, at a priority that never preempts work (the Job's PriorityClass, preemptionPolicy Never).

The measurements and the decision are fabric_decision.py's; this file is the pass (the Jobs, the
nodes' changes) and its entry point. Standard library only; it imports fabric_decision.py and the
gate's node_api.py and node_verdicts.py (shipped beside it in the same folder) for the API client and
the verdict path.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import sys
import urllib.error
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

try:  # in the package (tests, the Pulumi program)
    from aksgpu.node import fabric_decision, node_api, node_verdicts
except ImportError:  # in the cluster: its own and the gate's files are siblings
    import fabric_decision  # type: ignore[no-redef,import-not-found]
    import node_api  # type: ignore[no-redef,import-not-found]
    import node_verdicts  # type: ignore[no-redef,import-not-found]


ACCEPTING = node_api.ACCEPTING  # the aksgpu.io/gpu-health state between the local check and acceptance
SOURCE = "acceptance"  # the verdict source in the record and the breaker
FAILED_CHECK = "fabric-acceptance"
SINCE_ANNOTATION = node_api.ACCEPTANCE_SINCE_ANNOTATION
OUTCOME_ANNOTATION = "aksgpu.io/gpu-health-acceptance"  # passed, or released-unmeasured / released-unconfirmed
RESULTS_KEPT = 8
RUN_LABEL = "aksgpu.io/fabric-acceptance-run"  # on the Jobs this program creates, and on their pods
NODES_ANNOTATION = "aksgpu.io/fabric-acceptance-nodes"
KNOWN_GOOD_ANNOTATION = "aksgpu.io/fabric-acceptance-known-good"
POOL_ANNOTATION = "aksgpu.io/fabric-acceptance-pool"
HOSTNAME_LABEL = "kubernetes.io/hostname"


# --- the Job -----------------------------------------------------------------------------


def run_name(pool: str, nodes: tuple[str, ...], now: datetime.datetime) -> str:
    """A Job name (a DNS label, at most 63 characters with the pod's index suffix room)."""
    import hashlib

    digest = hashlib.sha256(",".join(nodes).encode()).hexdigest()[:8]
    stamp = now.strftime("%H%M%S")
    return f"aksgpu-accept-{node_api.label_value(pool)[:20].lower()}-{stamp}-{digest}"[:52].rstrip("-")


def job_manifest(template: dict[str, Any], name: str, pool: str, nodes: tuple[str, ...],
                 known_good: tuple[str, ...]) -> dict[str, Any]:
    """The Job of one pairing from its pool's template (gpu_health.py declares the templates):
    one pod per node (Indexed, completions = parallelism = nodes), pinned to exactly these nodes by
    hostname with one pod per node (anti-affinity), torchrun's master at index 0's stable name."""
    job = copy.deepcopy(template)
    meta = job.setdefault("metadata", {})
    meta["name"] = name
    meta.setdefault("labels", {})[RUN_LABEL] = "true"
    meta.setdefault("annotations", {}).update({NODES_ANNOTATION: ",".join(nodes), POOL_ANNOTATION: pool,
                                               KNOWN_GOOD_ANNOTATION: ",".join(known_good)})
    spec = job["spec"]
    spec["completions"] = spec["parallelism"] = len(nodes)
    pod = spec["template"]
    pod.setdefault("metadata", {}).setdefault("labels", {})[RUN_LABEL] = name
    pod_spec = pod["spec"]
    terms = pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    for term in terms:
        term.setdefault("matchExpressions", []).append(
            {"key": HOSTNAME_LABEL, "operator": "In", "values": sorted(nodes)})
    pod_spec["affinity"]["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "labelSelector": {"matchLabels": {RUN_LABEL: name}}, "topologyKey": HOSTNAME_LABEL}]}
    for container in pod_spec["containers"]:
        container.setdefault("env", []).extend([
            {"name": "AKSGPU_ACCEPTANCE_NODES", "value": str(len(nodes))},
            {"name": "AKSGPU_ACCEPTANCE_MASTER", "value": f"{name}-0.{pod_spec['subdomain']}"},
        ])
    return job


# --- the pass ------------------------------------------------------------------------------


class Api(node_api.Api):
    """The gate's client (node_api.py) plus the Job calls this program needs (in its own namespace only)."""

    def list_jobs(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        query = urllib.parse.urlencode({"labelSelector": label_selector})
        return self._request("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs?{query}").get("items") or []

    def create_job(self, namespace: str, job: dict[str, Any]) -> dict[str, Any]:
        return self._request("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", job)

    def delete_job(self, namespace: str, name: str) -> dict[str, Any]:
        # Background: the Job's pods go with it.
        return self._request("DELETE", f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}",
                             {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"})


@dataclass
class Settings:
    namespace: str = "aksgpu-system"
    pools: dict[str, str] = field(default_factory=dict)  # agent pool -> VM size
    floors: dict[str, fabric_decision.Floor] = field(default_factory=dict)  # VM size -> floor
    templates: dict[str, dict[str, Any]] = field(default_factory=dict)  # agent pool -> Job template
    run_timeout_minutes: float = 20.0
    hold_minutes: float = 120.0


def known_good(node: dict[str, Any]) -> bool:
    """A peer whose pairing convicts the other node: passed (the gate's check, and on these pools
    the acceptance), in service, not released unaccepted. An "unchecked" node (older than the gate)
    or one released without a decision is not known good."""
    return (node_api._labels(node).get(node_api.HEALTH_LABEL) == "passed"
            and not node.get("spec", {}).get("unschedulable")
            and not str(node_api._annotations(node).get(OUTCOME_ANNOTATION, "")).startswith("released"))


def _finished(job: dict[str, Any]) -> bool:
    return any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
               for c in job.get("status", {}).get("conditions") or [])


def _started(pods: list[dict[str, Any]], expected: int) -> bool:
    """Every pod of the run got its container started (it ran, whatever its end)."""
    started = 0
    for pod in pods:
        for status in pod.get("status", {}).get("containerStatuses") or []:
            state = status.get("state") or {}
            if status.get("started") or "terminated" in state and state["terminated"].get("startedAt") \
                    or "running" in state:
                started += 1
                break
    return started >= expected


def _message(pods: list[dict[str, Any]]) -> str:
    """The termination messages of the run's pods (the program writes its result line there)."""
    texts = []
    for pod in sorted(pods, key=lambda p: p["metadata"].get("name", "")):
        for status in pod.get("status", {}).get("containerStatuses") or []:
            terminated = (status.get("state") or {}).get("terminated") or {}
            if terminated.get("message"):
                texts.append(str(terminated["message"]))
    return "\n".join(texts)


def _idle_gpu_nodes(api: Api, names: list[str]) -> set[str]:
    """Of `names`, the nodes where no unfinished pod holds GPUs (one list of the cluster's pods)."""
    if not names:
        return set()
    pods = api.list_pods(field_selector="status.phase!=Succeeded,status.phase!=Failed")
    busy = {pod.get("spec", {}).get("nodeName") for pod in pods if node_api._requests_gpus(pod)}
    return {name for name in names if name not in busy}


def record_results(api: Api, nodes: tuple[str, ...], result_for: dict[str, fabric_decision.Result]) -> None:
    for name in nodes:
        if name not in result_for:
            continue

        def change(node: dict[str, Any], name: str = name) -> dict[str, Any] | None:
            if node_api._labels(node).get(node_api.HEALTH_LABEL) != ACCEPTING:
                return None
            kept = [r.to_json() for r in fabric_decision.results_of(node)][-(RESULTS_KEPT - 1):]
            return {"metadata": {"annotations": {
                fabric_decision.RESULTS_ANNOTATION: json.dumps([*kept, result_for[name].to_json()], separators=(",",
                                                                                                                ":"))}}}

        node_api._per_node(name, lambda: node_api.update_node(api, name, change))


def collect(api: Api, settings: Settings, now: datetime.datetime) -> list[str]:
    """Read finished (or overdue) runs, keep their result on each new node, delete them."""
    done = []
    for job in api.list_jobs(settings.namespace, f"{RUN_LABEL}=true"):
        meta = job["metadata"]
        annotations = meta.get("annotations") or {}
        created = node_api._timestamp(meta.get("creationTimestamp")) or now
        overdue = (now - created).total_seconds() / 60 > settings.run_timeout_minutes + 10
        if not _finished(job) and not overdue:
            continue
        nodes = tuple(n for n in annotations.get(NODES_ANNOTATION, "").split(",") if n)
        known_good = tuple(n for n in annotations.get(KNOWN_GOOD_ANNOTATION, "").split(",") if n)
        pool = annotations.get(POOL_ANNOTATION, "")
        floor = settings.floors.get(settings.pools.get(pool, ""))
        pods = api.list_pods(settings.namespace, f"{RUN_LABEL}={meta['name']}")
        if floor is not None and nodes:
            measured = fabric_decision.read_measurement(_message(pods), floor.message_bytes)
            outcome, reason = fabric_decision.judge(measured, floor, _started(pods, len(nodes)) and not overdue)
            stamp = node_api._stamp(now)
            busbw = fabric_decision.figure(measured, floor)
            record_results(api, nodes, {
                name: fabric_decision.Result(tuple(n for n in nodes if n != name), outcome, reason, stamp, known_good,
                                             busbw)
                for name in nodes if name not in known_good})
            print(f"aksgpu: acceptance run {meta['name']} ({', '.join(nodes)}): {outcome}: {reason}", flush=True)
        node_api._per_node(meta["name"], lambda: api.delete_job(settings.namespace, meta["name"]))
        done.append(meta["name"])
    return done


def acceptance_pass(api: Api, settings: Settings, policy: node_verdicts.Policy,
                    now: datetime.datetime | None = None) -> dict[str, list[str]]:
    """One pass: collect runs, decide every node waiting for acceptance, start new runs."""
    now = node_api._now(now)
    done: dict[str, list[str]] = {"collected": [], "passed": [], "failed": [], "held": [], "released": [],
                                  "started": [], "stale": []}
    if not settings.pools:
        return done
    done["collected"] = collect(api, settings, now)
    nodes = api.list_nodes(node_api._pool_selector(sorted(settings.pools)))
    by_pool: dict[str, list[dict[str, Any]]] = {}
    for node in nodes:
        by_pool.setdefault(node_api._labels(node).get(node_api.AGENT_POOL_LABEL, ""), []).append(node)
    running = {name for job in api.list_jobs(settings.namespace, f"{RUN_LABEL}=true")
               for name in ((job["metadata"].get("annotations") or {}).get(NODES_ANNOTATION, "").split(","))}
    good = {node["metadata"]["name"] for node in nodes if known_good(node)}
    for pool, members in sorted(by_pool.items()):
        waiting, results = [], {}
        for node in sorted(members, key=lambda n: n["metadata"]["name"]):
            name = node["metadata"]["name"]
            if node_api._labels(node).get(node_api.HEALTH_LABEL) != ACCEPTING or name in running:
                continue
            since = node_api._timestamp(node_api._annotations(node).get(SINCE_ANNOTATION)) or now
            decision = fabric_decision.decide(fabric_decision.results_of(node), good,
                                              (now - since).total_seconds() / 60, settings.hold_minutes)
            if decision.verdict == "wait":
                waiting.append(name)
                results[name] = fabric_decision.results_of(node)
                continue
            outcome = apply(api, policy, node, decision, now)
            done.setdefault(outcome, []).append(name)
            if outcome == "passed":
                good.add(name)
        template = settings.templates.get(pool)
        if not waiting or template is None:
            continue
        names = [n["metadata"]["name"] for n in members]
        idle = sorted(_idle_gpu_nodes(api, sorted(name for name in names if name in good and name not in running)))
        for pairing in fabric_decision.plan_pairings(waiting, results, idle):
            good_peers = tuple(n for n in pairing if n in good)
            name = run_name(pool, pairing, now)
            job = job_manifest(template, name, pool, pairing, good_peers)
            if node_api._per_node(name, lambda: api.create_job(settings.namespace, job)) is not None:
                done["started"].append(name)
                running |= set(pairing)
    return done


def apply(api: Api, policy: node_verdicts.Policy, node: dict[str, Any], decision: fabric_decision.Decision,
          now: datetime.datetime) -> str:
    """A decision through the gate's own steps: a pass or a release removes the taint and labels the
    node passed; a failure goes through fail_or_hold (cordon, or the breaker's hold). Each record
    entry carries the cross-node bus bandwidth its reason cites (measurements.crossNodeBusBwGbps,
    GB/s), where a run measured one: `aksgpu promote` holds the NCCL floor to it."""
    name = node["metadata"]["name"]
    expected = node_api._state_is(ACCEPTING)
    measured = decision.measurements() or None
    if decision.verdict == "failed":
        return node_verdicts.fail_or_hold(api, name, SOURCE, FAILED_CHECK, decision.reason,
                                      {node_api.CHECKED_AT_ANNOTATION: node_api._stamp(now), SINCE_ANNOTATION: None},
                                      policy, now, expected, measured) or "failed"
    released = decision.verdict == "released"
    outcome_value = ("released-unconfirmed" if "fell short" in decision.reason else "released-unmeasured") \
        if released else "passed"

    def change(current: dict[str, Any]) -> dict[str, Any] | None:
        return {"metadata": {"labels": {node_api.HEALTH_LABEL: "passed", node_api.FAILED_CHECK_LABEL: None},
                             "annotations": {SINCE_ANNOTATION: None, OUTCOME_ANNOTATION: outcome_value,
                                             node_api.REASON_ANNOTATION: decision.reason[:1024] if released else None}},
                "spec": {"taints": node_api._taints_without_gate(current)}}

    if not node_api._guarded(api, name, expected, change):
        return node_verdicts._stale(name, SOURCE, decision.verdict, api.get_node(name))
    if released:
        entry = node_verdicts.verdict_entry(node, SOURCE, "passed", FAILED_CHECK,
                                            f"released unaccepted: {decision.reason}",
                                        now, measured)
        node_verdicts.log_verdict(entry)
        node_verdicts.emit_event(api, node, "Warning", "GpuFabricUnaccepted",
                                 f"{SOURCE}: released: {decision.reason}", now)
        node_verdicts.append_record(api, policy.namespace, entry)
        return "released"
    node_verdicts.report(api, policy, node, SOURCE, "passed", None, decision.reason, now, measurements=measured)
    return "passed"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fabric_acceptance.py", description=__doc__.splitlines()[0])
    parser.add_argument("--settings", default="/opt/aksgpu/acceptance/settings.json",
                        help="pools, floors and Job templates (the ConfigMap aksgpu-fabric-acceptance)")
    parser.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE", "aksgpu-system"))
    parser.add_argument("--keep-failed", type=int, default=2)
    parser.add_argument("--no-breaker", action="store_true")
    parser.add_argument("--breaker-share", type=float, default=0.5)
    parser.add_argument("--breaker-window-minutes", type=float, default=120.0)
    parser.add_argument("--breaker-min-nodes", type=int, default=3)
    args = parser.parse_args(argv)
    with open(args.settings, encoding="utf-8") as handle:
        raw = json.load(handle)
    settings = load_settings(raw, args.namespace)
    policy = node_verdicts.Policy(args.namespace, args.keep_failed, 24.0, not args.no_breaker, args.breaker_share,
                              args.breaker_window_minutes, args.breaker_min_nodes)
    try:
        done = acceptance_pass(Api.in_cluster(), settings, policy)
    except (urllib.error.URLError, OSError, ValueError) as error:
        print(f"aksgpu: acceptance pass stopped: {error}", file=sys.stderr, flush=True)
        return 1
    print("; ".join(f"{action}: {', '.join(names)}" for action, names in done.items() if names) or "nothing to do",
          flush=True)
    return 0


def load_settings(raw: dict[str, Any], namespace: str) -> Settings:
    return Settings(namespace, {str(k): str(v) for k, v in raw["pools"].items()},
                    {str(k): fabric_decision.Floor.parse(v) for k, v in raw["floors"].items()}, dict(raw["templates"]),
                    float(raw["runTimeoutMinutes"]), float(raw["holdMinutes"]))


if __name__ == "__main__":
    sys.exit(main())
