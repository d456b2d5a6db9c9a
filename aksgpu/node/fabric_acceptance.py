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

Standard library only; it imports node_gate.py (shipped beside it in the same folder) for the API
client and the verdict path.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import re
import sys
import urllib.error
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

try:  # in the package (tests, the Pulumi program)
    from aksgpu.node import node_gate
except ImportError:  # in the cluster: node_gate.py is a sibling file
    import node_gate  # type: ignore[no-redef,import-not-found]

ACCEPTING = node_gate.ACCEPTING  # the aksgpu.io/gpu-health state between the local check and acceptance
SOURCE = "acceptance"  # the verdict source in the record and the breaker
FAILED_CHECK = "fabric-acceptance"
SINCE_ANNOTATION = node_gate.ACCEPTANCE_SINCE_ANNOTATION
RESULTS_ANNOTATION = "aksgpu.io/gpu-health-acceptance-results"
OUTCOME_ANNOTATION = "aksgpu.io/gpu-health-acceptance"  # passed, or released-unmeasured / released-unconfirmed
RESULTS_KEPT = 8
RUN_LABEL = "aksgpu.io/fabric-acceptance-run"  # on the Jobs this program creates, and on their pods
NODES_ANNOTATION = "aksgpu.io/fabric-acceptance-nodes"
KNOWN_GOOD_ANNOTATION = "aksgpu.io/fabric-acceptance-known-good"
POOL_ANNOTATION = "aksgpu.io/fabric-acceptance-pool"
RESULT_PREFIX = "aksgpu-fabric-acceptance"  # the all-reduce program's result line (fabric_allreduce.py)
HOSTNAME_LABEL = "kubernetes.io/hostname"


# --- what a run measured ---------------------------------------------------------------------


@dataclass(frozen=True)
class Measurement:
    """One all-reduce run: bus bandwidth (GB/s, nccl-tests' definition) at one message size."""

    busbw_gbs: float
    message_bytes: int
    ranks: int | None = None
    nodes: tuple[str, ...] = ()
    wrong: int = 0
    source: str = ""


_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(-?\d+)\s+(.*)$")
_RANK = re.compile(r"^#\s+Rank\s+\d+\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device")


def parse_nccl_tests(text: str) -> dict[int, Measurement]:
    """nccl-tests all_reduce_perf output (NVIDIA/nccl-tests v2.19.6 src/common.cu): per message size
    the busbw of the slower of out-of-place and in-place (both must reach a floor), and #wrong
    summed. The trailing "# Avg bus bandwidth" is the mean over every size and placement, not a
    figure at one size, so it is never used for a floor. Rows of older versions without the
    redop/root columns (before 2.x reduce ops) are not read."""
    hosts = []
    for line in text.splitlines():
        match = _RANK.match(line)
        if match:
            hosts.append(match.group(1))
    found: dict[int, Measurement] = {}
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        match = _ROW.match(line)
        if not match:
            continue
        fields = match.group(6).split()
        # time algbw busbw #wrong (out-of-place), then the same in place; #wrong is "N/A" without -c.
        if len(fields) < 7:
            continue
        try:
            busbw = [float(fields[2]), float(fields[6])]
        except ValueError:
            continue
        wrong = sum(int(value) for value in (fields[3], fields[7] if len(fields) > 7 else "0") if value.isdigit())
        size = int(match.group(1))
        unique = tuple(dict.fromkeys(hosts))
        found[size] = Measurement(min(busbw), size, len(hosts) or None, unique, wrong, "nccl-tests")
    return found


def parse_average_busbw(text: str) -> float | None:
    """The "# Avg bus bandwidth" line, for the report only."""
    match = re.search(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.]+)", text, re.MULTILINE)
    return float(match.group(1)) if match else None


def out_of_bounds_ok(text: str) -> bool | None:
    """nccl-tests' "# Out of bounds values : N OK|FAILED" (None: not in the text)."""
    match = re.search(r"^#\s*Out of bounds values\s*:\s*(\d+)\s+(OK|FAILED)", text, re.MULTILINE)
    return None if not match else match.group(2) == "OK" and match.group(1) == "0"


