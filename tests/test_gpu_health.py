"""GPU health: the DCGM exporter and its metric list, scraping, the node gate (its DaemonSets,
least-privilege RBAC, and node_gate.py run against a stand-in API server), and the re-checks."""

from __future__ import annotations

import copy
import datetime
import json
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from aksgpu.node import node_api, node_gate, node_watchdog
from aksgpu.components.kubernetes import objects
from aksgpu.components.kubernetes.gpu_gate import CHECK_WRAPPER, GATE_PROGRAM
from aksgpu.components.kubernetes.gpu_gate_jobs import GATE_STARTUP_MARGIN_MINUTES, RECHECK_PRIORITY
from aksgpu.spec import ClusterSpec
from aksgpu.spec.gpu_startup import gate_startup_minutes
from tests.helpers import (
    REPO,
    base_spec,
    edit,
    find_object,
    imported_top_levels,
    kubernetes_manifests,
    plan_spec,
)

H100 = {"name": "h100", "kind": "gpu", "vmSize": "Standard_ND96isr_H100_v5", "zones": ["1"], "minCount": 0,
        "maxCount": 4, "gpu": {"driver": "None"}}


@pytest.fixture(scope="module")
def plan() -> Any:
    """Both driver modes: an A100 pool with AKS's driver, an H100 pool with the GPU Operator."""
    spec = edit(edit(base_spec(), "nodePools.1", H100), "monitoring.managedPrometheus", True)
    return plan_spec(edit(spec, "gpuHealth.metrics.scraper", "managedPrometheus"))


def _pod(obj: dict[str, Any]) -> dict[str, Any]:
    template = obj["spec"]["jobTemplate"]["spec"]["template"] if obj["kind"] == "CronJob" else obj["spec"]["template"]
    return template["spec"]


def _containers(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in [*pod.get("initContainers", []), *pod["containers"]]}


# --- metrics ---------------------------------------------------------------------------------


# The metric list's fields and types against DCGM's own field list, and the alert rules: test_gpu_alerts.py.


def test_both_exporters_read_the_list_and_one_pod_monitor_scrapes_them(plan: Any) -> None:
    exporter = find_object(plan, "DaemonSet", "dcgm-exporter")
    pod = _pod(exporter)
    [container] = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["DCGM_EXPORTER_COLLECTORS"].startswith("/etc/dcgm-exporter/aksgpu/")
    assert env["DCGM_EXPORTER_INTERVAL"] == "30000" and env["DCGM_EXPORTER_KUBERNETES"] == "true"
    config = find_object(plan, "ConfigMap", "aksgpu-dcgm-metrics")
    assert config["data"]["dcgm-metrics.csv"] == (REPO / "aksgpu" / "catalog" / "dcgm_metrics.csv").read_text()
    [release] = [r for r in plan.by_type("kubernetes:helm.sh/v3:Release") if r.inputs["chart"] == "gpu-operator"]
    operator = release.inputs["values"]["dcgmExporter"]
    assert operator["config"]["data"] == config["data"]["dcgm-metrics.csv"] and operator["config"]["create"] is True
    assert operator["serviceMonitor"] == {"enabled": False}, "no Prometheus Operator CRDs needed"
    monitor = find_object(plan, "PodMonitor", "aksgpu-dcgm-exporter")
    assert monitor["apiVersion"] == "azmonitoring.coreos.com/v1"
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == ["aksgpu-system", "gpu-operator"]
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= exporter["spec"]["template"]["metadata"]["labels"].items(), "it selects our exporter"
    assert selector == {"app": "nvidia-dcgm-exporter"}, "the label the operator gives its exporter pods"
    assert [p["name"] for p in container["ports"]] == [monitor["spec"]["podMetricsEndpoints"][0]["port"]]


# --- the gate -------------------------------------------------------------------------------


