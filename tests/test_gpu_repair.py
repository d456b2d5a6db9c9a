"""The GPU node repair loop (gpuHealth.repair): its decisions on recorded cluster states
(tests/data/repair/*.json: healthy, one failed past its window, many failed = the breaker open, a
PodDisruptionBudget in the way, Azure Scheduled Events), and its node program against a stand-in
API server and a fake of its Azure client. The Azure calls themselves are not exercised here."""

from __future__ import annotations

import copy
import datetime
import json
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from aksgpu.node import node_api, node_repair, node_verdicts, repair_azure, repair_decision
from tests.test_gpu_health import merge_patch

DATA = Path(__file__).parent / "data" / "repair"
CASES = sorted(path.stem for path in DATA.glob("*.json"))
NAMESPACE = "aksgpu-system"


def _case(name: str) -> dict[str, Any]:
    return json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))


def _now(case: dict[str, Any]) -> datetime.datetime:
    found = node_api._timestamp(case["now"])
    assert found is not None
    return found


class FakeCluster(node_repair.Api):
    """The API server as the loop sees it: nodes (merge patch with optimistic locking), pods, budgets,
    the Eviction API (429 where a budget allows no disruption), the record ConfigMap and Events."""

    def __init__(self, case: dict[str, Any]) -> None:
        super().__init__("http://unused", None, None)
        self.nodes = {node["metadata"]["name"]: copy.deepcopy(node) for node in case["nodes"]}
        self.pods = copy.deepcopy(case["pods"])
        self.budgets = copy.deepcopy(case["budgets"])
        self.record = {"metadata": {"name": node_verdicts.RECORD_CONFIGMAP, "namespace": NAMESPACE,
                                    "resourceVersion": "1"},
                       "data": {node_verdicts.RECORD_KEY: "".join(json.dumps(e) + "\n" for e in case["record"])}}
        self.events: list[dict[str, Any]] = []
        self.evicted: list[str] = []
        self.writes = 0

    def entries(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.record["data"][node_verdicts.RECORD_KEY].splitlines()]

    def _request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        url = urllib.parse.urlsplit(path)
        query = dict(urllib.parse.parse_qsl(url.query))
        parts = url.path.strip("/").split("/")
        if method != "GET":
            self.writes += 1
        if url.path == "/api/v1/nodes":
            pools = query["labelSelector"].split(" in (", 1)[1].rstrip(")").split(",")
            return {"items": [copy.deepcopy(n) for n in self.nodes.values()
                              if n["metadata"]["labels"].get(node_api.AGENT_POOL_LABEL) in pools]}
        if parts[:3] == ["api", "v1", "nodes"]:
            name = parts[3]
            if name not in self.nodes:
                raise urllib.error.HTTPError(path, 404, "NotFound", None, None)  # type: ignore[arg-type]
            if method == "GET":
                return copy.deepcopy(self.nodes[name])
            assert content_type == "application/merge-patch+json"
            if body["metadata"]["resourceVersion"] != self.nodes[name]["metadata"]["resourceVersion"]:
                raise urllib.error.HTTPError(path, 409, "Conflict", None, None)  # type: ignore[arg-type]
            changed = merge_patch(self.nodes[name], body)
            changed["metadata"]["resourceVersion"] = str(int(changed["metadata"]["resourceVersion"]) + 1)
            self.nodes[name] = changed
            return copy.deepcopy(changed)
        if url.path == "/api/v1/pods":
            node = query["fieldSelector"].removeprefix("spec.nodeName=")
            return {"items": [copy.deepcopy(p) for p in self.pods if p["spec"]["nodeName"] == node]}
        if url.path == "/apis/policy/v1/poddisruptionbudgets":
            return {"items": copy.deepcopy(self.budgets)}
        if parts[-1] == "eviction":
            namespace, name = parts[3], parts[5]
            assert body["kind"] == "Eviction" and body["apiVersion"] == "policy/v1"
            pod = next(p for p in self.pods
                       if p["metadata"]["namespace"] == namespace and p["metadata"]["name"] == name)
            if node_repair.blocking_budgets([pod], self.budgets):
                raise urllib.error.HTTPError(path, 429, "TooManyRequests", None, None)  # type: ignore[arg-type]
            self.pods.remove(pod)
            self.evicted.append(f"{namespace}/{name}")
            return {}
        if parts[-1] == node_verdicts.RECORD_CONFIGMAP:
            if method == "GET":
                return copy.deepcopy(self.record)
            self.record = copy.deepcopy(body)
            return body
        if parts[-1] == "events":
            self.events.append(body)
            return body
        raise AssertionError(f"unexpected call {method} {path}")


