"""A GPU node's life against the behaviour of what drives it (issue 23, items 1 and 3).

node_gate.py runs here against a stand-in API server that holds several nodes, pods, the record
ConfigMap and Events, applies merge patches and resourceVersion conflicts as the API server does,
and admits every node change through aksgpu's own ValidatingAdmissionPolicy (evaluated with
cel-python), so each patch the gate and its watchdog send is one the cluster would accept.

The decisions are checked against the upstream behaviour they exist for:
- the cluster autoscaler's scale-down eligibility (kubernetes/autoscaler
  cluster-autoscaler-1.36.1 core/scaledown/eligibility/eligibility.go): a node is skipped only
  when it is being deleted or annotated cluster-autoscaler.kubernetes.io/scale-down-disabled=true;
  spec.unschedulable is not looked at, so a cordoned failed node alone would be deleted;
- the check's measured memory (gpu_gate.yaml) against the container limits of every GPU shape.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from aksgpu import catalog
from aksgpu.node import node_api, node_gate, node_passive, node_verdicts, node_watchdog
from aksgpu.components.kubernetes.gpu_gate import HOST_LOG_DIR, check_resources
from aksgpu.components.kubernetes.gpu_gate_access import node_change_policy, node_gate_rbac
from aksgpu.components.kubernetes.gpu_gate_jobs import gate_watchdog
from aksgpu.spec import ClusterSpec
from tests.helpers import base_spec, edit, kubernetes_manifests, local_http_server, plan_spec
from tests.oracles.cel import denials
from tests.test_gpu_health import merge_patch

NOW = datetime.datetime(2026, 11, 26, 12, 0, tzinfo=datetime.timezone.utc)
NAMESPACE = "aksgpu-system"
GATE_USER = f"system:serviceaccount:{NAMESPACE}:aksgpu-gpu-health"
WATCHDOG_USER = f"system:serviceaccount:{NAMESPACE}:aksgpu-gpu-gate-watchdog"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
POLICY = node_verdicts.Policy(NAMESPACE, keep_failed=2, keep_failed_hours=24, breaker=True, breaker_share=0.5,
                          breaker_window_minutes=120, breaker_min_nodes=3)


def _gib(quantity: str) -> float:
    assert quantity.endswith("Gi"), quantity
    return float(quantity.removesuffix("Gi"))


# --- 1. the check fits the node ------------------------------------------------------------


def _measured_peak_gib(gpus: int) -> float:
    """The measured figures alone (no assumption): the parent plus one all-reduce worker per GPU."""
    table = catalog.load("gpu_gate")["checkMemory"]
    return table["parentGib"] + gpus * table["workerRssGib"]


@pytest.mark.parametrize("gpus", sorted({size.gpus for size in catalog.vm_sizes().values() if size.gpus}))
def test_the_check_container_holds_the_measured_peak_for_every_gpu_count(gpus: int) -> None:
    resources = check_resources(gpus)
    shm = catalog.load("gpu_gate")["checkMemory"]["sharedMemoryGib"]
    assert _gib(resources["requests"]["memory"]) >= _measured_peak_gib(gpus)
    # /dev/shm is a tmpfs charged to the same memory cgroup, so the limit must hold both.
    assert _gib(resources["limits"]["memory"]) >= _measured_peak_gib(gpus) + shm
    assert _gib(resources["limits"]["memory"]) >= _gib(resources["requests"]["memory"])


def test_the_old_fixed_limit_would_have_killed_the_check_on_an_8_gpu_node() -> None:
    """The bug this sizing fixes: 4Gi for every node, below 8 workers plus the parent."""
    assert _measured_peak_gib(8) > 4
    assert _gib(check_resources(8)["limits"]["memory"]) > _measured_peak_gib(8)


def test_cpu_follows_the_gpus_but_leaves_the_node_half_its_cores() -> None:
    assert check_resources(8, 96)["requests"]["cpu"] == "8"
    assert check_resources(1, 4)["requests"]["cpu"] == "1"
    assert check_resources(4, 6)["requests"]["cpu"] == "3"


H100_8_OPERATOR = {"name": "h100", "kind": "gpu", "vmSize": "Standard_ND96isr_H100_v5", "zones": ["1"],
                   "minCount": 0, "maxCount": 4, "gpu": {"driver": "None"}, "labels": {"aksgpu.io/ib-domain": "h100"}}
H100_8 = {"name": "h100aks", "kind": "gpu", "vmSize": "Standard_ND96isr_H100_v5", "zones": ["1"], "minCount": 0,
          "maxCount": 4}


@pytest.fixture(scope="module")
def manifests() -> list[dict[str, Any]]:
    # base_spec's first pool: Standard_NC24ads_A100_v4 (1 GPU), the driver AKS installs.
    spec = edit(edit(base_spec(), "nodePools.1", H100_8), "nodePools.2", H100_8_OPERATOR)
    spec = edit(spec, "monitoring.managedPrometheus", True)
    return kubernetes_manifests(plan_spec(spec))


def _named(manifests: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [m for m in manifests if m["kind"] == kind and m["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name, sorted(m["metadata"]["name"] for m in manifests if m["kind"] == kind))
    return found[0]


def _pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return obj["spec"]["template"]["spec"]


def _check(obj: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in _pod_spec(obj)["initContainers"] if c["name"] == "check")


def _pools(obj: dict[str, Any]) -> list[str]:
    terms = _pod_spec(obj)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return next(e["values"] for e in terms["nodeSelectorTerms"][0]["matchExpressions"]
                if e["key"] == "kubernetes.azure.com/agentpool")


def test_each_gpu_shape_gets_a_gate_sized_for_its_gpus(manifests: list[dict[str, Any]]) -> None:
    one = _named(manifests, "DaemonSet", "aksgpu-gpu-gate-aks-driver-1gpu")
    eight = _named(manifests, "DaemonSet", "aksgpu-gpu-gate-aks-driver-8gpu")
    operator = _named(manifests, "DaemonSet", "aksgpu-gpu-gate-operator-8gpu")
    assert _pools(one) == ["a100"] and _pools(eight) == ["h100aks"] and _pools(operator) == ["h100"]
    for obj, gpus in ((one, 1), (eight, 8), (operator, 8)):
        resources = _check(obj)["resources"]
        # The H100 pools are InfiniBand pools: their check also requests the RDMA resource (gpu_gate.rdma_request).
        assert {part: {k: v for k, v in values.items() if not k.startswith("rdma/")}
                for part, values in resources.items()} == check_resources(gpus, 24 if gpus == 1 else 96)
        assert ("rdma/shared_ib" in resources["limits"]) == (gpus == 8)
    recheck = _named(manifests, "CronJob", "aksgpu-gpu-recheck-8gpu")
    assert _gib(_check(recheck)["resources"]["limits"]["memory"]) >= _measured_peak_gib(8)
    assert _check(recheck)["resources"]["requests"]["nvidia.com/gpu"] == "8"


def test_the_check_has_a_shared_memory_tmpfs_and_reads_the_host_kernel_log(manifests: list[dict[str, Any]]) -> None:
    for obj in manifests:
        if obj["kind"] not in ("DaemonSet", "CronJob") or not any(
                c["name"] == "check" for c in _pod_spec(obj).get("initContainers", [])):
            continue
        pod, check = _pod_spec(obj), _check(obj)
        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["name"]: m for m in check["volumeMounts"]}
        # NCCL needs more than the runtime's 64 MiB /dev/shm (NCCL User Guide, Troubleshooting, Docker).
        assert volumes["shm"]["emptyDir"]["medium"] == "Memory" and mounts["shm"]["mountPath"] == "/dev/shm"
        # The kernel log the way an unprivileged container can read it: the host's /var/log, read-only.
        assert volumes["host-log"]["hostPath"]["path"] == "/var/log"
        assert mounts["host-log"] == {"name": "host-log", "mountPath": HOST_LOG_DIR, "readOnly": True}
        assert {"name": "AKSGPU_HOST_LOG_DIR", "value": HOST_LOG_DIR} in check["env"]
        assert not check["securityContext"].get("privileged"), "no privileged container reads the log"
        # Ubuntu's kern.log is syslog:adm 0640 and the check has no CAP_DAC_OVERRIDE: it reads as group adm.
        assert "DAC_OVERRIDE" not in check["securityContext"]["capabilities"]["add"]
        assert pod["securityContext"]["supplementalGroups"] == [4]
        reason = obj["metadata"]["annotations"]["policy.aksgpu.io/k8s-host-path"]
        assert "/var/log, read-only" in reason
        if pod.get("runtimeClassName") and obj["kind"] == "DaemonSet":
            assert "/run/nvidia/validations" in reason, "one annotation per rule carries both host paths"


def test_gate_pods_tolerate_the_held_taint_so_a_fixed_gate_can_check_held_nodes(
        manifests: list[dict[str, Any]]) -> None:
    for name in ("aksgpu-gpu-gate-aks-driver-8gpu", "aksgpu-gpu-gate-operator-8gpu", "aksgpu-gpu-gate-operator-hold"):
        tolerations = _pod_spec(_named(manifests, "DaemonSet", name))["tolerations"]
        assert {"key": node_api.GATE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"} in tolerations


def test_the_watchdog_runs_with_the_gate_off_and_releases_its_nodes() -> None:
    spec = ClusterSpec.model_validate(edit(edit(base_spec(), "nodePools.1", H100_8_OPERATOR),
                                           "gpuHealth.gate.enabled", False))
    args = gate_watchdog(spec, NAMESPACE)["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "--gate-off" in args and args[args.index("--operator-pools") + 1] == "h100"


# --- 3. a stand-in cluster -------------------------------------------------------------------


def _selected(labels: dict[str, str], selector: str) -> bool:
    for term in filter(None, (t.strip() for t in _split_selector(selector))):
        if " in (" in term:
            key, _, values = term.partition(" in (")
            if labels.get(key.strip()) not in values.rstrip(")").split(","):
                return False
        else:
            key, _, value = term.partition("=")
            if labels.get(key) != value:
                return False
    return True


def _split_selector(selector: str) -> list[str]:
    terms, depth, current = [], 0, ""
    for char in selector:
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    return [*terms, current]


def _field(obj: dict[str, Any], path: str) -> Any:
    for part in path.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


class Cluster:
    """Nodes, pods, one record ConfigMap and the Events written, as an API server holds them."""

    def __init__(self) -> None:
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: list[dict[str, Any]] = []
        self.configmap: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": node_verdicts.RECORD_CONFIGMAP, "namespace": NAMESPACE, "resourceVersion": "1",
            "labels": {"app.kubernetes.io/part-of": "aksgpu"}}}
        self.events: list[dict[str, Any]] = []
        self.denied: list[list[str]] = []
        self.lock = threading.Lock()
        self.policy = node_change_policy(NAMESPACE)[0]

    def add_node(self, name: str, pool: str, labels: dict[str, str] | None = None,
                 annotations: dict[str, str] | None = None, taints: list[dict[str, str]] | None = None,
                 unschedulable: bool = False, conditions: list[dict[str, str]] | None = None,
                 node_image: str = "AKSUbuntu-2204gen2containerd-202611.10.0",
                 kernel: str = "5.15.0-1079-azure") -> None:
        self.nodes[name] = {
            "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1",
                         "creationTimestamp": "2026-11-26T10:00:00Z",
                         "labels": {"kubernetes.azure.com/agentpool": pool,
                                    "node.kubernetes.io/instance-type": "Standard_ND96isr_H100_v5",
                                    node_api.NODE_IMAGE_LABEL: node_image, **(labels or {})},
                         "annotations": dict(annotations or {})},
            "spec": {"taints": list(taints or [GPU_TAINT]), **({"unschedulable": True} if unschedulable else {})},
            "status": {"nodeInfo": {"kernelVersion": kernel}, "conditions": list(conditions or [])},
        }

    def record(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in (self.configmap.get("data") or {}).get("verdicts", "").splitlines()]


class ApiHandler(BaseHTTPRequestHandler):
    """The stand-in API server's routes over a Cluster (`state`): nodes (merge patches checked against
    the gate's admission policy with cel-python), pods with label and field selectors, the record
    ConfigMap (get and put with resource versions) and Events. Subclasses add routes through
    `get_more` and override `user`."""

    state: Cluster

    def log_message(self, *args: Any) -> None:
        pass

    def _reply(self, code: int, body: Any) -> None:
        payload = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _body(self) -> Any:
        return json.loads(self.rfile.read(int(self.headers["Content-Length"])))

    def user(self) -> str:
        token = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
        return WATCHDOG_USER if token == "watchdog" else GATE_USER

    def get_more(self, path: str, query: dict[str, str]) -> None:
        """A GET no route above matched (under the state's lock)."""
        self._reply(404, {"kind": "Status", "reason": "NotFound"})

    def do_GET(self) -> None:  # noqa: N802
        state = self.state
        url = urllib.parse.urlparse(self.path)
        query = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
        with state.lock:
            if url.path == "/api/v1/nodes":
                items = [n for n in state.nodes.values()
                         if _selected(n["metadata"].get("labels") or {}, query.get("labelSelector", ""))]
                self._reply(200, {"items": copy.deepcopy(items)})
            elif url.path.startswith("/api/v1/nodes/"):
                name = url.path.rsplit("/", 1)[1]
                if name not in state.nodes:
                    self._reply(404, {"kind": "Status", "reason": "NotFound"})
                else:
                    self._reply(200, copy.deepcopy(state.nodes[name]))
            elif url.path.endswith("/pods"):
                namespace = url.path.split("/")[4] if "/namespaces/" in url.path else None
                fields = [f.partition("=") for f in query.get("fieldSelector", "").split(",") if f]
                items = [p for p in state.pods
                         if (namespace is None or p["metadata"]["namespace"] == namespace)
                         and _selected(p["metadata"].get("labels") or {}, query.get("labelSelector", ""))
                         and all(str(_field(p, key.rstrip("!"))) != value if key.endswith("!")
                                 else str(_field(p, key)) == value for key, _, value in fields)]
                self._reply(200, {"items": copy.deepcopy(items)})
            elif url.path.endswith(f"/configmaps/{node_verdicts.RECORD_CONFIGMAP}"):
                self._reply(200, copy.deepcopy(state.configmap))
            else:
                self.get_more(url.path, query)

    def do_PATCH(self) -> None:  # noqa: N802
        state = self.state
        assert self.headers["Content-Type"] == "application/merge-patch+json"
        name = self.path.rsplit("/", 1)[1]
        patch = self._body()
        with state.lock:
            node = state.nodes[name]
            if patch["metadata"]["resourceVersion"] != node["metadata"]["resourceVersion"]:
                self._reply(409, {"kind": "Status", "reason": "Conflict"})
                return
            changed = merge_patch(node, patch)
            request = {"userInfo": {"username": self.user()}}
            denied = denials(state.policy, obj=changed, old=node, request=request)
            if denied:
                state.denied.append(denied)
                self._reply(422, {"kind": "Status", "reason": "Invalid", "message": "; ".join(denied)})
                return
            changed["metadata"]["resourceVersion"] = str(int(node["metadata"]["resourceVersion"]) + 1)
            state.nodes[name] = changed
            self._reply(200, changed)

    def do_PUT(self) -> None:  # noqa: N802
        state = self.state
        body = self._body()
        with state.lock:
            if body["metadata"].get("resourceVersion") != state.configmap["metadata"]["resourceVersion"]:
                self._reply(409, {"kind": "Status", "reason": "Conflict"})
                return
            body["metadata"]["resourceVersion"] = str(int(body["metadata"]["resourceVersion"]) + 1)
            state.configmap = body
            self._reply(200, body)

    def post_event(self, event: dict[str, Any]) -> None:
        namespace = self.path.split("/")[4]
        # pkg/apis/core/validation/events.go legacyValidateEvent: an Event (no eventTime) about a
        # cluster-scoped object is accepted only in "default" (or no namespace).
        if not event["involvedObject"].get("namespace") and namespace not in ("", "default"):
            self._reply(422, {"kind": "Status", "reason": "Invalid",
                              "message": "involvedObject.namespace: does not match event.namespace"})
            return
        with self.state.lock:
            self.state.events.append(event)
        self._reply(201, {})

    def do_POST(self) -> None:  # noqa: N802
        self.post_event(self._body())


@contextlib.contextmanager
def serving(state: Cluster, handler: type[ApiHandler]) -> Iterator[str]:
    """Serve `state` with `handler` on a free local port; yields the server's URL."""
    with local_http_server(type("BoundHandler", (handler,), {"state": state})) as url:
        yield url


@pytest.fixture
def cluster() -> Iterator[tuple[Cluster, str]]:
    state = Cluster()
    with serving(state, ApiHandler) as url:
        yield state, url


def _api(url: str, who: str = "gate") -> node_api.Api:
    return node_api.Api(url, who, None)


def autoscaler_may_scale_down(node: dict[str, Any]) -> bool:
    """cluster-autoscaler-1.36.1 core/scaledown/eligibility/eligibility.go, as far as a node's own
    fields go: not when it is being deleted (ToBeDeleted taint), not when annotated
    scale-down-disabled "true"; unschedulable (cordoned) is not a reason to skip it."""
    annotations = node["metadata"].get("annotations") or {}
    if any(t["key"] == "ToBeDeletedByClusterAutoscaler" for t in node["spec"].get("taints") or []):
        return False
    return annotations.get(node_api.SCALE_DOWN_DISABLED_ANNOTATION) != "true"


def _results(tmp_path: Path, code: int, failed_check: str | None = None, reason: str = "") -> str:
    (tmp_path / "exit-code").write_text(f"{code}\n")
    if failed_check:
        (tmp_path / "report.json").write_text(json.dumps({"failedCheck": failed_check, "reason": reason}))
    return str(tmp_path)


def _pending_node(state: Cluster, name: str, pool: str = "h100") -> None:
    state.add_node(name, pool, {node_api.HEALTH_LABEL: "pending"},
                   {node_api.PENDING_SINCE_ANNOTATION: "2026-11-26T11:50:00Z"},
                   [GPU_TAINT, {"key": node_api.GATE_TAINT_KEY, "value": "pending", "effect": "NoSchedule"}])


def test_a_failed_node_is_kept_explained_and_recorded(cluster: tuple[Cluster, str], tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    state, url = cluster
    _pending_node(state, "aks-h100-1")
    assert autoscaler_may_scale_down(state.nodes["aks-h100-1"]), "a node under check is fair game, as upstream"
    outcome = node_gate.verdict(_api(url), "aks-h100-1", _results(tmp_path, 1, "ecc", "GPU 3: 2 DBE errors"),
                                now=NOW, policy=POLICY)
    node = state.nodes["aks-h100-1"]
    assert outcome == "failed" and node["spec"]["unschedulable"] is True
    assert not autoscaler_may_scale_down(node), "kept for diagnosis: the autoscaler must not delete it"
    event = state.events[-1]
    # kubectl describe node looks Events up by kind, name and uid = the node's name (describe.go).
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "aks-h100-1", "uid": "aks-h100-1"}
    assert event["type"] == "Warning" and event["reason"] == "GpuCheckFailed"
    assert "GPU 3: 2 DBE errors" in event["message"]
    [entry] = state.record()
    assert entry | {"time": None} == {"time": None, "node": "aks-h100-1", "pool": "h100", "source": "gate",
                                      "vmSize": "Standard_ND96isr_H100_v5", "verdict": "failed", "check": "ecc",
                                      "reason": "GPU 3: 2 DBE errors", "secondsToVerdict": 7200,
                                      "fingerprint": {"kernel": "5.15.0-1079-azure",
                                                      "nodeImage": "AKSUbuntu-2204gen2containerd-202611.10.0"}}
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(node_verdicts.LOG_PREFIX))
    assert json.loads(line.removeprefix(node_verdicts.LOG_PREFIX)) == entry, "the log line outlives the node"
    assert state.denied == []