def parse_allreduce_report(text: str) -> Measurement | None:
    """aksgpu's all-reduce program's result line (fabric_allreduce.py): the prefix, then JSON."""
    for line in reversed(text.splitlines()):
        if not line.startswith(RESULT_PREFIX + " "):
            continue
        try:
            body = json.loads(line.removeprefix(RESULT_PREFIX + " "))
            return Measurement(float(body["busbwGBs"]), int(body["bytes"]), int(body["ranks"]),
                               tuple(str(n) for n in body.get("nodes") or ()), int(body.get("wrong", 0)), "aksgpu")
        except (ValueError, KeyError, TypeError):
            return None
    return None


def read_measurement(text: str, message_bytes: int) -> Measurement | None:
    """A run's figure at `message_bytes`, from aksgpu's program or from nccl-tests output (an
    operator may point the job at their own nccl-tests run); None when the text has neither."""
    found = parse_allreduce_report(text)
    if found is not None:
        return found
    rows = parse_nccl_tests(text)
    if not rows:
        return None
    # The row at the floor's size; without one, the largest (judge calls it inconclusive: a figure at
    # another size is no evidence either way).
    measured = rows.get(message_bytes) or rows[max(rows)]
    if out_of_bounds_ok(text) is False:
        return Measurement(measured.busbw_gbs, measured.message_bytes, measured.ranks, measured.nodes,
                           max(measured.wrong, 1), measured.source)
    return measured


# --- the decision --------------------------------------------------------------------------


@dataclass(frozen=True)
class Floor:
    """A VM size's acceptance floor (aksgpu/catalog/fabric_acceptance.yaml)."""

    floor_gbs: float
    message_bytes: int
    warn_gbs: float | None = None

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> Floor:
        return cls(float(raw["floorGBs"]), int(raw["messageBytes"]),
                   None if raw.get("warnGBs") is None else float(raw["warnGBs"]))


def judge(measurement: Measurement | None, floor: Floor, started: bool) -> tuple[str, str]:
    """One run against the floor: ("pass" | "fail" | "inconclusive", why). A run whose pods all
    started but that gave no figure failed (NCCL could not connect or time out: busbw 0); one whose
    pods did not all start says nothing about the fabric."""
    if measurement is None:
        if started:
            return "fail", f"the all-reduce did not complete (0 GB/s, floor {floor.floor_gbs:g})"
        return "inconclusive", "the pods did not all start (no idle peer, the image still pulling, or preempted)"
    if measurement.message_bytes != floor.message_bytes:
        return "inconclusive", (f"measured at {measurement.message_bytes} bytes, the floor is for "
                                f"{floor.message_bytes}")
    if measurement.wrong:
        return "fail", f"{measurement.wrong} wrong values in the all-reduce's result"
    figure = f"{measurement.busbw_gbs:.1f} GB/s at {_size(floor.message_bytes)}, floor {floor.floor_gbs:g}"
    if measurement.busbw_gbs < floor.floor_gbs:
        return "fail", f"busbw {figure}"
    if floor.warn_gbs is not None and measurement.busbw_gbs < floor.warn_gbs:
        return "pass", f"busbw {figure} (below Azure's warn line {floor.warn_gbs:g})"
    return "pass", f"busbw {figure}"


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**30:g} GiB" if nbytes >= 2**30 else f"{nbytes} B"


@dataclass(frozen=True)
class Result:
    """One pairing a node took part in, as kept on the node (RESULTS_ANNOTATION)."""

    peers: tuple[str, ...]
    outcome: str  # pass, fail, inconclusive
    reason: str
    at: str
    known_good: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"peers": list(self.peers), "outcome": self.outcome, "reason": self.reason[:240], "at": self.at,
                **({"knownGood": list(self.known_good)} if self.known_good else {})}

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> Result:
        return cls(tuple(str(p) for p in raw.get("peers") or ()), str(raw.get("outcome")), str(raw.get("reason", "")),
                   str(raw.get("at", "")), tuple(str(p) for p in raw.get("knownGood") or ()))


def results_of(node: dict[str, Any]) -> list[Result]:
    try:
        loaded = json.loads(node_gate._annotations(node).get(RESULTS_ANNOTATION) or "[]")
    except ValueError:
        return []
    return [Result.parse(item) for item in loaded if isinstance(item, dict)] if isinstance(loaded, list) else []