class FakeCompute:
    """A fake of repair_azure.AzureCompute: records the calls (a reimage by its VMSS instance, a
    delete through AKS by pool/node), fails with an HTTP status when told to (every call, or per call)."""

    def __init__(self, fail: int | None = None, fail_reimage: int | None = None) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fail = fail
        self.fail_reimage = fail_reimage

    def _call(self, action: str, target: str, fail: int | None) -> None:
        if fail:
            raise urllib.error.HTTPError("arm", fail, "AuthorizationFailed", None, None)  # type: ignore[arg-type]
        self.calls.append((action, target))

    def reimage(self, instance: repair_azure.Instance) -> None:
        self._call("reimage", instance.path, self.fail or self.fail_reimage)

    def delete_machine(self, pool: str, machine: str) -> None:
        self._call("delete", f"{pool}/{machine}", self.fail)


def _states(cluster: FakeCluster, case: dict[str, Any]) -> list[repair_decision.NodeState]:
    return [node_repair.node_state(cluster.nodes[name], [p for p in cluster.pods if p["spec"]["nodeName"] == name],
                                   cluster.budgets, case["imdsEvents"]) for name in sorted(cluster.nodes)]


def _run(cluster: FakeCluster, case: dict[str, Any], compute: FakeCompute | None, now: datetime.datetime,
         policy: repair_decision.RepairPolicy | None = None) -> list[str]:
    return node_repair.run(cluster, compute, case["pools"], policy or repair_decision.RepairPolicy(), NAMESPACE, now,
                           dry_run=compute is None, imds_events=case["imdsEvents"])


@pytest.mark.parametrize("name", CASES)
def test_each_recorded_case_decides_as_expected_and_a_dry_run_changes_nothing(name: str) -> None:
    case = _case(name)
    cluster = FakeCluster(case)
    decisions = repair_decision.decide(_states(cluster, case), repair_decision.RepairPolicy(),
                                       node_repair.recent_actions(cluster.entries()), _now(case))
    assert {d.node: d.action for d in decisions} == case["expected"], case["description"]
    assert all(d.reason for d in decisions), "every decision says why"
    before = copy.deepcopy(cluster.nodes)
    lines = _run(cluster, case, None, _now(case))
    assert cluster.nodes == before and cluster.writes == 0 and not cluster.evicted, "a dry run writes nothing"
    for decision in decisions:
        if decision.action in ("drain", "reimage", "delete"):
            assert any(line.startswith(f"{decision.node} ") and f"dry-run: would {decision.action}:" in line
                       for line in lines), lines


def test_the_cases_cover_what_the_loop_must_tell_apart() -> None:
    assert set(CASES) >= {"healthy", "one-failed-past-window", "breaker-open", "pdb-blocking", "scheduled-event"}
    reasons = {name: [d.reason for d in repair_decision.decide(
        _states(FakeCluster(_case(name)), _case(name)), repair_decision.RepairPolicy(), [], _now(_case(name)))]
        for name in CASES}
    assert any("circuit breaker open for pool a100: 4 of 6 (67%)" in r for r in reasons["breaker-open"]), reasons
    assert any("PodDisruptionBudget inference/llm-server allows no disruption" in r for r in reasons["pdb-blocking"])
    assert not any("research/other" in r for r in reasons["pdb-blocking"]), "a budget of other pods is not in the way"
    assert any("kept for diagnosis 60 minutes" in r for r in reasons["one-failed-past-window"])
    assert any("its bound is 1" in r for r in reasons["one-failed-past-window"])
    assert any(r.startswith("Azure scheduled Reboot (602d9444") for r in reasons["scheduled-event"])