def test_the_gate_daemonsets_per_driver_mode(plan: Any) -> None:
    # One check DaemonSet per driver mode and GPU count (the a100 pool has 1 GPU, the h100 pool 8).
    aks = _pod(find_object(plan, "DaemonSet", "aksgpu-gpu-gate-aks-driver-1gpu"))
    hold = _pod(find_object(plan, "DaemonSet", "aksgpu-gpu-gate-operator-hold"))
    check = _pod(find_object(plan, "DaemonSet", "aksgpu-gpu-gate-operator-8gpu"))

    def health_expression(pod: dict[str, Any]) -> dict[str, Any]:
        [term] = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        return next(e for e in term["matchExpressions"] if e["key"] == objects.HEALTH_LABEL)

    # "accepting": an InfiniBand node that passed its check waits for the cross-node acceptance, not the gate.
    undecided = {"key": objects.HEALTH_LABEL, "operator": "NotIn",
                 "values": ["passed", "failed", "unchecked", "accepting"]}
    assert health_expression(aks) == health_expression(hold) == undecided
    assert health_expression(check) == {"key": objects.HEALTH_LABEL, "operator": "In", "values": ["pending"]}
    for pod in (aks, hold, check):
        assert {"key": objects.GATE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert [c["name"] for c in aks["initContainers"]] == ["pending",
                                                          "check"] and aks["containers"][0]["name"] == "verdict"
    assert [c["name"] for c in hold["initContainers"]] == ["pending"] and hold["containers"][0]["name"] == "hold"
    assert "--hold-operands" in hold["initContainers"][0]["command"]
    assert [c["name"] for c in check["initContainers"]] == ["wait-for-driver", "check"]
    assert "--release-operands" in check["containers"][0]["command"]
    assert "runtimeClassName" not in aks and "runtimeClassName" not in hold and check["runtimeClassName"] == "nvidia"
    pending = aks["initContainers"][0]["command"]
    assert pending[pending.index("--gate-daemonset") + 1] == "aksgpu-system/aksgpu-gpu-gate-aks-driver-1gpu"
    assert aks["initContainers"][0]["image"].startswith("mcr.microsoft.com/azurelinux/base/python:3.12@sha256:")


def test_a_watchdog_fails_nodes_pending_too_long(plan: Any) -> None:
    job = find_object(plan, "CronJob", "aksgpu-gpu-gate-watchdog")
    pod = _pod(job)
    assert pod["serviceAccountName"] == "aksgpu-gpu-gate-watchdog"
    assert pod["nodeSelector"] == {"kubernetes.azure.com/mode": "system"}
    command = pod["containers"][0]["command"]
    # The way to the check (the startup table; the h100 pool installs its driver through the
    # operator), the gate's 600 s limit and the margin.
    spec = ClusterSpec.model_validate(edit(edit(base_spec(), "nodePools.1", H100), "monitoring.managedPrometheus",
                                           True))
    expected = gate_startup_minutes(spec) + 10 + GATE_STARTUP_MARGIN_MINUTES
    assert command[command.index("--max-pending-minutes") + 1] == str(expected)
    assert expected >= 30, "never tighter than before: failing a slow but healthy node costs a VM"


def test_only_the_gate_steps_hold_the_node_rights(plan: Any) -> None:
    role = find_object(plan, "ClusterRole", "aksgpu-gpu-health")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]
    watchdog = find_object(plan, "ClusterRole", "aksgpu-gpu-gate-watchdog")
    assert watchdog["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]},
                                 {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    own = find_object(plan, "Role", "aksgpu-gpu-health")
    assert own["rules"][-1] == {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get"], "resourceNames": [
        "aksgpu-gpu-gate-aks-driver-1gpu", "aksgpu-gpu-gate-operator-8gpu", "aksgpu-gpu-gate-operator-hold"]}
    binding = find_object(plan, "ClusterRoleBinding", "aksgpu-gpu-health")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "aksgpu-gpu-health",
                                    "namespace": "aksgpu-system"}]
    for obj in kubernetes_manifests(plan):
        if obj["kind"] not in ("DaemonSet", "CronJob") or not obj["metadata"]["name"].startswith("aksgpu-gpu-"):
            continue
        pod = _pod(obj)
        assert pod["automountServiceAccountToken"] is False
        for name, container in _containers(pod).items():
            mounts = {m["name"] for m in container.get("volumeMounts", [])}
            holds_token = "api-token" in mounts
            assert holds_token == (name in ("pending", "verdict", "watchdog")), f"{obj['metadata']['name']}/{name}"
            if holds_token:
                assert container["securityContext"]["runAsNonRoot"] is True
                assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_the_check_runs_the_spec_command_under_the_contract(plan: Any) -> None:
    spec = edit(base_spec(), "gpuHealth.gate", {"image": "example.azurecr.io/gpu-check:1.0",
                                                "command": ["python", "-m", "gpucheck", "--standard"],
                                                "timeoutSeconds": 300})
    check = _containers(_pod(find_object(plan_spec(spec), "DaemonSet", "aksgpu-gpu-gate-aks-driver-1gpu")))["check"]
    assert check["image"] == "example.azurecr.io/gpu-check:1.0"
    assert check["command"] == ["sh", "-c", CHECK_WRAPPER, "aksgpu-check", "python", "-m", "gpucheck", "--standard"]
    env = {e["name"]: e.get("value") for e in check["env"]}
    assert env["AKSGPU_TIMEOUT_SECONDS"] == "300" and env["AKSGPU_REPORT"] == "/var/run/aksgpu/report.json"
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and "resources" in check
    assert "nvidia.com/gpu" not in check["resources"].get("requests", {}), "the gate holds no GPU request"