@dataclass(frozen=True)
class Decision:
    verdict: str  # passed, failed, released, wait
    reason: str = ""
    suspect: bool = False  # failed once against an unconfirmed peer: pair it with a known-good node next


def decide(results: list[Result], good: set[str], waited_minutes: float, hold_minutes: float) -> Decision:
    """What a node's pairings say (Azure's rule: a node is bad when the pair it forms with a
    known-good node fails; a new peer is known good once it passed with another node).

    `good`: nodes known good now (in service, or accepted since). A pass accepts the node. A failure
    with a known-good peer, or failures with two different peers, fail it. Otherwise it waits for
    another pairing, up to `hold_minutes`, after which it is released with a warning: the gate fails
    nodes on evidence, and a wrong failure costs a whole VM."""
    passes = [r for r in results if r.outcome == "pass"]
    if passes:
        return Decision("passed", f"{passes[-1].reason} with {', '.join(passes[-1].peers)}")
    failures = [r for r in results if r.outcome == "fail"]
    against_good = [r for r in failures if set(r.peers) & (good | set(r.known_good))]
    if against_good:
        last = against_good[-1]
        peer = ", ".join(sorted(set(last.peers) & (good | set(last.known_good))))
        return Decision("failed", f"the all-reduce with known-good peer {peer} fell short: {last.reason}")
    peers = {peer for r in failures for peer in r.peers}
    if len(peers) >= 2:
        return Decision("failed", "the all-reduce fell short with two different peers: " +
                        "; ".join(f"with {', '.join(r.peers)}: {r.reason}" for r in failures[-2:]))
    if waited_minutes >= hold_minutes:
        if failures:
            return Decision("released", f"no decision within {hold_minutes:g} minutes: the all-reduce with "
                            f"{', '.join(failures[-1].peers)} fell short ({failures[-1].reason}), and no second "
                            "peer was free to tell which node is at fault")
        tried = len(results)
        return Decision("released", f"not measured within {hold_minutes:g} minutes: no peer was free"
                        + (f" ({tried} run(s) did not start)" if tried else ""))
    return Decision("wait", suspect=bool(failures))


def plan_pairings(waiting: list[str], results: dict[str, list[Result]], idle_good: list[str]) -> list[tuple[str, ...]]:
    """Pairings to run now for the nodes of one pool that wait for acceptance.

    Suspects (a failed pairing behind them) go first, each with a different idle known-good node, or
    else with a new node they have not failed with; the other new nodes two by two, never with a
    peer they already failed with; a node left over with an idle known-good node. Nodes without a
    pairing this pass wait for the next."""
    pairings: list[tuple[str, ...]] = []
    free_good = list(idle_good)
    failed_with = {name: {peer for r in results.get(name, []) if r.outcome == "fail" for peer in r.peers}
                   for name in waiting}
    suspects = [name for name in waiting if failed_with[name]]
    fresh = [name for name in waiting if not failed_with[name]]
    for name in suspects:
        if free_good:
            pairings.append((name, free_good.pop(0)))
    # Suspects without a known-good peer first: a second peer is what tells their failure apart.
    leftover = [name for name in suspects if not any(name in p for p in pairings)]
    pool = [*leftover, *fresh]
    used: set[str] = set()
    for index, name in enumerate(pool):
        if name in used:
            continue
        partner = next((other for other in pool[index + 1:] if other not in used and other not in failed_with[name]
                        and name not in failed_with[other]), None)
        if partner is not None:
            pairings.append((name, partner))
            used |= {name, partner}
        elif free_good and not failed_with[name]:
            pairings.append((name, free_good.pop(0)))
            used.add(name)
    return pairings


# --- the Job -----------------------------------------------------------------------------


def run_name(pool: str, nodes: tuple[str, ...], now: datetime.datetime) -> str:
    """A Job name (a DNS label, at most 63 characters with the pod's index suffix room)."""
    import hashlib

    digest = hashlib.sha256(",".join(nodes).encode()).hexdigest()[:8]
    stamp = now.strftime("%H%M%S")
    return f"aksgpu-accept-{node_gate.label_value(pool)[:20].lower()}-{stamp}-{digest}"[:52].rstrip("-")


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