def test_a_failed_node_is_drained_reimaged_and_put_back_under_the_gate_one_at_a_time() -> None:
    case = _case("one-failed-past-window")
    cluster, compute, now = FakeCluster(case), FakeCompute(), _now(case)
    first, late = sorted(cluster.nodes)[0], sorted(cluster.nodes)[2]
    _run(cluster, case, compute, now)
    node = cluster.nodes[first]
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["annotations"][node_repair.REPAIR_ANNOTATION] == "draining"
    assert cluster.evicted == ["research/notebook-7f9c-abcde"], "DaemonSet pods stay"
    assert compute.calls == [], "no reimage while pods are on the node"
    assert [e["reason"] for e in cluster.events] == ["GpuRepairDrain"]
    assert [(e["node"], e["verdict"], e["source"]) for e in cluster.entries()] == [(first, "drain", "repair")]
    # Next pass: drained, so reimaged; the node goes back under the gate.
    _run(cluster, case, compute, now + datetime.timedelta(minutes=5))
    instance = repair_azure.instance_of(node["spec"]["providerID"])
    assert instance is not None and compute.calls == [("reimage", instance.path)]
    node = cluster.nodes[first]
    assert node["metadata"]["labels"][node_api.HEALTH_LABEL] == "pending"
    assert node_api.FAILED_CHECK_LABEL not in node["metadata"]["labels"]
    assert node["spec"]["unschedulable"] is False
    assert {"key": node_api.GATE_TAINT_KEY, "value": "pending", "effect": "NoSchedule"} in node["spec"]["taints"]
    assert node["metadata"]["annotations"][node_repair.REIMAGES_ANNOTATION] == "1"
    assert node_api.KEPT_ANNOTATION not in node["metadata"]["annotations"]
    assert cluster.nodes[late]["metadata"]["annotations"].get(node_repair.REPAIR_ANNOTATION) is None, \
        "the pool's bound (1) holds while the first node is being repaired"
    # The gate passes it: the repair is done, and the next failed node gets its turn.
    cluster.nodes[first]["metadata"]["labels"][node_api.HEALTH_LABEL] = "passed"
    _run(cluster, case, compute, now + datetime.timedelta(minutes=40))
    assert cluster.nodes[first]["metadata"]["annotations"][node_repair.REPAIR_ANNOTATION] == "repaired"
    # It has no pods left (the gate cordoned it when it failed): reimaged at once.
    assert cluster.nodes[late]["metadata"]["annotations"][node_repair.REPAIR_ANNOTATION] == "reimaging"
    assert sorted(e["reason"] for e in cluster.events[-2:]) == ["GpuRepairDone", "GpuRepairReimage"]
    assert cluster.entries()[-2]["reason"] == "passed the gate's check after its reimage"


def test_a_node_that_fails_again_after_its_reimage_is_deleted() -> None:
    case = _case("one-failed-past-window")
    cluster, compute, now = FakeCluster(case), FakeCompute(), _now(case)
    first = sorted(cluster.nodes)[0]
    cluster.nodes[first]["metadata"]["annotations"][node_repair.REIMAGES_ANNOTATION] = "1"
    cluster.pods = [p for p in cluster.pods if p["spec"]["nodeName"] != first]
    _run(cluster, case, compute, now)
    # Through AKS (its agent pool's deleteMachines, the node's name), not the scale set's instance.
    pool = cluster.nodes[first]["metadata"]["labels"][node_api.AGENT_POOL_LABEL]
    assert compute.calls == [("delete", f"{pool}/{first}")]
    assert cluster.nodes[first]["metadata"]["annotations"][node_repair.REPAIR_ANNOTATION] == "deleting"
    assert cluster.events[-1]["reason"] == "GpuRepairDelete" and cluster.events[-1]["type"] == "Warning"
    # Asked once: the next passes wait for the node to leave rather than delete it again.
    _run(cluster, case, compute, now + datetime.timedelta(minutes=5))
    assert [call[0] for call in compute.calls] == ["delete"]
    # Deleted: the node leaves the list, but its delete still takes the pool's one slot for a while.
    del cluster.nodes[first]
    decisions = {d.node: d for d in repair_decision.decide(
        _states(cluster, case), repair_decision.RepairPolicy(), node_repair.recent_actions(cluster.entries()),
        now + datetime.timedelta(minutes=10))}
    assert decisions[sorted(cluster.nodes)[1]].action == "wait"
    later = repair_decision.decide(_states(cluster, case), repair_decision.RepairPolicy(),
                                   node_repair.recent_actions(cluster.entries()), now + datetime.timedelta(minutes=45))
    assert {d.node: d.action for d in later}[sorted(cluster.nodes)[1]] == "reimage"


def test_an_azure_error_is_recorded_and_the_node_stays_as_it_was() -> None:
    case = _case("one-failed-past-window")
    cluster, compute, now = FakeCluster(case), FakeCompute(fail=403), _now(case)
    first = sorted(cluster.nodes)[0]
    cluster.pods = [p for p in cluster.pods if p["spec"]["nodeName"] != first]
    lines = _run(cluster, case, compute, now)
    assert cluster.nodes[first]["metadata"]["labels"][node_api.HEALTH_LABEL] == "failed"
    assert cluster.events[-1]["reason"] == "GpuRepairFailed" and "403" in cluster.events[-1]["message"]
    assert lines[-1] == f"error: {first}"