def test_the_script_configmap_is_the_gates_files_and_needs_only_the_standard_library(plan: Any,
                                                                                     tmp_path: Path) -> None:
    """node_gate.py and the sibling files it imports, each a key of the ConfigMap: they import the
    standard library and each other only, and run as they do in the cluster (one folder, no aksgpu)."""
    data = find_object(plan, "ConfigMap", "aksgpu-node-gate")["data"]
    assert sorted(data) == sorted(f"{Path(module.__file__).name}" for module in GATE_PROGRAM)
    assert data["node_gate.py"] == Path(node_gate.__file__).read_text()
    siblings = {Path(key).stem for key in data}
    for key, source in data.items():
        assert source == (Path(node_gate.__file__).parent / key).read_text()
        imported = imported_top_levels(source)
        # aksgpu: tried first, in the package (tests, the check's image); in the cluster the siblings.
        assert imported - {"__future__", "aksgpu"} - siblings <= set(sys.stdlib_module_names), key
        (tmp_path / key).write_text(source)
    ran = subprocess.run([sys.executable, "-E", "-s", "-S", str(tmp_path / "node_gate.py"), "--help"],
                         capture_output=True, text=True, check=False)
    assert ran.returncode == 0 and "watchdog" in ran.stdout, ran.stderr
    assert (node_api.GATE_TAINT_KEY, node_api.HEALTH_LABEL) == (objects.GATE_TAINT_KEY, objects.HEALTH_LABEL)


def test_rechecks_take_whole_idle_nodes_and_never_scale_or_preempt(plan: Any) -> None:
    priority = find_object(plan, "PriorityClass", "aksgpu-gpu-recheck")
    # cluster-autoscaler: pods below priority -10 are expendable and never trigger a scale-up.
    assert priority["value"] == RECHECK_PRIORITY < -10 and priority["preemptionPolicy"] == "Never"
    job = find_object(plan, "CronJob", "aksgpu-gpu-recheck-8gpu-operator")
    assert job["spec"]["schedule"] == "17 */6 * * *" and job["spec"]["concurrencyPolicy"] == "Forbid"
    assert job["spec"]["jobTemplate"]["spec"]["parallelism"] == 1, "nodesPerPool (1) for its one pool"
    pod = _pod(job)
    assert pod["priorityClassName"] == "aksgpu-gpu-recheck" and pod["runtimeClassName"] == "nvidia"
    check = _containers(pod)["check"]
    assert check["resources"]["requests"]["nvidia.com/gpu"] == "8" == check["resources"]["limits"]["nvidia.com/gpu"]
    assert pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"] \
        == "kubernetes.io/hostname"
    expressions = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"]
    assert {"key": objects.HEALTH_LABEL, "operator": "In", "values": ["passed", "unchecked"]} in expressions
    assert not any(t["key"] == objects.GATE_TAINT_KEY for t in pod["tolerations"])
    a100 = _pod(find_object(plan, "CronJob", "aksgpu-gpu-recheck-1gpu"))
    assert _containers(a100)["check"]["resources"]["requests"]["nvidia.com/gpu"] == "1"
    assert "runtimeClassName" not in a100