class Api(node_gate.Api):
    """node_gate's client plus the Job calls this program needs (in its own namespace only)."""

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
    floors: dict[str, Floor] = field(default_factory=dict)  # VM size -> floor
    templates: dict[str, dict[str, Any]] = field(default_factory=dict)  # agent pool -> Job template
    run_timeout_minutes: float = 20.0
    hold_minutes: float = 120.0


def known_good(node: dict[str, Any]) -> bool:
    """A peer whose pairing convicts the other node: passed (the gate's check, and on these pools
    the acceptance), in service, not released unaccepted. An "unchecked" node (older than the gate)
    or one released without a decision is not known good."""
    return (node_gate._labels(node).get(node_gate.HEALTH_LABEL) == "passed"
            and not node.get("spec", {}).get("unschedulable")
            and not str(node_gate._annotations(node).get(OUTCOME_ANNOTATION, "")).startswith("released"))


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
    busy = {pod.get("spec", {}).get("nodeName") for pod in pods if node_gate._requests_gpus(pod)}
    return {name for name in names if name not in busy}


def record_results(api: Api, nodes: tuple[str, ...], result_for: dict[str, Result]) -> None:
    for name in nodes:
        if name not in result_for:
            continue

        def change(node: dict[str, Any], name: str = name) -> dict[str, Any] | None:
            if node_gate._labels(node).get(node_gate.HEALTH_LABEL) != ACCEPTING:
                return None
            kept = [r.to_json() for r in results_of(node)][-(RESULTS_KEPT - 1):]
            return {"metadata": {"annotations": {
                RESULTS_ANNOTATION: json.dumps([*kept, result_for[name].to_json()], separators=(",", ":"))}}}

        node_gate._per_node(name, lambda: node_gate.update_node(api, name, change))


def collect(api: Api, settings: Settings, now: datetime.datetime) -> list[str]:
    """Read finished (or overdue) runs, keep their result on each new node, delete them."""
    done = []
    for job in api.list_jobs(settings.namespace, f"{RUN_LABEL}=true"):
        meta = job["metadata"]
        annotations = meta.get("annotations") or {}
        created = node_gate._timestamp(meta.get("creationTimestamp")) or now
        overdue = (now - created).total_seconds() / 60 > settings.run_timeout_minutes + 10
        if not _finished(job) and not overdue:
            continue
        nodes = tuple(n for n in annotations.get(NODES_ANNOTATION, "").split(",") if n)
        known_good = tuple(n for n in annotations.get(KNOWN_GOOD_ANNOTATION, "").split(",") if n)
        pool = annotations.get(POOL_ANNOTATION, "")
        floor = settings.floors.get(settings.pools.get(pool, ""))
        pods = api.list_pods(settings.namespace, f"{RUN_LABEL}={meta['name']}")
        if floor is not None and nodes:
            measured = read_measurement(_message(pods), floor.message_bytes)
            outcome, reason = judge(measured, floor, _started(pods, len(nodes)) and not overdue)
            stamp = node_gate._stamp(now)
            record_results(api, nodes, {name: Result(tuple(n for n in nodes if n != name), outcome, reason, stamp,
                                                     known_good) for name in nodes if name not in known_good})
            print(f"aksgpu: acceptance run {meta['name']} ({', '.join(nodes)}): {outcome}: {reason}", flush=True)
        node_gate._per_node(meta["name"], lambda: api.delete_job(settings.namespace, meta["name"]))
        done.append(meta["name"])
    return done