def test_a_reimage_denied_by_node_resource_group_lockdown_falls_back_to_a_delete_through_aks() -> None:
    """ReadOnly lockdown denies the scale set's reimage (403); AKS's deleteMachines is allowed."""
    case = _case("one-failed-past-window")
    cluster, compute, now = FakeCluster(case), FakeCompute(fail_reimage=403), _now(case)
    first = sorted(cluster.nodes)[0]
    cluster.pods = [p for p in cluster.pods if p["spec"]["nodeName"] != first]
    lines = _run(cluster, case, compute, now)
    pool = cluster.nodes[first]["metadata"]["labels"][node_api.AGENT_POOL_LABEL]
    assert compute.calls == [("delete", f"{pool}/{first}")]
    annotations = cluster.nodes[first]["metadata"]["annotations"]
    assert annotations[node_repair.REPAIR_ANNOTATION] == "deleting"
    assert "reimage was denied (403" in annotations[node_repair.REPAIR_REASON_ANNOTATION]
    assert node_repair.REIMAGES_ANNOTATION not in annotations, "not reimaged"
    assert cluster.events[-1]["reason"] == "GpuRepairDelete" and "lockdown" in cluster.events[-1]["message"]
    assert (cluster.entries()[-1]["verdict"], lines[-1]) == ("delete", f"delete: {first}")
    # Asked once: the next pass waits for the node to leave.
    _run(cluster, case, compute, now + datetime.timedelta(minutes=5))
    assert len(compute.calls) == 1


def test_a_reimage_that_fails_otherwise_is_recorded_not_turned_into_a_delete() -> None:
    case = _case("one-failed-past-window")
    cluster, compute, now = FakeCluster(case), FakeCompute(fail_reimage=409), _now(case)
    first = sorted(cluster.nodes)[0]
    cluster.pods = [p for p in cluster.pods if p["spec"]["nodeName"] != first]
    assert _run(cluster, case, compute, now)[-1] == f"error: {first}" and compute.calls == []


def test_a_budget_that_allows_no_disruption_keeps_its_pod() -> None:
    case = _case("pdb-blocking")
    cluster = FakeCluster(case)
    _run(cluster, case, FakeCompute(), _now(case))
    assert cluster.evicted == [] and len(cluster.pods) == 1
    # The budget allows one disruption again: the pod is evicted, then the node reimaged.
    cluster.budgets[0]["status"]["disruptionsAllowed"] = 1
    compute = FakeCompute()
    _run(cluster, case, compute, _now(case))
    assert cluster.evicted == ["inference/llm-server-5d8f-xyz12"]
    _run(cluster, case, compute, _now(case))
    assert [call[0] for call in compute.calls] == ["reimage"]


def test_the_breaker_stops_every_repair() -> None:
    case = _case("breaker-open")
    cluster, compute = FakeCluster(case), FakeCompute()
    _run(cluster, case, compute, _now(case))
    assert compute.calls == [] and cluster.writes == 0 and not cluster.evicted


def test_the_cluster_breaker() -> None:
    now = datetime.datetime(2026, 11, 27, 12, 0, tzinfo=datetime.timezone.utc)
    nodes = [repair_decision.NodeState(f"{pool}-{i}", pool, "failed" if i < 2 else "passed",
                                       failed_at=now - datetime.timedelta(minutes=10))
             for pool in ("a", "b", "c") for i in range(8)]
    cluster_open, pools_open = repair_decision.breaker(nodes, repair_decision.RepairPolicy(), now)
    assert pools_open == {} and cluster_open is None, "6 of 24 (25%) is under 30%"
    cluster_open, _ = repair_decision.breaker(nodes, repair_decision.RepairPolicy(breaker_cluster_percent=20), now)
    assert cluster_open is not None and "6 of 24 (25%)" in cluster_open
    decisions = repair_decision.decide(nodes, repair_decision.RepairPolicy(breaker_cluster_percent=20,
                                                                           diagnosis_window_minutes=5), [], now)
    assert {d.action for d in decisions} == {"nothing"}
    one = [repair_decision.NodeState("a-0", "a", "failed", failed_at=now - datetime.timedelta(minutes=10))]
    assert repair_decision.breaker(one, repair_decision.RepairPolicy(), now) == (None, {}), \
        "one failed node of a one-node pool is not a trend (breakerMinFailures)"