def test_pools_of_one_shape_share_a_recheck() -> None:
    spec = edit(edit(base_spec(), "nodePools.1", {"name": "a100b", "kind": "gpu", "vmSize": "Standard_NC24ads_A100_v4",
                                                  "zones": ["1", "2"], "perZone": True, "minCount": 0, "maxCount": 2}),
                "gpuHealth.recheck.nodesPerPool", 3)
    jobs = [m for m in kubernetes_manifests(plan_spec(spec)) if m["kind"] == "CronJob"
            and m["metadata"]["name"].startswith("aksgpu-gpu-recheck")]
    assert [j["metadata"]["name"] for j in jobs] == ["aksgpu-gpu-recheck-1gpu"]
    template = jobs[0]["spec"]["jobTemplate"]["spec"]
    assert template["parallelism"] == template["completions"] == 6, "3 nodes for each of the two pools"
    pools = template["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"][0]["values"]
    assert pools == ["a100", "a100b1", "a100b2"]


# --- node_gate.py against a stand-in API server ---------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as the API server applies application/merge-patch+json."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class FakeApi:
    """One node, its resourceVersion, and a count of forced conflicts."""

    def __init__(self, node: dict[str, Any], conflicts: int = 0) -> None:
        self.node = node
        self.conflicts = conflicts
        self.patches: list[dict[str, Any]] = []