def acceptance_pass(api: Api, settings: Settings, policy: node_gate.Policy,
                    now: datetime.datetime | None = None) -> dict[str, list[str]]:
    """One pass: collect runs, decide every node waiting for acceptance, start new runs."""
    now = node_gate._now(now)
    done: dict[str, list[str]] = {"collected": [], "passed": [], "failed": [], "held": [], "released": [],
                                  "started": [], "stale": []}
    if not settings.pools:
        return done
    done["collected"] = collect(api, settings, now)
    nodes = api.list_nodes(node_gate._pool_selector(sorted(settings.pools)))
    by_pool: dict[str, list[dict[str, Any]]] = {}
    for node in nodes:
        by_pool.setdefault(node_gate._labels(node).get(node_gate.AGENT_POOL_LABEL, ""), []).append(node)
    running = {name for job in api.list_jobs(settings.namespace, f"{RUN_LABEL}=true")
               for name in ((job["metadata"].get("annotations") or {}).get(NODES_ANNOTATION, "").split(","))}
    good = {node["metadata"]["name"] for node in nodes if known_good(node)}
    for pool, members in sorted(by_pool.items()):
        waiting, results = [], {}
        for node in sorted(members, key=lambda n: n["metadata"]["name"]):
            name = node["metadata"]["name"]
            if node_gate._labels(node).get(node_gate.HEALTH_LABEL) != ACCEPTING or name in running:
                continue
            since = node_gate._timestamp(node_gate._annotations(node).get(SINCE_ANNOTATION)) or now
            decision = decide(results_of(node), good, (now - since).total_seconds() / 60, settings.hold_minutes)
            if decision.verdict == "wait":
                waiting.append(name)
                results[name] = results_of(node)
                continue
            outcome = apply(api, policy, node, decision, now)
            done.setdefault(outcome, []).append(name)
            if outcome == "passed":
                good.add(name)
        template = settings.templates.get(pool)
        if not waiting or template is None:
            continue
        idle = sorted(_idle_gpu_nodes(api, sorted(n["metadata"]["name"] for n in members
                                                  if n["metadata"]["name"] in good
                                                  and n["metadata"]["name"] not in running)))
        for pairing in plan_pairings(waiting, results, idle):
            good_peers = tuple(n for n in pairing if n in good)
            name = run_name(pool, pairing, now)
            job = job_manifest(template, name, pool, pairing, good_peers)
            if node_gate._per_node(name, lambda: api.create_job(settings.namespace, job)) is not None:
                done["started"].append(name)
                running |= set(pairing)
    return done


def apply(api: Api, policy: node_gate.Policy, node: dict[str, Any], decision: Decision,
          now: datetime.datetime) -> str:
    """A decision through the gate's own steps: a pass or a release removes the taint and labels the
    node passed; a failure goes through fail_or_hold (cordon, or the breaker's hold)."""
    name = node["metadata"]["name"]
    expected = node_gate._state_is(ACCEPTING)
    if decision.verdict == "failed":
        return node_gate.fail_or_hold(api, name, SOURCE, FAILED_CHECK, decision.reason,
                                      {node_gate.CHECKED_AT_ANNOTATION: node_gate._stamp(now), SINCE_ANNOTATION: None},
                                      policy, now, expected) or "failed"
    released = decision.verdict == "released"
    outcome_value = ("released-unconfirmed" if "fell short" in decision.reason else "released-unmeasured") \
        if released else "passed"

    def change(current: dict[str, Any]) -> dict[str, Any] | None:
        return {"metadata": {"labels": {node_gate.HEALTH_LABEL: "passed", node_gate.FAILED_CHECK_LABEL: None},
                             "annotations": {SINCE_ANNOTATION: None, OUTCOME_ANNOTATION: outcome_value,
                                             node_gate.REASON_ANNOTATION:
                                                 decision.reason[:1024] if released else None}},
                "spec": {"taints": node_gate._taints_without_gate(current)}}

    if not node_gate._guarded(api, name, expected, change):
        return node_gate._stale(name, SOURCE, decision.verdict, api.get_node(name))
    if released:
        entry = node_gate.verdict_entry(node, SOURCE, "passed", FAILED_CHECK, f"released unaccepted: {decision.reason}",
                                        now)
        node_gate.log_verdict(entry)
        node_gate.emit_event(api, node, "Warning", "GpuFabricUnaccepted", f"{SOURCE}: released: {decision.reason}", now)
        node_gate.append_record(api, policy.namespace, entry)
        return "released"
    node_gate.report(api, policy, node, SOURCE, "passed", None, decision.reason, now)
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
    policy = node_gate.Policy(args.namespace, args.keep_failed, 24.0, not args.no_breaker, args.breaker_share,
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
                    {str(k): Floor.parse(v) for k, v in raw["floors"].items()}, dict(raw["templates"]),
                    float(raw["runTimeoutMinutes"]), float(raw["holdMinutes"]))


if __name__ == "__main__":
    sys.exit(main())