@pytest.mark.parametrize(("size", "percent", "bound"), [(1, 10, 1), (9, 10, 1), (10, 10, 1), (30, 10, 3), (7, 50, 3)])
def test_the_pools_bound(size: int, percent: float, bound: int) -> None:
    assert repair_decision.pool_bound(size, percent) == bound


def test_a_scheduled_event_drains_ahead_and_releases_after() -> None:
    case = _case("scheduled-event")
    cluster, compute, now = FakeCluster(case), FakeCompute(), _now(case)
    names = sorted(cluster.nodes)
    _run(cluster, case, compute, now)
    assert sorted(cluster.evicted) == ["research/train-0-abcde", "research/train-1-abcde"]
    assert [cluster.nodes[n]["metadata"]["annotations"].get(node_repair.REPAIR_ANNOTATION) for n in names] == \
        [node_repair.EVENT_DRAINED, node_repair.EVENT_DRAINED, None, None]
    assert compute.calls == []
    # The events are over (IMDS no longer lists them, the condition is False): the nodes take work again.
    done = {**case, "imdsEvents": []}
    cluster.nodes[names[1]]["status"]["conditions"][1]["status"] = "False"
    _run(cluster, done, compute, now + datetime.timedelta(minutes=30))
    assert [cluster.nodes[n]["spec"].get("unschedulable") for n in names[:2]] == [False, False]
    assert {e["reason"] for e in cluster.events} == {"GpuRepairDrain", "GpuRepairRelease"}
    # Freeze is drained only when asked for.
    asked = repair_decision.RepairPolicy(drain_event_types=repair_decision.EVENT_TYPES)
    decisions = {d.node: d.action for d in repair_decision.decide(_states(FakeCluster(case), case), asked, [], now)}
    assert decisions[names[2]] == "drain"


def test_a_node_without_a_vmss_instance_is_left_alone() -> None:
    case = _case("one-failed-past-window")
    cluster = FakeCluster(case)
    first = sorted(cluster.nodes)[0]
    cluster.nodes[first]["spec"]["providerID"] = "azure:///subscriptions/s/resourceGroups/g/providers/" \
                                                 "Microsoft.Compute/virtualMachines/standalone"
    decisions = {d.node: d for d in repair_decision.decide(_states(cluster, case), repair_decision.RepairPolicy(), [],
                                                           _now(case))}
    assert decisions[first].action == "nothing" and "no VMSS instance" in decisions[first].reason


def test_the_selector_of_a_budget() -> None:
    labels = {"app": "llm", "tier": "serve"}
    assert node_repair._matches({}, labels), "an empty selector selects every pod of its namespace"
    assert not node_repair._matches(None, labels)
    assert node_repair._matches({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["serve"]},
                                                      {"key": "gpu", "operator": "DoesNotExist"}]}, labels)
    assert not node_repair._matches({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["llm"]}]},
                                    labels)


# --- the Azure client's requests (built here, never sent: Azure is not exercised offline) ---


def _captured(client: repair_azure.AzureCompute, answers: list[Any]) -> list[urllib.request.Request]:
    seen: list[urllib.request.Request] = []

    def answer(request: urllib.request.Request, timeout: float = 30) -> Any:
        seen.append(request)
        return answers.pop(0)

    client._open = answer  # type: ignore[method-assign]
    return seen


