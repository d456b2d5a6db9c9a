"""Cross-node acceptance on InfiniBand pools (issue 24, item 2).

The decision is tested against recorded NCCL all-reduce outputs (tests/data/nccl-tests, real runs
with their source) and against the behaviour it relies on:
- nccl-tests' output format and busbw (NVIDIA/nccl-tests v2.19.6 src/common.cu, doc/PERFORMANCE.md);
  its "# Avg bus bandwidth" is a mean over all sizes, which a floor must not be read from;
- Azure's pairing and blame procedure (Azure/ai-infrastructure-on-azure
  skills/slurm/nccl_performance_diagnosis/SKILL.md): a suspect is paired with a known-good node, a
  different one per suspect; a failing pair with a known-good node convicts the suspect;
- Kueue v0.19.2: a Job with kueue.x-k8s.io/queue-name is always managed (configuration_types.go
  ManagedJobsNamespaceSelector), its ClusterQueue must cover every resource the pods request;
- the API server: strict schemas (kubernetes-validate, Kueue's CRDs) and aksgpu's own admission
  policy on every node patch (a stand-in API server, as tests/test_gpu_node_life.py).
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aksgpu.node import fabric_acceptance as fa
from aksgpu.node import fabric_decision
from aksgpu.components.kubernetes import fabric_acceptance_objects as objects
from aksgpu.node import node_api, node_gate, node_verdicts, node_watchdog
from aksgpu.promotion import decision as promotion_decision
from aksgpu.promotion import records
from aksgpu.components.kubernetes.gpu_gate import UNDECIDED
from aksgpu.components.kubernetes.gpu_gate_access import node_change_policy
from aksgpu.components.kubernetes.gpu_software import device_plugin_targets
from aksgpu.components.kubernetes.objects import advertised_by_gate
from aksgpu.spec import ClusterSpec, parse_cluster_spec
from aksgpu.spec.fabric import fabric_profile
from aksgpu.spec.fabric_acceptance import acceptance_floor
from tests.helpers import base_spec, edit, kubernetes_manifests, plan_spec
from tests.oracles.cel import denials
from tests.oracles.kubernetes import validate_object
from tests.test_gpu_node_life import GPU_TAINT, ApiHandler, Cluster, _results, _selected, serving

DATA = Path(__file__).resolve().parent / "data" / "nccl-tests"
NOW = datetime.datetime(2026, 11, 26, 12, 0, tzinfo=datetime.timezone.utc)
NAMESPACE = "aksgpu-system"
GIB = 2**30
H100 = "Standard_ND96isr_H100_v5"
H100_POOL = {"name": "h100", "kind": "gpu", "vmSize": H100, "zones": ["1"], "minCount": 0, "maxCount": 4}
POLICY = node_verdicts.Policy(NAMESPACE, keep_failed=2, keep_failed_hours=24, breaker=True, breaker_share=0.5,
                          breaker_window_minutes=120, breaker_min_nodes=3)
USERS = {"gate": f"system:serviceaccount:{NAMESPACE}:aksgpu-gpu-health",
         "watchdog": f"system:serviceaccount:{NAMESPACE}:aksgpu-gpu-gate-watchdog",
         "acceptance": f"system:serviceaccount:{NAMESPACE}:{objects.ACCEPTANCE}"}


def _block(text: str, *markers: str) -> str:
    """The first fenced block after the markers (found in order) of a recorded markdown file."""
    after = text
    for marker in markers:
        after = after[after.index(marker):]
    match = re.search(r"```[a-z]*\n(.*?)```", after, re.DOTALL)
    assert match, markers
    return match.group(1)


def _floor(vm_size: str) -> fabric_decision.Floor:
    floor = acceptance_floor(vm_size)
    assert floor is not None
    return fabric_decision.Floor.parse(floor.as_settings())


# --- 1. the parser, on real outputs ----------------------------------------------------------


def test_azures_own_aks_rdma_run_on_nd96asr_v4_passes_and_its_ipoib_run_fails() -> None:
    """Azure/aks-rdma-infiniband's recorded AKS runs, 2 x ND96asr_v4: RDMA over InfiniBand reaches
    187 GB/s at 8 GiB (Azure: below 180 is a problem); the same job over IPoIB (NCCL over TCP) 3."""
    text = (DATA / "aks-rdma-infiniband-expected-output.md").read_text(encoding="utf-8")
    floor = _floor("Standard_ND96asr_v4")
    assert floor.message_bytes == 8 * GIB and floor.floor_gbs == 180
    rdma = fabric_decision.read_measurement(_block(text, "### 1.1. mpijob", "Expected output"), floor.message_bytes)
    assert rdma is not None and rdma.busbw_gbs == 187.05, "the slower of out-of-place and in-place"
    assert fabric_decision.judge(rdma, floor, started=True)[0] == "pass"
    tcp = fabric_decision.read_measurement(_block(text, "### 3.1. mpijob", "Expected output"), floor.message_bytes)
    assert tcp is not None and tcp.busbw_gbs == 3.09
    outcome, reason = fabric_decision.judge(tcp, floor, started=True)
    assert outcome == "fail" and "3.1 GB/s at 8 GiB, floor 180" in reason


def test_the_average_line_is_not_the_figure_at_one_size() -> None:
    """A 2 x 8 H100 run whose 8 GiB row says 337 GB/s and whose "# Avg bus bandwidth" says 70.7: a
    floor read from the average would fail a healthy pair (nccl-tests' average spans every size)."""
    text = (DATA / "gcp-a3mega-2x8-h100.md").read_text(encoding="utf-8")
    rows = fabric_decision.parse_nccl_tests(text)
    assert rows[8 * GIB].busbw_gbs == 337.35 and rows[8 * GIB].ranks == 16
    assert rows[8 * GIB].nodes == ("ztan-mig-235z", "ztan-mig-gq73")
    assert fabric_decision.parse_average_busbw(text) == 70.742
    at_8gib = fabric_decision.Floor(300, 8 * GIB)
    assert fabric_decision.judge(fabric_decision.read_measurement(text, 8 * GIB), at_8gib, started=True)[0] == "pass"
    assert fabric_decision.parse_average_busbw(text) < at_8gib.floor_gbs, "the average alone would have failed it"
    # ND H100 v5's floor is for 16 GiB, which this run never reached: no evidence either way.
    outcome, reason = fabric_decision.judge(fabric_decision.read_measurement(text, 16 * GIB), _floor(H100),
                                            started=True)
    assert outcome == "inconclusive" and "8589934592 bytes" in reason


def test_a_healthy_2_node_h200_run_clears_the_hopper_floor_without_a_warning() -> None:
    text = (DATA / "oci-2x8-h200.md").read_text(encoding="utf-8")
    measured = fabric_decision.read_measurement(text, 16 * GIB)
    assert measured is not None and measured.busbw_gbs == 486.4 and measured.ranks == 16
    outcome, reason = fabric_decision.judge(measured, _floor("Standard_ND96isr_H200_v5"), started=True)
    assert outcome == "pass" and "warn" not in reason


def test_azures_guide_excerpt_parses_at_16_gib() -> None:
    text = (DATA / "ai-infrastructure-on-azure-nccl-allreduce-test-SKILL.md").read_text(encoding="utf-8")
    output = _block(text, "## Output Format")
    assert fabric_decision.parse_nccl_tests(output)[16 * GIB].busbw_gbs == 936.54
    assert fabric_decision.parse_average_busbw(output) == 487.265 and fabric_decision.out_of_bounds_ok(output) is True


def synthetic_output(busbw: float, size: int = 16 * GIB, wrong: int = 0, bounds: str = "0 OK") -> str:
    """A CONSTRUCTED nccl-tests row in the recorded files' format (the decision's synthetic figures)."""
    return ("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw"
            "   busbw #wrong\n"
            f"  {size}    {size // 4}     float     sum      -1    66214  259.46  {busbw:.2f}      {wrong}    66226"
            f"  259.41  {busbw:.2f}      0\n# Out of bounds values : {bounds}\n# Avg bus bandwidth    : {busbw:.2f}\n")


def test_wrong_values_fail_a_pair_whatever_its_bandwidth() -> None:
    floor = _floor(H100)
    assert fabric_decision.judge(fabric_decision.read_measurement(synthetic_output(480, wrong=3),
                                                                  floor.message_bytes), floor, True)[0] == "fail"
    bad_bounds = fabric_decision.read_measurement(synthetic_output(480, bounds="2 FAILED"), floor.message_bytes)
    assert bad_bounds is not None and fabric_decision.judge(bad_bounds, floor, True)[0] == "fail"


def test_between_azures_ghr_and_warn_lines_a_pair_passes_with_a_warning() -> None:
    floor = _floor(H100)
    assert (floor.floor_gbs, floor.warn_gbs) == (300, 400)
    outcome, reason = fabric_decision.judge(fabric_decision.read_measurement(synthetic_output(350),
                                                                             floor.message_bytes), floor, True)
    assert outcome == "pass" and "below Azure's warn line 400" in reason
    assert fabric_decision.judge(fabric_decision.read_measurement(synthetic_output(299.9), floor.message_bytes),
                                 floor, True)[0] == "fail"


def test_a_run_that_never_started_says_nothing_and_one_that_died_failed() -> None:
    floor = _floor(H100)
    assert fabric_decision.judge(None, floor, started=False)[0] == "inconclusive"
    assert fabric_decision.judge(None, floor, started=True) == ("fail",
                                                                "the all-reduce did not complete (0 GB/s, floor 300)")


@pytest.mark.slow
def test_aksgpus_all_reduce_program_runs_and_reports_what_the_pass_reads(tmp_path: Path) -> None:
    """fabric_allreduce.py across two CPU processes (gloo): the result line the acceptance pass
    parses, with the nodes in rank order and no wrong values (the NCCL path needs GPUs)."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    port = _free_port()
    result = tmp_path / "result"
    workers = [context.Process(target=_run_program, args=(rank, port, str(result))) for rank in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    measured = fabric_decision.parse_allreduce_report(result.read_text(encoding="utf-8"))
    assert measured is not None and measured.ranks == 2 and measured.wrong == 0
    assert measured.nodes == ("node-0", "node-1") and measured.message_bytes == 1 << 20 and measured.busbw_gbs > 0


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _run_program(rank: int, port: int, result: str) -> None:
    import os

    from aksgpu.node import fabric_allreduce

    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank), "WORLD_SIZE": "2",
                       "LOCAL_RANK": "0", "NODE_NAME": f"node-{rank}", "AKSGPU_RESULT_FILE": result})
    fabric_allreduce.main(["--bytes", str(1 << 20), "--iterations", "3", "--warmup", "1", "--backend", "gloo"])


# --- 2. the decision -----------------------------------------------------------------------


def _r(outcome: str, *peers: str, known_good: tuple[str, ...] = (), reason: str = "busbw x") -> fabric_decision.Result:
    return fabric_decision.Result(tuple(peers), outcome, reason, "2026-11-26T11:00:00Z", known_good)


def test_a_pass_accepts_the_node() -> None:
    assert fabric_decision.decide([_r("fail", "b"), _r("pass", "c")], set(), 10, 120).verdict == "passed"


def test_a_failure_with_a_known_good_peer_fails_the_node_and_names_the_peer() -> None:
    decision = fabric_decision.decide([_r("fail", "good-0", known_good=("good-0",),
                                          reason="busbw 120.0 GB/s at 16 GiB, floor 300")],
                         set(), 5, 120)
    assert decision.verdict == "failed" and "known-good peer good-0" in decision.reason
    assert "120.0 GB/s" in decision.reason


def test_one_failure_with_a_new_peer_convicts_nobody() -> None:
    decision = fabric_decision.decide([_r("fail", "b")], set(), 5, 120)
    assert decision.verdict == "wait" and decision.suspect


def test_failures_with_two_different_peers_fail_the_node() -> None:
    decision = fabric_decision.decide([_r("fail", "b"), _r("fail", "c")], set(), 5, 120)
    assert decision.verdict == "failed" and "with b" in decision.reason and "with c" in decision.reason
    twice = fabric_decision.decide([_r("fail", "b"), _r("fail", "b")], set(), 5, 120)
    assert twice.verdict == "wait", "the same peer twice"


def test_a_peer_that_passed_with_another_node_becomes_known_good() -> None:
    """A and B fail together; B then passes with C: B is good, so the failure is A's."""
    assert fabric_decision.decide([_r("fail", "b")], {"b"}, 5, 120).verdict == "failed"


def test_at_the_hold_bound_an_undecided_node_takes_work_with_a_warning() -> None:
    unmeasured = fabric_decision.decide([], set(), 121, 120)
    assert unmeasured.verdict == "released" and "no peer was free" in unmeasured.reason
    unconfirmed = fabric_decision.decide([_r("fail", "b")], set(), 121, 120)
    assert unconfirmed.verdict == "released" and "with b fell short" in unconfirmed.reason
    assert fabric_decision.decide([_r("inconclusive", "g")], set(), 121,
                                  120).reason.endswith("(1 run(s) did not start)")


def test_a_decision_carries_the_bus_bandwidth_its_reason_cites() -> None:
    floor = _floor(H100)
    measured = fabric_decision.Measurement(371.64, 16 * GIB, 16, ("a", "b"))
    assert fabric_decision.figure(measured, floor) == 371.6
    assert fabric_decision.figure(fabric_decision.Measurement(450.0, GIB), floor) is None, "another size: no figure"
    assert fabric_decision.figure(None, floor) is None
    result = fabric_decision.Result(("b",), "pass", "busbw 371.6", "2026-11-26T11:00:00Z", (), 371.6)
    assert fabric_decision.Result.parse(json.loads(json.dumps(result.to_json()))) == result
    assert "busbwGBs" not in dataclasses.replace(result, busbw_gbs=None).to_json(), "absent where not measured"
    passed = fabric_decision.decide([result], set(), 5, 120)
    assert passed.verdict == "passed" and passed.measurements() == {"crossNodeBusBwGbps": 371.6}
    low = dataclasses.replace(result, outcome="fail", busbw_gbs=121.4, known_good=("b",))
    assert fabric_decision.decide([low], set(), 5, 120).measurements() == {"crossNodeBusBwGbps": 121.4}
    twice = [dataclasses.replace(low, known_good=(), busbw_gbs=140.0), dataclasses.replace(low, peers=("c",),
                                                                                           known_good=())]
    assert fabric_decision.decide(twice, set(), 5, 120).busbw_gbs == 140.0, "a pair is bounded by its slower member"
    assert fabric_decision.decide([], set(), 121, 120).measurements() == {}, "released unmeasured: no figure"


def test_the_results_annotation_of_a_node_stays_small() -> None:
    """RESULTS_KEPT results of the longest reasons and node names, with the figure: far inside the
    256 KiB a node's annotations may hold together (k8s.io/apimachinery validation
    TotalAnnotationSizeLimitB)."""
    longest = fabric_decision.Result(("n" * 63,), "fail", "r" * 1000, "2026-11-26T11:00:00Z", ("n" * 63,), 99999.9)
    assert len(json.dumps([longest.to_json()] * fa.RESULTS_KEPT, separators=(",", ":"))) < 4096


def test_new_nodes_are_paired_two_by_two_and_a_lone_one_with_an_idle_in_service_node() -> None:
    assert fabric_decision.plan_pairings(["a", "b", "c", "d"], {}, []) == [("a", "b"), ("c", "d")]
    assert fabric_decision.plan_pairings(["a", "b", "c"], {}, ["g1"]) == [("a", "b"), ("c", "g1")]
    assert fabric_decision.plan_pairings(["a"], {}, ["g1", "g2"]) == [("a", "g1")]
    assert fabric_decision.plan_pairings(["a"], {}, []) == [], "no peer: wait (the hold bound decides)"


def test_suspects_each_get_a_different_known_good_node() -> None:
    """Azure: 'Use a different good node for each pair'; never the peer it already failed with."""
    results = {"a": [_r("fail", "b")], "b": [_r("fail", "a")]}
    assert fabric_decision.plan_pairings(["a", "b"], results, ["g1", "g2"]) == [("a", "g1"), ("b", "g2")]
    assert fabric_decision.plan_pairings(["a", "b"], results, []) == [], "two suspects are never paired again"
    assert fabric_decision.plan_pairings(["a", "b", "c"], results, []) == [("a", "c")], "a fresh node is a second peer"
    assert fabric_decision.plan_pairings(["a", "b", "c", "d"], results, []) == [("a", "c"), ("b", "d")], \
        "suspects before fresh nodes pair among themselves"


# --- 3. the objects --------------------------------------------------------------------------


def _spec(**changes: Any) -> ClusterSpec:
    spec = edit(base_spec(), "nodePools.1", H100_POOL)
    for path, value in changes.items():
        spec = edit(spec, path, value)
    return ClusterSpec.model_validate(spec)


def _queued_spec() -> ClusterSpec:
    return _spec(**{"access.teams": [{"name": "research"}], "gangScheduling.enabled": True})


def _target(spec: ClusterSpec) -> Any:
    [target] = [t for t in objects.acceptance_targets(device_plugin_targets(spec), spec)]
    return target


def test_only_infiniband_pools_with_a_published_floor_are_held(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _spec()
    assert [t.name for t in objects.acceptance_targets(device_plugin_targets(spec), spec)] == ["h100"], \
        "the NC A100 pool has no InfiniBand"
    from aksgpu.spec import fabric_acceptance as table

    # Every InfiniBand size of the catalog has a floor today; a size without one is admitted after its
    # local check, and the spec says so.
    assert table.unpublished_sizes() == []
    _, issues = parse_cluster_spec(edit(base_spec(), "nodePools.1", H100_POOL))
    assert not [i for i in issues if "no NCCL all-reduce floor" in i.rule]
    monkeypatch.setattr(table, "acceptance_floor", lambda vm_size: None)
    _, issues = parse_cluster_spec(edit(base_spec(), "nodePools.1", H100_POOL))
    assert any(i.path == "nodePools[1].vmSize" and "no NCCL all-reduce floor" in i.rule for i in issues)


def test_the_run_is_a_strictly_valid_kueue_job_pinned_one_pod_per_node() -> None:
    spec = _queued_spec()
    template = objects.job_template(spec, NAMESPACE, _target(spec), queued=True)
    job = fa.job_manifest(template, "aksgpu-accept-h100-120000-abcd", "h100", ("aks-h100-1", "aks-h100-0"), ())
    assert validate_object(job, "1.33") == []
    pod = job["spec"]["template"]["spec"]
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["parallelism"] == job["spec"]["completions"] == 2
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert {"key": "kubernetes.io/hostname", "operator": "In", "values": ["aks-h100-0", "aks-h100-1"]} in \
        terms[0]["matchExpressions"]
    assert pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"] == \
        "kubernetes.io/hostname", "two pods, two hosts, one pod per host"
    # Kueue manages a Job with a queue name whatever its namespace (v0.19.2 configuration_types.go).
    assert job["metadata"]["labels"][objects.KUEUE_QUEUE_LABEL] == objects.ACCEPTANCE and job["spec"]["suspend"]
    # It lands on a node held for acceptance (the gate's taint, value accepting) and on in-service ones.
    assert {"key": node_api.GATE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    container = pod["containers"][0]
    profile = fabric_profile(H100)
    assert profile is not None
    resources = container["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == "8" and resources["limits"][profile.rdma_resource] == "1"
    assert all(resources["requests"][k] == resources["limits"][k] for k in ("nvidia.com/gpu", profile.rdma_resource))
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert {k: env[k] for k in profile.nccl_env} == profile.nccl_env, "the NCCL settings of fabric.yaml"
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert env["NCCL_TOPO_FILE"].startswith(mounts["nccl-topology"] + "/")
    assert "IPC_LOCK" in container["securityContext"]["capabilities"]["add"]
    assert f"--bytes {16 * GIB}" in container["command"][2] and env["AKSGPU_ACCEPTANCE_MASTER"].startswith(
        "aksgpu-accept-h100-120000-abcd-0.")
    assert pod["subdomain"] == objects.headless_service(NAMESPACE)["metadata"]["name"]


def test_the_acceptance_queue_covers_what_a_run_requests_and_never_preempts() -> None:
    spec = _queued_spec()
    queue = objects.cluster_queue(spec, NAMESPACE, device_plugin_targets(spec))
    assert queue is not None and validate_object(queue, "1.33") == []
    assert validate_object(objects.local_queue(NAMESPACE), "1.33") == []
    template = objects.job_template(spec, NAMESPACE, _target(spec), queued=True)
    from aksgpu.components.kubernetes.gang_scheduling import kueue_configuration

    excluded = kueue_configuration(spec)["resources"]["excludeResourcePrefixes"]
    requested = {name for name in template["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
                 if not any(name.startswith(prefix) for prefix in excluded)}
    [group] = queue["spec"]["resourceGroups"]
    # Kueue's QuotaCheckBlockUndeclared (v0.19.2 configuration_types.go): a requested resource no
    # group covers, and no excluded prefix matches, keeps the workload from ever being admitted.
    assert requested == set(group["coveredResources"]) == {"cpu", "memory", "nvidia.com/gpu"}
    assert "cohortName" not in queue["spec"] and "preemption" not in queue["spec"], \
        "outside the teams' cohort: it neither borrows nor lends, and Kueue's default never preempts"
    assert queue["spec"]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}}
    priority = objects.priority_class()
    assert priority["preemptionPolicy"] == "Never" and priority["value"] < 0


def test_the_plan_declares_the_acceptance_and_the_gate_holds_new_infiniband_nodes_for_it() -> None:
    spec = edit(edit(edit(base_spec(), "nodePools.1", H100_POOL), "access.teams", [{"name": "research"}]),
                "gangScheduling.enabled", True)
    plan = plan_spec(spec)
    manifests = kubernetes_manifests(plan)
    named = {(m["kind"], m["metadata"]["name"]): m for m in manifests}
    [release] = [r for r in plan.by_type("kubernetes:helm.sh/v3:Release") if r.inputs["name"] == "kueue"]
    [queue] = [r for r in plan.resources if r.type.endswith(":ClusterQueue")
               and r.inputs["metadata"]["name"] == objects.ACCEPTANCE]
    assert release.urn in queue.dependencies, "the queue waits for Kueue's CRDs"
    cronjob = named[("CronJob", objects.ACCEPTANCE)]
    assert ("ClusterQueue", objects.ACCEPTANCE) in named and ("LocalQueue", objects.ACCEPTANCE) in named
    assert ("Service", objects.RUN) in named and ("PriorityClass", objects.ACCEPTANCE) in named
    assert cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["serviceAccountName"] == objects.ACCEPTANCE
    settings = json.loads(named[("ConfigMap", objects.ACCEPTANCE)]["data"][objects.SETTINGS_KEY])
    assert settings["pools"] == {"h100": H100} and settings["floors"][H100]["floorGBs"] == 300
    gate = named[("DaemonSet", "aksgpu-gpu-gate-aks-driver-8gpu")]
    verdict = gate["spec"]["template"]["spec"]["containers"][0]["command"]
    assert verdict[verdict.index("--acceptance-pools") + 1] == "h100"
    one_gpu = named[("DaemonSet", "aksgpu-gpu-gate-aks-driver-1gpu")]["spec"]["template"]["spec"]["containers"][0]
    assert "--acceptance-pools" not in one_gpu["command"]
    for obj in (cronjob, named[("ClusterQueue", objects.ACCEPTANCE)]):
        assert validate_object({"apiVersion": obj.get("apiVersion", "batch/v1"), "kind": obj["kind"], **obj},
                               "1.33") == []


def test_on_gpu_operator_pools_the_run_uses_the_operators_runtime_and_the_gate_holds_there_too() -> None:
    from aksgpu.components.kubernetes.gpu_gate import gate_daemonsets
    from aksgpu.components.kubernetes.gpu_software import operator_targets

    spec = _spec(**{"nodePools.1": {**H100_POOL, "gpu": {"driver": "None"}}})
    [target] = objects.acceptance_targets(operator_targets(spec), spec)
    pod = objects.job_template(spec, NAMESPACE, target, queued=False)["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "nvidia"
    [check] = [d for d in gate_daemonsets(spec, NAMESPACE) if d["metadata"]["name"] == "aksgpu-gpu-gate-operator-8gpu"]
    verdict = check["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "--release-operands" in verdict and verdict[verdict.index("--acceptance-pools") + 1] == "h100"


def test_the_gate_leaves_an_accepting_node_and_the_device_plugin_starts_there() -> None:
    assert "accepting" in UNDECIDED.split(",")
    assert "accepting" in advertised_by_gate()["values"]


def test_the_pass_may_create_jobs_only_in_aksgpus_namespace() -> None:
    rules = {(o["kind"], o["metadata"].get("namespace")): o.get("rules") for o in objects.rbac(NAMESPACE)}
    cluster = rules[("ClusterRole", None)]
    assert not any("jobs" in rule["resources"] for rule in cluster)
    assert {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "list", "delete"]} in \
        rules[("Role", NAMESPACE)]


def test_the_admission_policy_holds_the_acceptance_to_the_gates_changes() -> None:
    policy = node_change_policy(NAMESPACE)[0]
    old = {"metadata": {"name": "n", "labels": {node_api.HEALTH_LABEL: "accepting"}},
           "spec": {"taints": [GPU_TAINT], "unschedulable": True}}
    request = {"userInfo": {"username": USERS["acceptance"]}}
    relabelled = copy.deepcopy(old)
    relabelled["metadata"]["labels"]["aksgpu.io/team"] = "research"
    assert denials(policy, obj=relabelled, old=old, request=request)
    uncordoned = copy.deepcopy(old)
    uncordoned["spec"]["unschedulable"] = False
    assert denials(policy, obj=uncordoned, old=old, request=request)


# --- 4. a node's life, in a stand-in API server ------------------------------------------------


class Server(Cluster):
    """test_gpu_node_life's cluster plus the Jobs the acceptance creates and deletes."""

    def __init__(self) -> None:
        super().__init__()
        self.jobs: dict[str, dict[str, Any]] = {}
        self.created: list[dict[str, Any]] = []

    def finish(self, job_name: str, message: str | None, started: bool = True, nodes: list[str] | None = None) -> None:
        """The run ends: its pods (one per node) and the Job's Complete or Failed condition."""
        job = self.jobs[job_name]
        names = nodes or job["metadata"]["annotations"][fa.NODES_ANNOTATION].split(",")
        for index, node in enumerate(names):
            state: dict[str, Any] = {"terminated": {"exitCode": 0 if message else 1,
                                                    "startedAt": "2026-11-26T12:01:00Z",
                                                    **({"message": message} if message and index == 0 else {})}} \
                if started else {"waiting": {"reason": "ContainerCreating"}}
            self.pods.append({"metadata": {"name": f"{job_name}-{index}", "namespace": NAMESPACE,
                                           "labels": {fa.RUN_LABEL: job_name}},
                              "spec": {"nodeName": node, "containers": job["spec"]["template"]["spec"]["containers"]},
                              "status": {"phase": "Succeeded" if message else "Failed",
                                         "containerStatuses": [{"name": "allreduce", "state": state}]}})
        job.setdefault("status", {})["conditions"] = [{"type": "Complete" if message else "Failed", "status": "True"}]


class AcceptanceApiHandler(ApiHandler):
    """test_gpu_node_life's routes plus the acceptance's Jobs, in its own namespace and by its own
    service account only; deleting a Job deletes its run's pods."""

    state: Server

    def user(self) -> str:
        return USERS[(self.headers.get("Authorization") or "").removeprefix("Bearer ")]

    def get_more(self, path: str, query: dict[str, str]) -> None:
        if path != f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs":
            super().get_more(path, query)
            return
        assert self.user() == USERS["acceptance"]
        items = [j for j in self.state.jobs.values()
                 if _selected(j["metadata"].get("labels") or {}, query.get("labelSelector", ""))]
        self._reply(200, {"items": copy.deepcopy(items)})

    def do_POST(self) -> None:  # noqa: N802
        if not self.path.endswith("/jobs"):
            super().do_POST()
            return
        body = self._body()
        assert self.path == f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs", "its own namespace only"
        assert self.user() == USERS["acceptance"]
        with self.state.lock:
            body["metadata"]["creationTimestamp"] = "2026-11-26T12:00:00Z"
            self.state.jobs[body["metadata"]["name"]] = body
            self.state.created.append(copy.deepcopy(body))
        self._reply(201, body)

    def do_DELETE(self) -> None:  # noqa: N802
        name = self.path.rsplit("/", 1)[1]
        state = self.state
        with state.lock:
            assert self._body()["propagationPolicy"] == "Background", "the run's pods go with it"
            state.jobs.pop(name)
            state.pods = [p for p in state.pods if p["metadata"].get("labels", {}).get(fa.RUN_LABEL) != name]
        self._reply(200, {})


@pytest.fixture
def cluster() -> Iterator[tuple[Server, str]]:
    state = Server()
    with serving(state, AcceptanceApiHandler) as url:
        yield state, url


def _api(url: str, who: str) -> fa.Api:
    return fa.Api(url, who, None)


def _settings() -> fa.Settings:
    spec = _queued_spec()
    raw = objects.settings(spec, NAMESPACE, device_plugin_targets(spec), queued=True)
    return fa.load_settings(json.loads(json.dumps(raw)), NAMESPACE)


def _pending(state: Server, name: str) -> None:
    state.add_node(name, "h100", {node_api.HEALTH_LABEL: "pending"},
                   {node_api.PENDING_SINCE_ANNOTATION: "2026-11-26T11:50:00Z"},
                   [GPU_TAINT, {"key": node_api.GATE_TAINT_KEY, "value": "pending", "effect": "NoSchedule"}])


def _checked(state: Server, url: str, name: str, tmp_path: Path, at: datetime.datetime = NOW) -> str:
    """The node joins and passes the gate's local check on an InfiniBand pool."""
    _pending(state, name)
    folder = tmp_path / name
    folder.mkdir()
    return node_gate.verdict(_api(url, "gate"), name, _results(folder, 0), now=at, policy=POLICY,
                             acceptance_pools=frozenset({"h100"}))


def _result_line(busbw: float, nodes: list[str]) -> str:
    body = {"busbwGBs": busbw, "bytes": 16 * GIB, "ranks": 8 * len(nodes), "nodes": nodes, "wrong": 0}
    return f"{fabric_decision.RESULT_PREFIX} {json.dumps(body)}\n"


def _state(state: Server, name: str) -> str:
    return state.nodes[name]["metadata"]["labels"][node_api.HEALTH_LABEL]


def _gate_taint(state: Server, name: str) -> str | None:
    return next((t["value"] for t in state.nodes[name]["spec"]["taints"] if t["key"] == node_api.GATE_TAINT_KEY), None)


def test_new_nodes_are_held_after_their_check_and_released_when_their_pairing_passes(
        cluster: tuple[Server, str], tmp_path: Path) -> None:
    state, url = cluster
    settings, api = _settings(), _api(url, "acceptance")
    assert _checked(state, url, "aks-h100-0", tmp_path) == "accepting"
    node = state.nodes["aks-h100-0"]
    assert _gate_taint(state, "aks-h100-0") == "accepting" and GPU_TAINT in node["spec"]["taints"]
    assert not node["spec"].get("unschedulable")
    assert state.events[-1]["reason"] == "GpuCheckPassed" and "cross-node acceptance" in state.events[-1]["message"]
    # A lone new node on a pool with no in-service node: nothing to pair with yet.
    assert fa.acceptance_pass(api, settings, POLICY, NOW)["started"] == []
    assert _checked(state, url, "aks-h100-1", tmp_path) == "accepting"
    started = fa.acceptance_pass(api, settings, POLICY, NOW + datetime.timedelta(minutes=3))["started"]
    assert len(started) == 1 and validate_object(state.jobs[started[0]], "1.33") == []
    assert state.jobs[started[0]]["metadata"]["annotations"][fa.NODES_ANNOTATION] == "aks-h100-0,aks-h100-1"
    assert fa.acceptance_pass(api, settings, POLICY, NOW + datetime.timedelta(minutes=6))["started"] == [], \
        "one run at a time per node"
    state.finish(started[0], _result_line(431.7, ["aks-h100-0", "aks-h100-1"]))
    done = fa.acceptance_pass(api, settings, POLICY, NOW + datetime.timedelta(minutes=9))
    assert done["collected"] == started and sorted(done["passed"]) == ["aks-h100-0", "aks-h100-1"]
    for name in ("aks-h100-0", "aks-h100-1"):
        assert _state(state, name) == "passed" and _gate_taint(state, name) is None
        assert state.nodes[name]["spec"]["taints"] == [GPU_TAINT]
    assert state.jobs == {} and state.pods == [], "the run and its pods are deleted"
    passed = [e for e in state.record() if e["source"] == "acceptance"]
    assert [e["verdict"] for e in passed] == ["passed", "passed"] and "431.7 GB/s" in passed[0]["reason"]
    assert [e["measurements"] for e in passed] == [{"crossNodeBusBwGbps": 431.7}] * 2, "the figure promote reads"
    read = records.parse_lines(json.dumps(e) for e in state.record())
    assert promotion_decision.nccl_figure(read) == promotion_decision.CROSS_NODE
    assert promotion_decision.measured_by_node(read)["aks-h100-0"].cross_node_busbw_gbps == 431.7
    assert state.denied == []


def test_a_node_short_of_the_floor_with_an_in_service_peer_fails_naming_the_peer(
        cluster: tuple[Server, str], tmp_path: Path) -> None:
    state, url = cluster
    settings, api = _settings(), _api(url, "acceptance")
    state.add_node("aks-h100-9", "h100", {node_api.HEALTH_LABEL: "passed"})  # in service, idle
    _checked(state, url, "aks-h100-0", tmp_path)
    [run] = fa.acceptance_pass(api, settings, POLICY, NOW)["started"]
    job = state.jobs[run]
    assert job["metadata"]["annotations"][fa.KNOWN_GOOD_ANNOTATION] == "aks-h100-9"
    assert job["spec"]["template"]["spec"]["priorityClassName"] == objects.ACCEPTANCE, "never preempts work"
    state.finish(run, _result_line(121.4, ["aks-h100-0", "aks-h100-9"]))
    done = fa.acceptance_pass(api, settings, POLICY, NOW + datetime.timedelta(minutes=3))
    assert done["failed"] == ["aks-h100-0"]
    node = state.nodes["aks-h100-0"]
    labels, annotations = node["metadata"]["labels"], node["metadata"]["annotations"]
    assert labels[node_api.HEALTH_LABEL] == "failed" and labels[node_api.FAILED_CHECK_LABEL] == fa.FAILED_CHECK
    assert node["spec"]["unschedulable"] is True and _gate_taint(state, "aks-h100-0") is None
    assert "known-good peer aks-h100-9" in annotations[node_api.REASON_ANNOTATION]
    assert "121.4 GB/s at 16 GiB, floor 300" in annotations[node_api.REASON_ANNOTATION]
    assert annotations[node_api.SCALE_DOWN_DISABLED_ANNOTATION] == "true", "kept for diagnosis, as the gate's"
    event = state.events[-1]
    assert event["reason"] == "GpuCheckFailed" and "aks-h100-9" in event["message"]
    assert state.record()[-1] | {"time": None} == state.record()[-1] | {
        "time": None, "source": "acceptance", "verdict": "failed", "check": fa.FAILED_CHECK,
        "measurements": {"crossNodeBusBwGbps": 121.4}}
    peer = state.nodes["aks-h100-9"]
    assert _state(state, "aks-h100-9") == "passed" and not peer["spec"].get("unschedulable"), "the peer is untouched"
    assert state.denied == []


def test_two_new_nodes_that_fail_together_are_told_apart_by_a_third(
        cluster: tuple[Server, str], tmp_path: Path) -> None:
    state, url = cluster
    settings, api = _settings(), _api(url, "acceptance")
    _checked(state, url, "aks-h100-a", tmp_path)
    _checked(state, url, "aks-h100-b", tmp_path)
    [first] = fa.acceptance_pass(api, settings, POLICY, NOW)["started"]
    state.finish(first, _result_line(140.0, ["aks-h100-a", "aks-h100-b"]))
    done = fa.acceptance_pass(api, settings, POLICY, NOW + datetime.timedelta(minutes=3))
    assert done["failed"] == [] and done["started"] == [], "one failed pairing convicts neither; no third node yet"
    assert _state(state, "aks-h100-a") == _state(state, "aks-h100-b") == "accepting"
    _checked(state, url, "aks-h100-c", tmp_path, NOW + datetime.timedelta(minutes=4))
    [second] = fa.acceptance_pass(api, settings, POLICY, NOW + datetime.timedelta(minutes=6))["started"]
    assert state.jobs[second]["metadata"]["annotations"][fa.NODES_ANNOTATION] == "aks-h100-a,aks-h100-c"
    state.finish(second, _result_line(455.0, ["aks-h100-a", "aks-h100-c"]))
    done = fa.acceptance_pass(api, settings, POLICY, NOW + datetime.timedelta(minutes=9))
    assert sorted(done["passed"]) == ["aks-h100-a", "aks-h100-c"] and done["failed"] == ["aks-h100-b"], \
        "a passed with c, so a is good and the first pairing's failure is b's"
    reason = state.nodes["aks-h100-b"]["metadata"]["annotations"][node_api.REASON_ANNOTATION]
    assert "known-good peer aks-h100-a" in reason and "140.0 GB/s" in reason
    assert state.denied == []


def test_a_lone_node_on_a_busy_pool_takes_work_after_the_hold_bound_with_a_warning(
        cluster: tuple[Server, str], tmp_path: Path) -> None:
    state, url = cluster
    settings, api = _settings(), _api(url, "acceptance")
    state.add_node("aks-h100-9", "h100", {node_api.HEALTH_LABEL: "passed"})
    state.pods.append({"metadata": {"name": "train-0", "namespace": "research", "labels": {}},
                       "spec": {"nodeName": "aks-h100-9", "containers": [
                           {"name": "main", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
                       "status": {"phase": "Running"}})
    _checked(state, url, "aks-h100-0", tmp_path)
    assert fa.acceptance_pass(api, settings, POLICY, NOW + datetime.timedelta(minutes=30))["started"] == [], \
        "the only in-service node is busy: its work is never preempted"
    assert _state(state, "aks-h100-0") == "accepting"
    done = fa.acceptance_pass(api, settings, POLICY, NOW + datetime.timedelta(minutes=settings.hold_minutes + 1))
    assert done["released"] == ["aks-h100-0"]
    node = state.nodes["aks-h100-0"]
    assert _state(state, "aks-h100-0") == "passed" and _gate_taint(state, "aks-h100-0") is None
    assert node["metadata"]["annotations"][fa.OUTCOME_ANNOTATION] == "released-unmeasured"
    event = state.events[-1]
    assert event["type"] == "Warning" and event["reason"] == "GpuFabricUnaccepted" and "no peer was free" in \
        event["message"]
    assert state.denied == []


def test_a_run_whose_pods_never_started_blames_nobody_and_is_run_again(
        cluster: tuple[Server, str], tmp_path: Path) -> None:
    state, url = cluster
    settings, api = _settings(), _api(url, "acceptance")
    _checked(state, url, "aks-h100-0", tmp_path)
    _checked(state, url, "aks-h100-1", tmp_path)
    [run] = fa.acceptance_pass(api, settings, POLICY, NOW)["started"]
    state.finish(run, None, started=False)
    done = fa.acceptance_pass(api, settings, POLICY, NOW + datetime.timedelta(minutes=25))
    assert done["failed"] == [] and len(done["started"]) == 1 and done["started"] != [run]
    recorded = fabric_decision.results_of(state.nodes["aks-h100-0"])
    assert [r.outcome for r in recorded] == ["inconclusive"] and recorded[0].peers == ("aks-h100-1",)


def test_systemic_acceptance_failures_open_the_gates_breaker(cluster: tuple[Server, str], tmp_path: Path) -> None:
    """A wrong NCCL setting fails every pairing: after the breaker's share, nodes are held, not failed."""
    state, url = cluster
    settings, api = _settings(), _api(url, "acceptance")
    for index in range(3):
        state.add_node(f"aks-h100-g{index}", "h100", {node_api.HEALTH_LABEL: "passed"})
        _checked(state, url, f"aks-h100-{index}", tmp_path)
    # The three new nodes pair among themselves first; make them suspects, then face known-good peers.
    runs = fa.acceptance_pass(api, settings, POLICY, NOW)["started"]
    for run in runs:
        state.finish(run, _result_line(2.0, []))
    runs = fa.acceptance_pass(api, settings, POLICY, NOW + datetime.timedelta(minutes=3))["started"]
    for run in runs:
        state.finish(run, _result_line(2.0, []))
    done = fa.acceptance_pass(api, settings, POLICY, NOW + datetime.timedelta(minutes=6))
    outcomes = {name: _state(state, name) for name in ("aks-h100-0", "aks-h100-1", "aks-h100-2")}
    assert sorted(outcomes.values()) == ["failed", "failed", "held"], (done, outcomes)
    assert state.denied == []


def test_the_watchdog_never_strands_a_node_held_for_acceptance(cluster: tuple[Server, str], tmp_path: Path) -> None:
    """The acceptance pass stopped (its image cannot be pulled), or the spec turned the acceptance
    off: the gate's watchdog releases the held nodes with a warning."""
    state, url = cluster
    _checked(state, url, "aks-h100-0", tmp_path)
    _checked(state, url, "aks-h100-1", tmp_path, NOW + datetime.timedelta(minutes=100))
    watchdog = _api(url, "watchdog")
    later = NOW + datetime.timedelta(minutes=151)
    done = node_watchdog.watchdog(watchdog, 30, now=later, policy=POLICY, pools=["h100"],
                              acceptance_pools={"h100"}, max_accepting_minutes=150)
    assert done["unaccepted"] == ["aks-h100-0"], "the newer one is within the bound"
    assert _state(state, "aks-h100-0") == "passed" and _gate_taint(state, "aks-h100-0") is None
    assert state.events[-1]["reason"] == "GpuFabricUnaccepted" and "not deciding" in state.events[-1]["message"]
    done = node_watchdog.watchdog(watchdog, 30, now=later, policy=POLICY, pools=["h100"],
                              acceptance_pools=set(), max_accepting_minutes=150)
    assert done["unaccepted"] == ["aks-h100-1"] and "no longer has" in state.events[-1]["message"]
    assert state.denied == []


def test_the_watchdog_carries_the_acceptance_bound() -> None:
    from aksgpu.components.kubernetes.gpu_gate_jobs import gate_watchdog

    command = gate_watchdog(_spec(), NAMESPACE)["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0][
        "command"]
    assert command[command.index("--acceptance-pools") + 1] == "h100"
    assert float(command[command.index("--max-accepting-minutes") + 1]) > _spec().gpu_health.acceptance.hold_minutes


def test_an_unchecked_or_unconfirmed_node_is_not_a_known_good_peer() -> None:
    def node(state: str, **annotations: str) -> dict[str, Any]:
        return {"metadata": {"labels": {node_api.HEALTH_LABEL: state}, "annotations": annotations}, "spec": {}}

    assert fa.known_good(node("passed"))
    assert not fa.known_good(node("unchecked")), "older than the gate: never checked"
    assert not fa.known_good(node("passed", **{fa.OUTCOME_ANNOTATION: "released-unconfirmed"}))


def test_the_pass_runs_from_the_files_the_cronjob_mounts(tmp_path: Path) -> None:
    """The CronJob mounts the gate's node_api.py and node_verdicts.py, fabric_acceptance.py and
    fabric_decision.py (and the settings) side by side in a Python image without aksgpu: the program
    must import only the standard library and its siblings."""
    import shutil
    import subprocess
    import sys

    cronjob = objects.controller_cronjob(_spec(), NAMESPACE, [], "aksgpu-node-gate")
    pod = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    [programs] = [v for v in pod["volumes"] if v["name"] == "programs"]
    mounted = sorted(item["path"] for source in programs["projected"]["sources"]
                     for item in source["configMap"]["items"])
    assert mounted == ["fabric_acceptance.py", "fabric_decision.py", "node_api.py", "node_verdicts.py",
                       objects.SETTINGS_KEY]
    assert pod["containers"][0]["command"][1] == f"{objects.SCRIPT_DIR}/fabric_acceptance.py"
    for module in (fa, fabric_decision, node_api, node_verdicts):
        shutil.copy(module.__file__, tmp_path)
    # -S -E -s: no site-packages (aksgpu is not importable), as in the helper image; the script's folder
    # is on the path, as for `python3 /opt/aksgpu/fabric_acceptance.py`.
    result = subprocess.run([sys.executable, "-S", "-E", "-s", str(tmp_path / "fabric_acceptance.py"), "--help"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    from aksgpu.node import fabric_allreduce

    shutil.copy(fabric_allreduce.__file__, tmp_path)
    result = subprocess.run([sys.executable, "-S", "-E", "-s", str(tmp_path / "fabric_allreduce.py"), "--help"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, "PyTorch is imported only when it measures: " + result.stderr


def kueue_flavor_fits(flavor: dict[str, Any], pod_template: dict[str, Any],
                      queue_flavors: list[dict[str, Any]]) -> bool:
    """Whether Kueue v0.19.2 may assign a topology-aware ResourceFlavor to a batch Job's PodSet, as
    far as the topology request goes: pkg/scheduler/flavorassigner/tas_flavorassigner.go refuses a
    flavor with a topologyName ("supports only TopologyAwareScheduling") unless the PodSet asks for
    topology explicitly (a kueue.x-k8s.io/podset-*-topology annotation on the pod template,
    pkg/workload/workload.go IsExplicitlyRequestingTAS) or the request is implied, which it is only
    when every flavor of the ClusterQueue is topology-aware (cq.IsTASOnly())."""
    if not flavor["spec"].get("topologyName"):
        return True
    annotations = pod_template.get("metadata", {}).get("annotations") or {}
    explicit = any(key.startswith("kueue.x-k8s.io/podset-") and key.endswith("-topology") for key in annotations)
    return explicit or all(f["spec"].get("topologyName") for f in queue_flavors)


def test_a_run_is_admissible_on_its_pools_flavor_in_a_queue_of_mixed_flavors() -> None:
    """gangScheduling.topology auto makes only fixed-size InfiniBand pools topology-aware, and the
    acceptance queue holds every acceptance pool's flavor: without an explicit topology request a
    run for the fixed pool would never be admitted there (and be deleted as inconclusive)."""
    fixed = {**H100_POOL, "name": "h100", "count": 2}
    fixed.pop("minCount"), fixed.pop("maxCount")
    grows = {**H100_POOL, "name": "h100b", "zones": ["2"], "labels": {"aksgpu.io/ib-domain": "h100b"}}
    raw = edit(edit(edit(base_spec(), "nodePools.1", fixed), "nodePools.2", grows), "access.teams",
               [{"name": "research"}])
    raw = edit(edit(raw, "gangScheduling", {"enabled": True, "topology": "auto"}),
               "controlPlane.kubernetesVersion", "1.34")
    spec, _ = parse_cluster_spec(raw)
    manifests = kubernetes_manifests(plan_spec(raw))
    flavors = {m["metadata"]["name"]: m for m in manifests if m["kind"] == "ResourceFlavor"}
    [queue] = [m for m in manifests if m["kind"] == "ClusterQueue" and m["metadata"]["name"] == objects.ACCEPTANCE]
    queue_flavors = [flavors[f["name"]] for group in queue["spec"]["resourceGroups"] for f in group["flavors"]]
    assert sorted(bool(f["spec"].get("topologyName")) for f in queue_flavors) == [False, True], "a mixed queue"
    for target in objects.acceptance_targets(device_plugin_targets(spec), spec):
        template = objects.job_template(spec, NAMESPACE, target, queued=True)
        job = fa.job_manifest(template, f"aksgpu-accept-{target.name}-1", target.name, ("a", "b"), ())
        pool_flavors = [f for f in queue_flavors
                        if f["spec"]["nodeLabels"].get("kubernetes.azure.com/agentpool") == target.name]
        assert pool_flavors and all(kueue_flavor_fits(f, job["spec"]["template"], queue_flavors)
                                    for f in pool_flavors), target.name
        assert validate_object(job, "1.33") == []