@pytest.fixture
def api_server() -> Iterator[tuple[str, FakeApi]]:
    state = FakeApi({})

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _reply(self, code: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802
            if self.path.startswith("/api/v1/nodes?"):
                # labelSelector key=value, as the watchdog sends it
                selector = self.path.split("labelSelector=", 1)[1]
                key, _, value = urllib.parse.unquote(selector).partition("=")
                labels = state.node["metadata"].get("labels") or {}
                self._reply(200, {"items": [state.node] if labels.get(key) == value else []})
                return
            self._reply(200, state.node)

        def do_PATCH(self) -> None:  # noqa: N802
            assert self.headers["Content-Type"] == "application/merge-patch+json"
            patch = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.patches.append(patch)
            if state.conflicts:
                state.conflicts -= 1
                state.node["metadata"]["resourceVersion"] = str(int(state.node["metadata"]["resourceVersion"]) + 1)
                self._reply(409, {"kind": "Status", "reason": "Conflict"})
                return
            if patch["metadata"]["resourceVersion"] != state.node["metadata"]["resourceVersion"]:
                self._reply(409, {"kind": "Status", "reason": "Conflict"})
                return
            state.node = merge_patch(state.node, patch)
            state.node["metadata"]["resourceVersion"] = str(int(state.node["metadata"]["resourceVersion"]) + 1)
            self._reply(200, state.node)

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", state
    finally:
        server.shutdown()
        server.server_close()


NOW = datetime.datetime(2026, 11, 24, 12, 0, tzinfo=datetime.timezone.utc)
GATE_SINCE = NOW - datetime.timedelta(hours=2)  # when the gate's DaemonSet was created
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def _node(minutes_old: int, labels: dict[str, str] | None = None, taints: list[dict] | None = None) -> dict[str, Any]:
    created = (NOW - datetime.timedelta(minutes=minutes_old)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"metadata": {"name": "aks-h100-1", "resourceVersion": "7", "creationTimestamp": created,
                         "labels": dict(labels or {}), "annotations": {}},
            "spec": {"taints": list(taints or [GPU_TAINT])}}


def _gate_taints(node: dict[str, Any]) -> list[dict]:
    return [t for t in node["spec"].get("taints") or [] if t["key"] == node_api.GATE_TAINT_KEY]


def test_a_new_node_is_tainted_and_labelled_pending(api_server: tuple[str, FakeApi], tmp_path: Path) -> None:
    url, state = api_server
    state.node = _node(minutes_old=2)
    api = node_api.Api(url, None, None)
    assert node_gate.pending(api, "aks-h100-1", str(tmp_path), GATE_SINCE, now=NOW) == "tainted"
    assert state.node["metadata"]["labels"][node_api.HEALTH_LABEL] == "pending"
    assert state.node["metadata"]["annotations"][node_api.PENDING_SINCE_ANNOTATION] == "2026-11-24T12:00:00Z"
    assert not set(node_api.HELD_OPERAND_LABELS) & set(state.node["metadata"]["labels"])
    assert _gate_taints(state.node) == [{"key": node_api.GATE_TAINT_KEY, "value": "pending", "effect": "NoSchedule"}]
    assert GPU_TAINT in state.node["spec"]["taints"], "the pool's own taints stay"
    assert not (tmp_path / node_gate.SKIP_FILE).exists()
    # A restarted gate pod changes nothing on a pending node and checks it again.
    later = NOW + datetime.timedelta(minutes=40)
    assert node_gate.pending(api, "aks-h100-1", str(tmp_path), GATE_SINCE, now=later) == "tainted"
    assert len(_gate_taints(state.node)) == 1
    assert state.node["metadata"]["annotations"][node_api.PENDING_SINCE_ANNOTATION] == "2026-11-24T12:00:00Z"


def test_a_node_of_a_gpu_operator_pool_is_held_from_its_operands(api_server: tuple[str, FakeApi],
                                                                      tmp_path: Path) -> None:
    url, state = api_server
    # The operator may have labelled the node first; the gate's "false" overrides it.
    state.node = _node(minutes_old=1, labels={label: "true" for label in node_api.HELD_OPERAND_LABELS})
    api = node_api.Api(url, None, None)
    assert node_gate.pending(api, "aks-h100-1", str(tmp_path), GATE_SINCE, hold_operands=True, now=NOW) == \
        "tainted"
    assert all(state.node["metadata"]["labels"][label] == "false" for label in node_api.HELD_OPERAND_LABELS)
    (tmp_path / node_gate.EXIT_CODE_FILE).write_text("0")
    assert node_gate.verdict(api, "aks-h100-1", str(tmp_path), release_operands=True, now=NOW) == "passed"
    # "true", as the operator would set it: it relabels only on other events (nodelabeling_controller.go).
    assert all(state.node["metadata"]["labels"][label] == "true" for label in node_api.HELD_OPERAND_LABELS)


def test_a_node_that_predates_the_gate_is_labelled_unchecked_not_tainted(api_server: tuple[str, FakeApi],
                                                                         tmp_path: Path) -> None:
    url, state = api_server
    state.node = _node(minutes_old=240)
    assert node_gate.pending(node_api.Api(url, None, None), "aks-h100-1", str(tmp_path), GATE_SINCE, now=NOW) == \
        "unchecked"
    assert state.node["metadata"]["labels"][node_api.HEALTH_LABEL] == "unchecked"
    assert not _gate_taints(state.node)
    assert (tmp_path / node_gate.SKIP_FILE).exists()
    assert node_gate.verdict(node_api.Api(url, None, None), "aks-h100-1", str(tmp_path), now=NOW) == "skipped"


def test_a_pass_admits_the_node(api_server: tuple[str, FakeApi], tmp_path: Path) -> None:
    url, state = api_server
    state.node = _node(2, {node_api.HEALTH_LABEL: "pending"},
                       [GPU_TAINT, {"key": node_api.GATE_TAINT_KEY, "value": "pending", "effect": "NoSchedule"}])
    (tmp_path / node_gate.EXIT_CODE_FILE).write_text("0\n")
    assert node_gate.verdict(node_api.Api(url, None, None), "aks-h100-1", str(tmp_path), now=NOW) == "passed"
    assert state.node["spec"]["taints"] == [GPU_TAINT]
    assert state.node["metadata"]["labels"][node_api.HEALTH_LABEL] == "passed"
    assert state.node["metadata"]["annotations"][node_api.CHECKED_AT_ANNOTATION] == "2026-11-24T12:00:00Z"
    assert "unschedulable" not in state.node["spec"]


def test_a_failure_cordons_and_names_the_check(api_server: tuple[str, FakeApi], tmp_path: Path) -> None:
    url, state = api_server
    state.node = _node(2, {node_api.HEALTH_LABEL: "pending"},
                       [GPU_TAINT, {"key": node_api.GATE_TAINT_KEY, "value": "pending", "effect": "NoSchedule"}])
    (tmp_path / node_gate.EXIT_CODE_FILE).write_text("1")
    (tmp_path / "report.json").write_text(json.dumps({"failedCheck": "ecc/double bit", "reason": "GPU 3: 2 DBE"}))
    assert node_gate.verdict(node_api.Api(url, None, None), "aks-h100-1", str(tmp_path), now=NOW) == "failed"
    node = state.node
    assert node["spec"]["unschedulable"] is True and node["spec"]["taints"] == [GPU_TAINT]
    assert node["metadata"]["labels"][node_api.HEALTH_LABEL] == "failed"
    assert node["metadata"]["labels"][node_api.FAILED_CHECK_LABEL] == "ecc-double-bit"
    assert node["metadata"]["annotations"][node_api.REASON_ANNOTATION] == "GPU 3: 2 DBE"


@pytest.mark.parametrize(("exit_code", "report", "label"), [
    ("124", None, "timeout"), ("2", None, "checker-error"), (None, None, "checker-error"), ("1", "not json", "check"),
])
def test_failures_without_a_report_are_still_named(api_server: tuple[str, FakeApi], tmp_path: Path,
                                                   exit_code: str | None, report: str | None, label: str) -> None:
    url, state = api_server
    state.node = _node(2, {node_api.HEALTH_LABEL: "pending"})
    if exit_code is not None:
        (tmp_path / node_gate.EXIT_CODE_FILE).write_text(exit_code)
    if report is not None:
        (tmp_path / "report.json").write_text(report)
    assert node_gate.verdict(node_api.Api(url, None, None), "aks-h100-1", str(tmp_path), now=NOW) == "failed"
    assert state.node["metadata"]["labels"][node_api.FAILED_CHECK_LABEL] == label


def test_a_passed_recheck_leaves_taints_alone_and_conflicts_are_retried(api_server: tuple[str, FakeApi],
                                                                        tmp_path: Path) -> None:
    url, state = api_server
    other = {"key": "example.com/maintenance", "value": "soon", "effect": "NoSchedule"}
    state.node = _node(500, {node_api.HEALTH_LABEL: "unchecked"}, [GPU_TAINT, other])
    state.conflicts = 2  # someone else changes the node twice meanwhile
    (tmp_path / node_gate.EXIT_CODE_FILE).write_text("0")
    assert node_gate.verdict(node_api.Api(url, None, None), "aks-h100-1", str(tmp_path), recheck=True,
                             now=NOW) == "passed"
    assert state.node["spec"]["taints"] == [GPU_TAINT, other]
    assert state.node["metadata"]["labels"][node_api.HEALTH_LABEL] == "passed"
    assert len(state.patches) == 3 and "spec" not in state.patches[-1]


def test_the_wrapper_records_the_exit_code_and_honours_skip(tmp_path: Path) -> None:
    env = {"AKSGPU_RESULTS": str(tmp_path), "AKSGPU_TIMEOUT_SECONDS": "5", "PATH": "/usr/bin:/bin"}
    run = subprocess.run(["sh", "-c", CHECK_WRAPPER, "aksgpu-check", "sh", "-c", "exit 3"], env=env,
                         capture_output=True, text=True)
    assert run.returncode == 0, "the init container always succeeds; the verdict step acts on the code"
    assert (tmp_path / node_gate.EXIT_CODE_FILE).read_text().strip() == "3"
    subprocess.run(["sh", "-c", CHECK_WRAPPER, "aksgpu-check", "sleep", "10"],
                   env={**env, "AKSGPU_TIMEOUT_SECONDS": "1"},
                   check=True, capture_output=True)
    assert (tmp_path / node_gate.EXIT_CODE_FILE).read_text().strip() == "124", "timeout's code for a hung check"
    (tmp_path / node_gate.EXIT_CODE_FILE).unlink()
    (tmp_path / node_gate.SKIP_FILE).write_text("unchecked")
    skipped = subprocess.run(["sh", "-c", CHECK_WRAPPER, "aksgpu-check", "sh", "-c", "exit 1"], env=env,
                             capture_output=True, text=True)
    assert skipped.returncode == 0 and not (tmp_path / node_gate.EXIT_CODE_FILE).exists()


def test_wait_for_driver(tmp_path: Path) -> None:
    assert node_gate.wait_for_driver(str(tmp_path), timeout_seconds=0.05, interval=0.01) is False
    (tmp_path / "toolkit-ready").write_text("")
    assert node_gate.wait_for_driver(str(tmp_path), timeout_seconds=0.05, interval=0.01) is True


@pytest.mark.parametrize(("hostengine", "diag", "code"), [(0, 0, "0"), (0, 226, "1"), (1, 0, "2")])
def test_the_default_check_maps_dcgm_onto_the_contract(tmp_path: Path, hostengine: int, diag: int, code: str) -> None:
    """The default command, run by the wrapper with stand-ins for nv-hostengine and dcgmi."""
    from aksgpu.spec.gpu_health import DEFAULT_CHECK_COMMAND

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, status in (("nv-hostengine", hostengine), ("dcgmi", diag)):
        (bin_dir / name).write_text(f"#!/bin/sh\necho '{{\"tool\": \"{name}\"}}'\nexit {status}\n")
        (bin_dir / name).chmod(0o755)
    results = tmp_path / "results"
    results.mkdir()
    env = {"AKSGPU_RESULTS": str(results), "AKSGPU_TIMEOUT_SECONDS": "5", "AKSGPU_REPORT": str(results / "report.json"),
           "PATH": f"{bin_dir}:/usr/bin:/bin"}
    subprocess.run(["sh", "-c", CHECK_WRAPPER, "aksgpu-check", *DEFAULT_CHECK_COMMAND], env=env, check=True,
                   capture_output=True)
    assert (results / node_gate.EXIT_CODE_FILE).read_text().strip() == code
    if code != "2":
        assert json.loads((results / "report.json").read_text()) == {"tool": "dcgmi"}


def test_the_watchdog_fails_nodes_pending_too_long(api_server: tuple[str, FakeApi]) -> None:
    url, state = api_server
    api = node_api.Api(url, None, None)
    gate_taint = {"key": node_api.GATE_TAINT_KEY, "value": "pending", "effect": "NoSchedule"}
    state.node = _node(90, {node_api.HEALTH_LABEL: "pending"}, [GPU_TAINT, gate_taint])
    state.node["metadata"]["annotations"][node_api.PENDING_SINCE_ANNOTATION] = "2026-11-24T11:45:00Z"
    assert node_watchdog.watchdog(api, 30, now=NOW)["failed"] == [], "15 minutes pending is within the limit"
    assert node_watchdog.watchdog(api, 10, now=NOW)["failed"] == ["aks-h100-1"]
    node = state.node
    assert node["spec"]["unschedulable"] is True and node["spec"]["taints"] == [GPU_TAINT]
    assert node["metadata"]["labels"][node_api.FAILED_CHECK_LABEL] == "gate-timeout"
    assert node_api.PENDING_SINCE_ANNOTATION not in node["metadata"]["annotations"]
    assert node_watchdog.watchdog(api, 10, now=NOW)["failed"] == [], "a failed node is no longer pending"


def test_a_repaired_node_handed_back_is_checked_again(api_server: tuple[str, FakeApi], tmp_path: Path) -> None:
    """An operator removes the failed label (kubectl label node X aksgpu.io/gpu-health-) from an old node."""
    url, state = api_server
    state.node = _node(600)
    state.node["metadata"]["annotations"][node_api.CHECKED_AT_ANNOTATION] = "2026-11-20T10:00:00Z"
    assert node_gate.pending(node_api.Api(url, None, None), "aks-h100-1", str(tmp_path), GATE_SINCE, now=NOW) == \
        "tainted"


def test_rechecks_run_without_the_gate_too() -> None:
    plan = plan_spec(edit(base_spec(), "gpuHealth.gate.enabled", False))
    pod = _pod(find_object(plan, "CronJob", "aksgpu-gpu-recheck-1gpu"))
    expressions = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"]
    assert {"key": objects.HEALTH_LABEL, "operator": "NotIn", "values": ["failed"]} in expressions, \
        "no node has a gate label then: every node but a failed one may be re-checked"