def test_the_azure_client_reimages_the_nodes_instance_and_deletes_it_with_a_workload_identity_token(
        tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("federated-jwt\n", encoding="utf-8")
    client = repair_azure.AzureCompute({"AZURE_CLIENT_ID": "cid", "AZURE_TENANT_ID": "tid",
                                        "AZURE_FEDERATED_TOKEN_FILE": str(token_file),
                                        "AZURE_AUTHORITY_HOST": "https://login.microsoftonline.com/"})
    seen = _captured(client, [{"access_token": "arm-token", "expires_in": 3600}, {}, {}])
    client.cluster_id = CLUSTER_ID
    instance = repair_azure.instance_of(_case("healthy")["nodes"][0]["spec"]["providerID"])
    assert instance is not None and instance.instance == "0" and instance.vmss == "aks-h100-12345678-vmss"
    client.reimage(instance)
    client.delete_machine("h100", "aks-h100-12345678-vmss000000")
    login, reimage, delete = seen
    assert login.full_url == "https://login.microsoftonline.com/tid/oauth2/v2.0/token"
    form = dict(urllib.parse.parse_qsl((login.data or b"").decode()))
    assert form["client_assertion"] == "federated-jwt" and form["scope"] == "https://management.azure.com/.default"
    assert reimage.get_method() == "POST" and reimage.full_url == (
        f"https://management.azure.com{instance.path}/reimage?api-version={repair_azure.COMPUTE_API_VERSION}")
    assert delete.get_method() == "POST" and delete.full_url.endswith(
        "/agentPools/h100/deleteMachines?api-version=2025-09-01")
    assert reimage.get_header("Authorization") == "Bearer arm-token", "one token for both calls"


CLUSTER_ID = ("/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg-gpu/providers/"
              "Microsoft.ContainerService/managedClusters/gpu")


def test_the_azure_client_deletes_a_node_through_aks_delete_machines_as_the_spec_says(tmp_path: Path) -> None:
    """POST <cluster>/agentPools/<pool>/deleteMachines?api-version=2025-09-01 with the node's name;
    the path and body checked against Azure's own OpenAPI spec (Microsoft.ContainerService 2025-09-01)."""
    from tests.oracles.azure_openapi import AksOpenApi

    client = repair_azure.AzureCompute({}, cluster_id=CLUSTER_ID)
    seen = _captured(client, [{"access_token": "t", "expires_in": 3600}, {}])
    client.delete_machine("h100", "aks-h100-12345678-vmss000000")
    _, delete = seen
    assert delete.get_method() == "POST" and delete.full_url == (
        f"https://management.azure.com{CLUSTER_ID}/agentPools/h100/deleteMachines?api-version=2025-09-01")
    assert "Microsoft.Compute" not in delete.full_url, "never the scale set directly"
    body = json.loads(delete.data or b"")
    assert body == {"machineNames": ["aks-h100-12345678-vmss000000"]}
    spec = Path(__file__).resolve().parents[2] / "shared"
    if not (spec / "specs").is_dir():
        pytest.skip(f"Azure OpenAPI specs not found under {spec}")
    oracle = AksOpenApi.load(spec)
    path = urllib.parse.urlsplit(delete.full_url).path.split("/")
    parameters = {"resourceGroupName": path[4], "resourceName": path[8], "agentPoolName": path[10]}
    assert path[9:] == ["agentPools", "h100", "deleteMachines"] and path[5:8] == [
        "providers", "Microsoft.ContainerService", "managedClusters"]
    assert oracle.validate_request("AgentPools_DeleteMachines", parameters, body) == []
    assert oracle.validate_request("AgentPools_DeleteMachines", parameters, {"machines": ["x"]}), \
        "the oracle would catch a wrong body"


def test_the_azure_client_refuses_a_delete_it_cannot_address() -> None:
    with pytest.raises(ValueError, match="--cluster-id"):
        repair_azure.AzureCompute({}).delete_machine("h100", "aks-h100-1")
    with pytest.raises(ValueError, match="no agent pool"):
        repair_azure.AzureCompute({}, cluster_id=CLUSTER_ID).delete_machine("", "aks-h100-1")


def test_the_azure_client_falls_back_to_imds_and_reads_scheduled_events() -> None:
    client = repair_azure.AzureCompute({})
    seen = _captured(client, [{"access_token": "t", "expires_in": "3599"}, {}, {"DocumentIncarnation": 2,
                                                                             "Events": _case("scheduled-event")[
                                                                                 "imdsEvents"]}])
    instance = repair_azure.Instance("s", "g", "v", "3")
    client.reimage(instance)
    events = client.scheduled_events()
    token, _, scheduled = seen
    assert token.full_url.startswith("http://169.254.169.254/metadata/identity/oauth2/token?api-version=2018-02-01")
    assert token.get_header("Metadata") == "true" and scheduled.get_header("Metadata") == "true"
    assert scheduled.full_url == "http://169.254.169.254/metadata/scheduledevents?api-version=2020-07-01"
    assert [e["EventType"] for e in events] == ["Reboot", "Freeze"]


def test_the_decision_imports_nothing_but_the_standard_library() -> None:
    """It runs alone: no Kubernetes or Azure client, nothing of aksgpu (its inputs are plain records)."""
    import ast
    import sys as _sys

    tree = ast.parse(Path(repair_decision.__file__).read_text(encoding="utf-8"))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {(node.module or "").split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= set(_sys.stdlib_module_names) | {"__future__"}, imported