def test_without_a_bound_a_failed_node_goes_to_the_autoscaler(cluster: tuple[Cluster, str], tmp_path: Path) -> None:
    state, url = cluster
    _pending_node(state, "aks-h100-1")
    node_gate.verdict(_api(url), "aks-h100-1", _results(tmp_path, 1), now=NOW,
                      policy=node_verdicts.Policy(NAMESPACE, keep_failed=0))
    assert autoscaler_may_scale_down(state.nodes["aks-h100-1"])


def test_the_watchdog_keeps_the_newest_failed_nodes_and_hands_the_rest_over(cluster: tuple[Cluster, str]) -> None:
    state, url = cluster
    for index, hours_ago in enumerate((1, 2, 3, 30)):
        checked = (NOW - datetime.timedelta(hours=hours_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
        state.add_node(f"aks-h100-{index}", "h100", {node_api.HEALTH_LABEL: "failed"},
                       {node_api.CHECKED_AT_ANNOTATION: checked, node_api.SCALE_DOWN_DISABLED_ANNOTATION: "true",
                        node_api.KEPT_ANNOTATION: "true"},
                       unschedulable=True)
    state.add_node("aks-a100-0", "a100", {node_api.HEALTH_LABEL: "failed"},
                   {node_api.CHECKED_AT_ANNOTATION: "2026-11-26T11:00:00Z",
                    node_api.SCALE_DOWN_DISABLED_ANNOTATION: "true",
                        node_api.KEPT_ANNOTATION: "true"}, unschedulable=True)
    done = node_watchdog.watchdog(_api(url, "watchdog"), 30, now=NOW, policy=POLICY, pools=["h100", "a100"])
    assert sorted(done["released"]) == ["aks-h100-2", "aks-h100-3"]
    kept = sorted(name for name, node in state.nodes.items() if not autoscaler_may_scale_down(node))
    assert kept == ["aks-a100-0", "aks-h100-0", "aks-h100-1"], "the bound is per pool, the newest kept"
    assert all(node["spec"].get("unschedulable") for node in state.nodes.values()), "released nodes stay cordoned"
    assert [e["verdict"] for e in state.record()] == ["released", "released"]
    assert {e["reason"] for e in state.events} == {"GpuNodeReleased"}
    assert state.denied == []


def test_the_breaker_holds_instead_of_failing_when_a_pool_fails_together(cluster: tuple[Cluster, str],
                                                                         tmp_path: Path) -> None:
    state, url = cluster
    for index in range(3):
        _pending_node(state, f"aks-h100-{index}")
    outcomes = []
    for index in range(3):
        folder = tmp_path / str(index)
        folder.mkdir()
        outcomes.append(node_gate.verdict(_api(url), f"aks-h100-{index}",
                                          _results(folder, 2, "checker-error", "image pull failed"),
                                          now=NOW + datetime.timedelta(minutes=index), policy=POLICY))
    assert outcomes == ["failed", "failed", "held"], "3 of 3 within the window: systemic, not the GPUs"
    held = state.nodes["aks-h100-2"]
    assert held["metadata"]["labels"][node_api.HEALTH_LABEL] == "held"
    assert {"key": node_api.GATE_TAINT_KEY, "value": "held", "effect": "NoSchedule"} in held["spec"]["taints"]
    assert not held["spec"].get("unschedulable"), "not failed"
    assert not autoscaler_may_scale_down(held), "a replacement would fail the same way"
    assert state.events[-1]["reason"] == "GpuGateBreakerOpen"
    assert "3 of the last 3" in held["metadata"]["annotations"][node_api.REASON_ANNOTATION]
    # The fix rolls the gate's DaemonSet; the new gate pod finds the node held and checks it again.
    assert node_gate.pending(_api(url), "aks-h100-2", str(tmp_path / "2"), None, now=NOW) == "tainted"
    again = state.nodes["aks-h100-2"]
    assert again["metadata"]["labels"][node_api.HEALTH_LABEL] == "pending"
    assert {"key": node_api.GATE_TAINT_KEY, "value": "pending", "effect": "NoSchedule"} in again["spec"]["taints"]
    assert autoscaler_may_scale_down(again)
    assert state.denied == []


def test_one_bad_gpu_does_not_open_the_breaker(cluster: tuple[Cluster, str], tmp_path: Path) -> None:
    state, url = cluster
    for index in range(4):
        _pending_node(state, f"aks-h100-{index}")
    for index, code in enumerate((0, 0, 0, 1)):
        folder = tmp_path / str(index)
        folder.mkdir()
        node_gate.verdict(_api(url), f"aks-h100-{index}", _results(folder, code), now=NOW, policy=POLICY)
    assert state.nodes["aks-h100-3"]["metadata"]["labels"][node_api.HEALTH_LABEL] == "failed"


def test_verdicts_at_once_all_reach_the_record(cluster: tuple[Cluster, str], tmp_path: Path) -> None:
    state, url = cluster
    for index in range(6):
        _pending_node(state, f"aks-h100-{index}")
        (tmp_path / str(index)).mkdir()
        _results(tmp_path / str(index), 0)
    threads = [threading.Thread(target=node_gate.verdict, args=(_api(url), f"aks-h100-{index}",
                                                                 str(tmp_path / str(index))),
                                kwargs={"now": NOW, "policy": POLICY}) for index in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(e["node"] for e in state.record()) == [f"aks-h100-{index}" for index in range(6)]


def test_turning_the_gate_off_strands_no_node(cluster: tuple[Cluster, str]) -> None:
    state, url = cluster
    _pending_node(state, "aks-h100-0")
    state.nodes["aks-h100-0"]["metadata"]["labels"].update({label: "false" for label in node_api.HELD_OPERAND_LABELS})
    state.add_node("aks-h100-1", "h100", {node_api.HEALTH_LABEL: "held"},
                   {node_api.SCALE_DOWN_DISABLED_ANNOTATION: "true",
                        node_api.KEPT_ANNOTATION: "true"},
                   [GPU_TAINT, {"key": node_api.GATE_TAINT_KEY, "value": "held", "effect": "NoSchedule"}])
    # Marked and kept by the watchdog while no gate pod had reached it (watch_unstarted).
    state.add_node("aks-h100-2", "h100", annotations={node_api.UNSTARTED_SINCE_ANNOTATION: "2026-11-26T11:50:00Z",
                                                      node_api.SCALE_DOWN_DISABLED_ANNOTATION: "true",
                                                      node_api.KEPT_ANNOTATION: "true"})
    done = node_watchdog.watchdog(_api(url, "watchdog"), 30, now=NOW, policy=POLICY, pools=["h100"],
                              gate_enabled=False, operator_pools=["h100"])
    assert sorted(done["untainted"]) == ["aks-h100-0", "aks-h100-1", "aks-h100-2"]
    assert node_api.UNSTARTED_SINCE_ANNOTATION not in state.nodes["aks-h100-2"]["metadata"]["annotations"]
    for node in state.nodes.values():
        assert node["spec"]["taints"] == [GPU_TAINT]
        assert node["metadata"]["labels"][node_api.HEALTH_LABEL] == "unchecked"
        assert autoscaler_may_scale_down(node)
    assert all(state.nodes["aks-h100-0"]["metadata"]["labels"][label] == "true"
               for label in node_api.HELD_OPERAND_LABELS), "the GPU Operator's operands come back"
    assert node_watchdog.watchdog(_api(url, "watchdog"), 30, now=NOW, policy=POLICY, pools=["h100"],
                              gate_enabled=False, operator_pools=["h100"])["untainted"] == [], "done once"
    assert state.denied == []


XID_79 = 'DCGM_EXP_XID_ERRORS_COUNT{gpu="5",UUID="GPU-x",xid="79",Hostname="aks-h100-0"} 1\n'
XID_13 = 'DCGM_EXP_XID_ERRORS_COUNT{gpu="1",UUID="GPU-y",xid="13",Hostname="aks-h100-1"} 1\n'
CLEAN = '# HELP DCGM_FI_DEV_ECC_DBE_VOL_TOTAL x\nDCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu="0"} 0\n'
CONDITIONS = [node_passive.CordonCondition("DCGM_EXP_XID_ERRORS_COUNT", 0, "xid", ("48", "79", "95")),
              node_passive.CordonCondition("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 0)]


def _exporter(state: Cluster, node: str, ip: str) -> None:
    state.pods.append({"metadata": {"name": f"exporter-{node}", "namespace": NAMESPACE,
                                    "labels": {"app": "nvidia-dcgm-exporter"}},
                       "spec": {"nodeName": node}, "status": {"phase": "Running", "podIP": ip}})


def test_critical_passive_signals_cordon_through_the_same_step(cluster: tuple[Cluster, str]) -> None:
    state, url = cluster
    for index in range(5):
        state.add_node(f"aks-h100-{index}", "h100", {node_api.HEALTH_LABEL: "passed"})
        _exporter(state, f"aks-h100-{index}", f"10.0.0.{index}")
    state.nodes["aks-h100-2"]["status"]["conditions"].append(
        {"type": "GPUMissing", "status": "True", "reason": "GPUMissing", "message": "7 of 8 GPUs"})
    state.nodes["aks-h100-3"]["status"]["conditions"].append({"type": "GPUClockThrottling", "status": "True"})
    scrapes = {"10.0.0.0": XID_79, "10.0.0.1": XID_13}
    done = node_watchdog.watchdog(_api(url, "watchdog"), 30, now=NOW, policy=POLICY, pools=["h100"], cordon=CONDITIONS,
                              npd_cordon={"GPUMissing", "XIDErrors"}, exporter_namespaces=[NAMESPACE],
                              fetch=lambda address: scrapes.get(address.split("//")[1].split(":")[0], CLEAN))
    assert sorted(done["cordoned"]) == ["aks-h100-0", "aks-h100-2"], "Xid 13 is the application's, throttling informs"
    xid = state.nodes["aks-h100-0"]
    assert xid["spec"]["unschedulable"] and xid["metadata"]["labels"][node_api.HEALTH_LABEL] == "failed"
    assert "xid=79" in xid["metadata"]["annotations"][node_api.REASON_ANNOTATION]
    assert not autoscaler_may_scale_down(xid)
    assert {e["source"] for e in state.record()} == {"passive"}
    assert state.denied == []


def test_a_metric_gone_wrong_does_not_empty_a_pool(cluster: tuple[Cluster, str]) -> None:
    state, url = cluster
    for index in range(4):
        state.add_node(f"aks-h100-{index}", "h100", {node_api.HEALTH_LABEL: "passed"})
        _exporter(state, f"aks-h100-{index}", f"10.0.0.{index}")
    done = node_watchdog.watchdog(_api(url, "watchdog"), 30, now=NOW, policy=POLICY, pools=["h100"], cordon=CONDITIONS,
                              exporter_namespaces=[NAMESPACE],
                              fetch=lambda address: 'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu="0"} 3\n')
    assert done["cordoned"] == [] and len(done["spared"]) == 4
    assert not any(node["spec"].get("unschedulable") for node in state.nodes.values())
    assert {e["reason"] for e in state.events} == {"GpuPassiveBreakerOpen"}


def test_a_node_whose_image_changed_is_gated_again_once_its_gpus_are_free(cluster: tuple[Cluster, str]) -> None:
    state, url = cluster
    recorded = json.dumps({"nodeImage": "AKSUbuntu-2204gen2containerd-202610.01.0", "kernel": "5.15.0-1079-azure"})
    for index in range(3):
        state.add_node(f"aks-h100-{index}", "h100", {node_api.HEALTH_LABEL: "passed"},
                       {node_api.FINGERPRINT_ANNOTATION: recorded})
    # aks-h100-2 kept its image; GPU Feature Discovery labelled its driver after the verdict.
    state.nodes["aks-h100-2"]["metadata"]["labels"].update({
        node_api.NODE_IMAGE_LABEL: "AKSUbuntu-2204gen2containerd-202610.01.0",
        "nvidia.com/cuda.driver-version.full": "580.95.05"})
    state.pods.append({"metadata": {"name": "train-0", "namespace": "research", "labels": {}},
                       "spec": {"nodeName": "aks-h100-1", "containers": [
                           {"name": "main", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
                       "status": {"phase": "Running"}})
    done = node_watchdog.watchdog(_api(url, "watchdog"), 30, now=NOW, policy=POLICY, pools=["h100"],
                              operator_pools=["h100"])
    assert done["regated"] == ["aks-h100-0"], "aks-h100-1's GPUs are in use; aks-h100-2 did not change"
    node = state.nodes["aks-h100-0"]
    assert node["metadata"]["labels"][node_api.HEALTH_LABEL] == "pending"
    assert all(node["metadata"]["labels"][label] == "false" for label in node_api.HELD_OPERAND_LABELS)
    assert {"key": node_api.GATE_TAINT_KEY, "value": "pending", "effect": "NoSchedule"} in node["spec"]["taints"]
    assert "202610.01.0 -> AKSUbuntu-2204gen2containerd-202611.10.0" in state.events[-1]["message"]
    later = json.loads(state.nodes["aks-h100-2"]["metadata"]["annotations"][node_api.FINGERPRINT_ANNOTATION])
    assert later["driver"] == "580.95.05", "a part first known now is recorded, not a change"
    assert state.denied == []


def test_a_pass_records_what_the_gpus_ran_on(cluster: tuple[Cluster, str], tmp_path: Path) -> None:
    state, url = cluster
    _pending_node(state, "aks-h100-0")
    node_gate.verdict(_api(url), "aks-h100-0", _results(tmp_path, 0), now=NOW, policy=POLICY)
    node = state.nodes["aks-h100-0"]
    assert json.loads(node["metadata"]["annotations"][node_api.FINGERPRINT_ANNOTATION]) == {
        "kernel": "5.15.0-1079-azure", "nodeImage": "AKSUbuntu-2204gen2containerd-202611.10.0"}
    assert state.events[-1]["reason"] == "GpuCheckPassed" and state.events[-1]["type"] == "Normal"


def test_rbac_allows_exactly_what_the_steps_call() -> None:
    objects = {(o["kind"], o["metadata"]["name"]): o for o in node_gate_rbac(NAMESPACE, ["aksgpu-gpu-gate-x"])}
    watchdog_cluster = objects[("ClusterRole", "aksgpu-gpu-gate-watchdog")]["rules"]
    assert {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]} in watchdog_cluster
    gate_cluster = objects[("ClusterRole", "aksgpu-gpu-health")]["rules"]
    assert gate_cluster == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]
    for account in ("aksgpu-gpu-health", "aksgpu-gpu-gate-watchdog"):
        rules = objects[("Role", account)]["rules"]
        assert {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "update"],
                "resourceNames": [node_verdicts.RECORD_CONFIGMAP]} in rules
        events = objects[("Role", f"{account}-events")]
        assert events["metadata"]["namespace"] == node_verdicts.NODE_EVENT_NAMESPACE == "default"
        assert events["rules"] == [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]
        binding = objects[("RoleBinding", f"{account}-events")]
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]


def test_the_breaker_alert_fires_on_the_taint_the_hold_writes(cluster: tuple[Cluster, str], tmp_path: Path) -> None:
    """GpuGateBreakerOpen reads kube-state-metrics' kube_node_spec_taint (node, key, value, effect)
    of the node exactly as hold_node leaves it, and not of a node under an ordinary check."""
    from aksgpu.components.kubernetes.gpu_metrics import alert_rules
    from tests.test_gpu_alerts import NOW as AT
    from tests.test_gpu_alerts import firing

    state, url = cluster
    _pending_node(state, "aks-h100-0")
    _pending_node(state, "aks-h100-1")
    node_verdicts.hold_node(_api(url), "aks-h100-0", "checker-error", "breaker", {})
    [rule] = [r for r in alert_rules() if r["alert"] == "GpuGateBreakerOpen"]
    series = [({"__name__": "kube_node_spec_taint", "node": name, **taint}, [(AT, 1.0)])
              for name, node in state.nodes.items() for taint in node["spec"]["taints"]]
    assert firing(rule["expression"], series) == [{"node": "aks-h100-0"}]


def test_operands_a_pool_label_update_turned_off_come_back(cluster: tuple[Cluster, str]) -> None:
    """AKS writes an updated pool's labels onto all its nodes (use-labels.md): the gate's "false"
    lands on nodes that passed long ago; the watchdog switches them on, but not mid-upgrade."""
    state, url = cluster
    off = {label: "false" for label in node_api.HELD_OPERAND_LABELS}
    state.add_node("aks-h100-0", "h100", {node_api.HEALTH_LABEL: "passed", **off})
    state.add_node("aks-h100-1", "h100", {node_api.HEALTH_LABEL: "pending", **off})
    state.add_node("aks-h100-2", "h100", {node_api.HEALTH_LABEL: "passed", **{
        label: "paused-for-driver-upgrade" for label in node_api.HELD_OPERAND_LABELS}})
    state.add_node("aks-a100-0", "a100", {node_api.HEALTH_LABEL: "passed", **off})
    done = node_watchdog.watchdog(_api(url, "watchdog"), 30, now=NOW, policy=POLICY, pools=["h100", "a100"],
                              operator_pools=["h100"])
    assert done["operands"] == ["aks-h100-0"]
    assert all(state.nodes["aks-h100-0"]["metadata"]["labels"][label] == "true"
               for label in node_api.HELD_OPERAND_LABELS)
    assert state.nodes["aks-h100-1"]["metadata"]["labels"][node_api.HELD_OPERAND_LABELS[0]] == "false"
    assert state.nodes["aks-h100-2"]["metadata"]["labels"][node_api.HELD_OPERAND_LABELS[0]] == \
        "paused-for-driver-upgrade"
    assert state.denied == []


def test_the_gates_check_sees_every_gpu_where_unprivileged_containers_see_none(
        manifests: list[dict[str, Any]]) -> None:
    """The GPU Operator's toolkit runs with ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED=false
    (gpu_software.py): the gate's check, which holds no nvidia.com/gpu request and relies on
    NVIDIA_VISIBLE_DEVICES=all, must still count as privileged to the NVIDIA runtime (CAP_SYS_ADMIN in
    its bounding set, nvidia-container-toolkit internal/config/image/privileged.go@v1.20.0)."""
    from aksgpu.spec import ClusterSpec as Spec
    from aksgpu.components.kubernetes.gpu_software import gpu_operator_values
    from tests.oracles.gpu_visibility import Node, visible_gpus

    spec = Spec.model_validate(edit(base_spec(), "nodePools.0", H100_8_OPERATOR))
    toolkit_env = {e["name"]: e["value"] for e in gpu_operator_values(spec)["toolkit"]["env"]}
    node = Node("operator", accept_envvar_unprivileged=toolkit_env[
        "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED"] != "false")
    assert node.accept_envvar_unprivileged is False
    gate = _named(manifests, "DaemonSet", "aksgpu-gpu-gate-operator-8gpu")["spec"]["template"]
    outcome = visible_gpus({"metadata": gate["metadata"], "spec": gate["spec"]}, "check", node)
    assert outcome.visible == set(node.gpus) and not outcome.failed
    unprivileged = copy.deepcopy(gate)
    _check({"kind": "DaemonSet", "spec": {"template": unprivileged}})["securityContext"]["capabilities"]["add"] = []
    assert visible_gpus({"metadata": {}, "spec": unprivileged["spec"]}, "check", node).visible == set(), \
        "without SYS_ADMIN the same container would check no GPU at all"


def test_the_readme_shows_what_the_gate_computes(example_plans: dict[str, Any]) -> None:
    """The docs' figures of the check's size and of the watchdog's limit are the code's."""
    from tests.docs_pages import docs_page

    readme = docs_page("guides/gpus/node-life.md")
    for gpus in (1, 2, 4, 8):
        resources = check_resources(gpus)
        assert (f"| {gpus} | {resources['requests']['memory']} | {resources['limits']['memory']} | "
                f"{resources['requests']['cpu']} |") in readme, gpus
    [watchdog] = [r for r in example_plans["prod"].by_type("kubernetes:batch/v1:CronJob")
                  if r.inputs["metadata"]["name"] == "aksgpu-gpu-gate-watchdog"]
    command = _pod_spec({"kind": "CronJob", "spec": watchdog.inputs["spec"]})["containers"][0]["command"]
    minutes = command[command.index("--max-pending-minutes") + 1]
    assert f"{minutes} minutes for the prod\nexample" in readme


def test_without_container_insights_the_verdicts_do_not_outlive_the_node() -> None:
    from aksgpu.spec import parse_cluster_spec

    _, warnings = parse_cluster_spec(edit(base_spec(), "monitoring.containerInsights", False))
    [warning] = [w for w in warnings if w.path == "monitoring.containerInsights"]
    assert "aksgpu-gpu-health-record" in warning.rule and "containerInsights: true" in warning.fix
    _, warnings = parse_cluster_spec(base_spec())
    assert not [w for w in warnings if w.path == "monitoring.containerInsights"]


def test_one_nodes_error_does_not_stop_the_watchdogs_pass(cluster: tuple[Cluster, str]) -> None:
    """A node deleted between the list and its patch (404 from the API server) is skipped; the
    pass goes on with the others."""
    state, url = cluster
    for index in range(3):
        checked = (NOW - datetime.timedelta(hours=30 + index)).strftime("%Y-%m-%dT%H:%M:%SZ")
        state.add_node(f"aks-h100-{index}", "h100", {node_api.HEALTH_LABEL: "failed"},
                       {node_api.CHECKED_AT_ANNOTATION: checked, node_api.SCALE_DOWN_DISABLED_ANNOTATION: "true",
                        node_api.KEPT_ANNOTATION: "true"},
                       unschedulable=True)
    api = _api(url, "watchdog")
    listed = api.list_nodes("kubernetes.azure.com/agentpool in (h100)")
    del state.nodes["aks-h100-1"]
    api.list_nodes = lambda selector: listed  # type: ignore[method-assign]
    done = node_watchdog.watchdog(api, 30, now=NOW, policy=POLICY, pools=["h100"])
    assert sorted(done["released"]) == ["aks-h100-0", "aks-h100-2"]


def test_the_gate_never_removes_an_operators_own_scale_down_protection(cluster: tuple[Cluster, str],
                                                                        tmp_path: Path) -> None:
    state, url = cluster
    own = {node_api.SCALE_DOWN_DISABLED_ANNOTATION: "true"}
    state.add_node("aks-h100-0", "h100", {node_api.HEALTH_LABEL: "failed"},
                   {**own, node_api.CHECKED_AT_ANNOTATION: "2026-11-20T00:00:00Z"}, unschedulable=True)
    state.add_node("aks-h100-1", "h100", {node_api.HEALTH_LABEL: "passed"}, dict(own))
    done = node_watchdog.watchdog(_api(url, "watchdog"), 30, now=NOW, policy=POLICY, pools=["h100"])
    assert done["released"] == [], "not the gate's to release, however old"
    node_gate.verdict(_api(url), "aks-h100-1", _results(tmp_path, 0), recheck=True, now=NOW, policy=POLICY)
    assert all(not autoscaler_may_scale_down(node) for node in state.nodes.values())
    # A re-check that fails it, and the watchdog past the bound and age, leave the operator's own too.
    node_gate.verdict(_api(url), "aks-h100-1", _results(tmp_path, 1), recheck=True,
                      now=NOW - datetime.timedelta(days=3), policy=POLICY)
    assert node_watchdog.watchdog(_api(url, "watchdog"), 30, now=NOW, policy=POLICY, pools=["h100"])["released"] == []
    assert not autoscaler_may_scale_down(state.nodes["aks-h100-1"])


def test_a_verdict_decided_on_an_older_view_is_not_applied(cluster: tuple[Cluster, str], tmp_path: Path) -> None:
    """The watchdog failed a node for taking too long; its check then passes. The pass must not
    leave a node labelled passed but cordoned (the gate may never uncordon)."""
    state, url = cluster
    state.add_node("aks-h100-0", "h100", {node_api.HEALTH_LABEL: "pending"},
                   {node_api.PENDING_SINCE_ANNOTATION: "2026-11-26T10:00:00Z"},
                   [GPU_TAINT, {"key": node_api.GATE_TAINT_KEY, "value": "pending", "effect": "NoSchedule"}])
    done = node_watchdog.watchdog(_api(url, "watchdog"), 30, now=NOW, policy=POLICY, pools=["h100"])
    assert done["failed"] == ["aks-h100-0"]
    assert node_gate.verdict(_api(url), "aks-h100-0", _results(tmp_path, 0), now=NOW, policy=POLICY) == "stale"
    node = state.nodes["aks-h100-0"]
    assert node["metadata"]["labels"][node_api.HEALTH_LABEL] == "failed" and node["spec"]["unschedulable"]
    assert [e["verdict"] for e in state.record()] == ["failed"]


def test_a_gpu_pod_still_starting_counts_as_holding_the_gpus(cluster: tuple[Cluster, str]) -> None:
    state, url = cluster
    recorded = json.dumps({"nodeImage": "AKSUbuntu-2204gen2containerd-202610.01.0"})
    state.add_node("aks-h100-0", "h100", {node_api.HEALTH_LABEL: "passed"}, {node_api.FINGERPRINT_ANNOTATION: recorded})
    state.pods.append({"metadata": {"name": "train-0", "namespace": "research", "labels": {}},
                       "spec": {"nodeName": "aks-h100-0", "containers": [
                           {"name": "main", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
                       "status": {"phase": "Pending"}})
    done = node_watchdog.watchdog(_api(url, "watchdog"), 30, now=NOW, policy=POLICY, pools=["h100"])
    assert done["regated"] == []
    state.pods[0]["status"]["phase"] = "Succeeded"
    assert node_watchdog.watchdog(_api(url, "watchdog"), 30, now=NOW, policy=POLICY, pools=["h100"])["regated"] == [
        "aks-h100-0"]


def test_the_passive_brake_counts_the_windows_cordons_and_reports_a_spared_node_hourly(
        cluster: tuple[Cluster, str]) -> None:
    """A detector gone wrong a node or two a pass must not cordon the pool one pass at a time."""
    state, url = cluster
    for index in range(5):
        state.add_node(f"aks-h100-{index}", "h100", {node_api.HEALTH_LABEL: "passed"})
    state.nodes["aks-h100-0"]["metadata"]["labels"][node_api.HEALTH_LABEL] = "failed"
    state.configmap["data"] = {"verdicts": "\n".join(json.dumps(
        {"time": "2026-11-26T11:40:00Z", "node": f"aks-h100-{index}", "pool": "h100", "source": "passive",
         "verdict": "failed"}) for index in (0, 1)) + "\n"}

    def missing(index: int) -> None:
        state.nodes[f"aks-h100-{index}"]["status"]["conditions"] = [{"type": "GPUMissing", "status": "True"}]

    missing(2)
    missing(3)
    run = lambda at: node_watchdog.watchdog(_api(url, "watchdog"), 30, now=at, policy=POLICY,  # noqa: E731
                                        pools=["h100"], npd_cordon={"GPUMissing"})
    done = run(NOW)
    assert done["cordoned"] == [] and done["spared"] == ["aks-h100-2", "aks-h100-3"], \
        "2 cordoned in the window plus 2 now: 4 of 5 nodes"
    assert len(state.events) == 2 and len(state.record()) == 2, "spared: Events, not verdicts in the record"
    run(NOW + datetime.timedelta(minutes=5))
    assert len(state.events) == 2, "reported once an hour"
    run(NOW + datetime.timedelta(minutes=65))
    assert len(state.events) == 4


def test_a_new_check_rolls_every_gate_pod_at_once_the_hold_too() -> None:
    """A held node on a GPU Operator pool keeps only its hold pod (the check's DaemonSet wants
    pending nodes); that pod must roll with the check for the node to be checked again."""
    from aksgpu.components.kubernetes.gpu_gate import gate_daemonsets

    def hold_and_strategy(image: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        spec = ClusterSpec.model_validate(edit(edit(base_spec(), "nodePools.0", H100_8_OPERATOR),
                                               "gpuHealth.gate.image", image))
        found = gate_daemonsets(spec, NAMESPACE)
        [hold] = [d for d in found if d["metadata"]["name"].endswith("-hold")]
        return hold["spec"]["template"], [d["spec"]["updateStrategy"] for d in found]

    old, strategies = hold_and_strategy("example.azurecr.io/check:1")
    new, _ = hold_and_strategy("example.azurecr.io/check:2")
    assert old != new, "the hold pod's template changes with the check image"
    assert all(s == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}} for s in strategies)


def test_a_burst_of_failures_at_once_opens_the_breaker_as_one_after_another_would(
        cluster: tuple[Cluster, str], tmp_path: Path) -> None:
    """The breaker decides on the record it adds to (retried on conflict): six verdicts landing
    together fail the first two and hold the rest, as if they had come one by one."""
    state, url = cluster
    for index in range(6):
        _pending_node(state, f"aks-h100-{index}")
        (tmp_path / str(index)).mkdir()
        _results(tmp_path / str(index), 2, "checker-error", "driver mismatch")
    outcomes: list[str] = []
    threads = [threading.Thread(target=lambda index=index: outcomes.append(node_gate.verdict(
        _api(url), f"aks-h100-{index}", str(tmp_path / str(index)), now=NOW, policy=POLICY))) for index in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["failed", "failed", "held", "held", "held", "held"]
    assert sorted(e["verdict"] for e in state.record()) == sorted(outcomes)


def test_a_node_no_gate_pod_reaches_is_failed_with_the_missing_resource_named(cluster: tuple[Cluster, str],
                                                                               tmp_path: Path) -> None:
    """On an InfiniBand pool the gate's pod requests the RDMA resource, which only the Network
    Operator's device plugin advertises. Where that never comes, no gate pod starts: the node has no
    gate label, advertises no GPUs, and the autoscaler would count it unready and delete it
    (gpu_processor.go; scale-down-unready-time) with no story. The watchdog keeps and then fails it."""
    state, url = cluster
    state.add_node("aks-h100-9", "h100")
    state.add_node("aks-h100-8", "h100")
    watchdog = _api(url, "watchdog")

    def run(minutes: int) -> dict[str, list[str]]:
        return node_watchdog.watchdog(watchdog, 40, now=NOW + datetime.timedelta(minutes=minutes), policy=POLICY,
                                  pools=["h100"], gate_resources={"h100": "rdma/shared_ib"})

    assert sorted(run(0)["unstarted"]) == ["aks-h100-8", "aks-h100-9"]
    assert not any(autoscaler_may_scale_down(node) for node in state.nodes.values()), "kept while it waits"
    # aks-h100-8's gate pod starts after all (the RDMA plugin came up): the watchdog's marks go.
    assert node_gate.pending(_api(url), "aks-h100-8", str(tmp_path), None,
                             now=NOW + datetime.timedelta(minutes=20)) == "tainted"
    started = state.nodes["aks-h100-8"]
    assert node_api.UNSTARTED_SINCE_ANNOTATION not in started["metadata"]["annotations"]
    assert autoscaler_may_scale_down(started), "a node under check is the autoscaler's again, as upstream"
    assert run(30) == {**run(30), "unstarted": [], "failed": []}, "within the limit: nothing yet"
    done = run(45)
    assert done["failed"] == ["aks-h100-9"], "aks-h100-8 is pending now, under the pending limit"
    node = state.nodes["aks-h100-9"]
    labels, annotations = node["metadata"]["labels"], node["metadata"]["annotations"]
    assert labels[node_api.HEALTH_LABEL] == "failed" and labels[node_api.FAILED_CHECK_LABEL] == "gate-unstarted"
    assert node["spec"]["unschedulable"] is True and not autoscaler_may_scale_down(node)
    reason = annotations[node_api.REASON_ANNOTATION]
    assert "no gate pod started on it in 45 minutes" in reason and "rdma/shared_ib" in reason, reason
    assert node_api.UNSTARTED_SINCE_ANNOTATION not in annotations
    assert state.events[-1]["involvedObject"]["name"] == "aks-h100-9"
    assert state.record()[-1]["check"] == "gate-unstarted"
    assert state.denied == [], "every change passes the gate's admission policy"


def test_a_node_that_advertises_the_resource_is_not_blamed_on_the_rdma_stack(cluster: tuple[Cluster, str]) -> None:
    state, url = cluster
    state.add_node("aks-h100-9", "h100", annotations={node_api.UNSTARTED_SINCE_ANNOTATION: "2026-11-26T11:00:00Z"})
    state.nodes["aks-h100-9"]["status"]["allocatable"] = {"rdma/shared_ib": "63"}
    state.add_node("aks-t4-1", "t4", annotations={node_api.UNSTARTED_SINCE_ANNOTATION: "2026-11-26T11:00:00Z"})
    # A GPU Operator pool's hold pod (no RDMA request) labels the node pending at once; the check's
    # pod, which requests the resource, never comes: the pending limit names what is missing.
    _pending_node(state, "aks-h100-7")
    state.nodes["aks-h100-7"]["metadata"]["annotations"][node_api.PENDING_SINCE_ANNOTATION] = "2026-11-26T11:00:00Z"
    done = node_watchdog.watchdog(_api(url, "watchdog"), 40, now=NOW, policy=POLICY, pools=["h100", "t4"],
                              gate_resources={"h100": "rdma/shared_ib"})
    assert sorted(done["failed"] + done["held"]) == ["aks-h100-7", "aks-h100-9", "aks-t4-1"]
    for name in ("aks-h100-9", "aks-t4-1"):
        reason = state.nodes[name]["metadata"]["annotations"][node_api.REASON_ANNOTATION]
        assert "so its check never began" in reason and "rdma" not in reason, reason
    reason = state.nodes["aks-h100-7"]["metadata"]["annotations"][node_api.REASON_ANNOTATION]
    assert reason.startswith("pending for more than 40 minutes") and "requests rdma/shared_ib" in reason, reason
