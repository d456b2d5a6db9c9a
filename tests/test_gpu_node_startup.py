"""A new GPU node, from the scale-up to the gate's verdict, checked against models of the upstream
code that acts on it (each model cites its file and tag):

- No GPU is advertised before the verdict, by construction: on GPU Operator pools the AgentPool
  creates its nodes with the operator's device plugin and DCGM exporter switched off. A model of
  the operator's node labeller (NVIDIA/gpu-operator v26.7.0) and of the k8s-driver-manager's
  snapshot and restore (NVIDIA/k8s-driver-manager v0.12.0, the version that gpu-operator pins)
  explores every interleaving: with the plan's pool labels no state before the verdict selects
  those DaemonSets; without them (the old design) one does.
- The autoscaler stays healthy during a GPU burst: models of cluster-autoscaler-1.36.1
  clusterstate.go (readiness, IsClusterHealthy, scale-up requests) run against the
  autoScalerProfile the plan sends.
"""

from __future__ import annotations

import json
import math
import re
from collections import deque
from dataclasses import dataclass, replace
from typing import Any

import pytest

from aksgpu import catalog
from aksgpu.node import node_api
from aksgpu.components.node_pools import REPLACE_ON_CHANGES
from aksgpu.spec import SpecError, parse_cluster_spec
from aksgpu.spec import gpu_startup
from aksgpu.spec.pools import HELD_OPERAND_LABELS, NVIDIA_PCI_LABEL
from tests.helpers import SHARED, base_spec, edit, shared_plan

H100 = {"name": "h100", "kind": "gpu", "vmSize": "Standard_ND96isr_H100_v5", "zones": ["1"], "minCount": 0,
        "maxCount": 16, "gpu": {"driver": "None"}}
DEVICE_PLUGIN, DCGM_EXPORTER = HELD_OPERAND_LABELS


def _operator_spec() -> dict[str, Any]:
    """The base spec with a GPU Operator H100 pool beside its device-plugin A100 pool."""
    return edit(base_spec(), "nodePools.1", H100)


def _pools(plan: Any) -> dict[str, dict[str, Any]]:
    return {p.inputs["agentPoolName"]: p for p in plan.by_type("azure-native:containerservice:AgentPool")}


# --- the GPU Operator's node labeller (NVIDIA/gpu-operator v26.7.0) -----------------------------

# controllers/state_manager.go: commonGPULabelKey, gpuNodeLabels, gpuStateLabels[container],
# commonOperandsLabelKey, migManagerLabelKey.
GPU_PRESENT = "nvidia.com/gpu.present"
GPU_NODE_LABELS = {"feature.node.kubernetes.io/pci-10de.present": "true",
                   "feature.node.kubernetes.io/pci-0302_10de.present": "true",
                   "feature.node.kubernetes.io/pci-0300_10de.present": "true"}
CONTAINER_STATE_LABELS = {f"nvidia.com/gpu.deploy.{name}": "true" for name in (
    "driver", "gpu-feature-discovery", "container-toolkit", "device-plugin", "dcgm", "dcgm-exporter",
    "node-status-exporter", "operator-validator", "client")}
# Every key of gpuStateLabels (all workload configs) and gpuClusterStateLabels, which
# removeAllGPUStateLabels deletes; the ones the container config does not use cannot appear here.
ALL_STATE_KEYS = set(CONTAINER_STATE_LABELS) | {"nvidia.com/gpu.deploy.mig-manager"}
OPERANDS = "nvidia.com/gpu.deploy.operands"
# What NFD's worker reports for an NVIDIA GPU (vendor 10de) with the chart's PCI source config
# (gpu-operator v26.7.0 values.yaml node-feature-discovery.worker.config.sources.pci:
# deviceClassWhitelist with 0302 and 0300, deviceLabelFields [vendor]).
NFD_NVIDIA = "feature.node.kubernetes.io/pci-10de.present"


def has_common_gpu_label(labels: dict[str, str]) -> bool:
    return labels.get(GPU_PRESENT) == "true"  # state_manager.go hasCommonGPULabel


def has_gpu_labels(labels: dict[str, str]) -> bool:
    return any(labels.get(key) == value for key, value in GPU_NODE_LABELS.items())  # hasGPULabels


def label_gpu_node(labels: dict[str, str]) -> dict[str, str]:
    """controllers/nodelabeling_controller.go labelGPUNodes, for one node under a ClusterPolicy with
    sandbox workloads off: reconcileCommonGPULabel, then updateGPUStateLabels (which, on a node
    without gpu.present=true, is removeAllGPUStateLabels; otherwise state_manager.go
    gpuWorkloadConfiguration.updateGPUStateLabels: removeGPUStateLabels + addGPUStateLabels, where a
    present non-empty value is kept and "" counts as absent)."""
    labels = dict(labels)
    if not has_common_gpu_label(labels) and has_gpu_labels(labels):
        labels[GPU_PRESENT] = "true"
    elif has_common_gpu_label(labels) and not has_gpu_labels(labels):
        labels[GPU_PRESENT] = "false"
    if not has_common_gpu_label(labels) or labels.get(OPERANDS) == "false":
        for key in ALL_STATE_KEYS:
            labels.pop(key, None)
        return labels
    for key, value in CONTAINER_STATE_LABELS.items():
        if labels.get(key, "") == "":
            labels[key] = value
    return labels


def merge_patch(original: dict[str, str], modified: dict[str, str]) -> tuple[tuple[str, str | None], ...]:
    """controller-runtime client.MergeFrom(original): the changed keys, and null for removed ones."""
    keys = set(original) | set(modified)
    return tuple(sorted((key, modified.get(key)) for key in keys if original.get(key) != modified.get(key)))


# --- the k8s-driver-manager (NVIDIA/k8s-driver-manager v0.12.0 cmd/driver-manager/main.go) ------

PAUSED = "paused-for-driver-upgrade"  # pausedStr


def maybe_set_paused(value: str) -> str:
    """maybeSetPaused."""
    if value in ("", "false"):
        return value
    if value == "true":
        return PAUSED
    return value if PAUSED in value else f"{value}_{PAUSED}"


def maybe_set_true(value: str) -> str:
    """maybeSetTrue: "false" stays, "paused-for-driver-upgrade" becomes "true", otherwise the
    paused suffix is cut (so "true" stays "true" and "" stays "")."""
    if value == "false":
        return "false"
    if value == PAUSED:
        return "true"
    return re.sub(PAUSED + "_?", "", value).strip("_")


@dataclass(frozen=True)
class World:
    """One state of a new node: its labels, and where each actor is."""

    labels: tuple[tuple[str, str], ...]
    nfd: bool = False                 # NFD's master has labelled the node
    held: bool = False                # the gate's hold pod ran its pending step
    operator: tuple[tuple[str, str | None], ...] | None = None  # a patch computed, not yet sent
    manager: str = "off"              # off, read-dp, read-dcgm, evict, restore, done
    snapshot: tuple[str, str] = ("", "")
    driver_loaded: bool = False       # after one run of the driver container
    verdict: bool = False

    @property
    def label_map(self) -> dict[str, str]:
        return dict(self.labels)

    def with_labels(self, labels: dict[str, str], **changes: Any) -> World:
        return replace(self, labels=tuple(sorted(labels.items())), **changes)


def _apply(labels: dict[str, str], patch: dict[str, str | None]) -> dict[str, str]:
    result = dict(labels)
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = value
    return result


def moves(world: World) -> list[tuple[str, World]]:
    """Every step some actor can take next (the node exists: the kubelet registered it)."""
    labels = world.label_map
    found: list[tuple[str, World]] = []
    if world.verdict:
        return found
    if not world.nfd:  # nfd-master applies the worker's PCI feature label
        found.append(("nfd labels the node", world.with_labels({**labels, NFD_NVIDIA: "true"}, nfd=True)))
    if world.operator is None:  # the labeller reads the node (from its cache: any later write may land first)
        patch = merge_patch(labels, label_gpu_node(labels))
        if patch:
            found.append(("operator reads", replace(world, operator=patch)))
    else:
        found.append(("operator patches " + str(dict(world.operator)),
                      world.with_labels(_apply(labels, dict(world.operator)), operator=None)))
    if not world.held:  # node_gate.py pending (--hold-operands on GPU Operator pools): one atomic update
        pending = {label: "false" for label in HELD_OPERAND_LABELS}
        found.append(("gate hold pod: pending", world.with_labels({**labels, **pending}, held=True)))
    manager = world.manager
    if manager in ("off", "done") and labels.get("nvidia.com/gpu.deploy.driver") == "true":
        # The driver DaemonSet selects nvidia.com/gpu.deploy.driver=true (assets/state-driver); its
        # init container runs uninstall_driver on every start of the pod (a restart included).
        found.append(("driver manager starts", replace(world, manager="read-dp")))
    elif manager == "read-dp":  # fetchCurrentLabels: one GetNodeLabelValue per label, "" if absent
        found.append(("driver manager reads device-plugin",
                      replace(world, manager="read-dcgm", snapshot=(labels.get(DEVICE_PLUGIN, ""), ""))))
    elif manager == "read-dcgm":
        snapshot = (world.snapshot[0], labels.get(DCGM_EXPORTER, ""))
        found.append(("driver manager reads dcgm-exporter",
                      replace(world, manager="evict" if world.driver_loaded else "restore", snapshot=snapshot)))
    elif manager == "evict":  # evictAllGPUOperatorComponents (only with a driver loaded)
        paused = {DEVICE_PLUGIN: maybe_set_paused(world.snapshot[0]),
                  DCGM_EXPORTER: maybe_set_paused(world.snapshot[1])}
        found.append(("driver manager pauses " + str(paused),
                      world.with_labels({**labels, **paused}, manager="restore")))
    elif manager == "restore":  # rescheduleGPUOperatorComponents: UpdateNodeLabels from the snapshot
        restored = {DEVICE_PLUGIN: maybe_set_true(world.snapshot[0]), DCGM_EXPORTER: maybe_set_true(world.snapshot[1])}
        found.append(("driver manager restores " + str(restored),
                      world.with_labels({**labels, **restored}, manager="done", driver_loaded=True)))
    if world.held and manager == "done":
        # The check starts after the pending step and the toolkit-ready mark (the driver container
        # runs after its init container); only the verdict switches the operands on.
        found.append(("gate verdict: passed", world.with_labels(
            {**labels, **{label: "true" for label in HELD_OPERAND_LABELS}}, verdict=True)))
    return found


def selected_before_verdict(world: World) -> bool:
    """The device plugin's or the exporter's DaemonSet selects the node before the gate's verdict."""
    labels = world.label_map
    return not world.verdict and "true" in (labels.get(DEVICE_PLUGIN), labels.get(DCGM_EXPORTER))


def selected_while_held(world: World) -> bool:
    """The old design's claim: once the hold pod has written "false", nothing selects the node again
    before the verdict."""
    return world.held and selected_before_verdict(world)


def explore(initial: dict[str, str], bad: Any = selected_before_verdict) -> tuple[list[str] | None, int, bool]:
    """Breadth-first over every interleaving: (the shortest trace to a `bad` state, or None; states
    seen; whether a verdict is reachable)."""
    start = World(tuple(sorted(initial.items())))
    parents: dict[World, tuple[World | None, str]] = {start: (None, "node registers")}
    queue = deque([start])
    verdict = False
    while queue:
        world = queue.popleft()
        if bad(world):
            trace = []
            node: World | None = world
            while node is not None:
                parent, step = parents[node]
                trace.append(step)
                node = parent
            return trace[::-1], len(parents), verdict
        verdict |= world.verdict
        for step, after in moves(world):
            if after not in parents:
                parents[after] = (world, step)
                queue.append(after)
    return None, len(parents), verdict


@pytest.fixture(scope="module")
def operator_plan() -> Any:
    return shared_plan(_operator_spec())


def test_no_interleaving_advertises_gpus_before_the_verdict_with_the_pool_labels(operator_plan: Any) -> None:
    """The H100 pool's nodes register with the plan's nodeLabels; then NFD, the operator's labeller
    (any number of passes, each read possibly stale), the gate's hold pod and the driver manager
    (restarts included) interleave in every possible order. No state before the verdict has the
    device plugin's or exporter's selector value, and the verdict stays reachable."""
    labels = _pools(operator_plan)["h100"].inputs["nodeLabels"]
    trace, states, verdict = explore(labels)
    assert trace is None, f"an interleaving advertises GPUs before the verdict: {trace}"
    assert verdict and states > 20, "the model reaches the verdict, through many interleavings"


def test_without_the_pool_labels_an_interleaving_writes_true_before_the_verdict(operator_plan: Any) -> None:
    """The old design (the hold pod's write only) and the half measure (the two operand labels
    without the PCI label): each has an interleaving that starts the device plugin on a node under
    check, through the driver manager's restore or the labeller's sweep."""
    labels = _pools(operator_plan)["h100"].inputs["nodeLabels"]
    old = {key: value for key, value in labels.items() if key not in (*HELD_OPERAND_LABELS, NVIDIA_PCI_LABEL)}
    trace, _, _ = explore(old, selected_while_held)
    assert trace is not None and "gate hold pod: pending" in trace, trace
    # The review's race exactly: the driver manager's snapshot is taken after the labeller's "true"
    # and before the hold pod's "false"; its restore writes "true" back while the node is under check.
    world = World(tuple(sorted(old.items())))
    for step in ("nfd labels the node", "operator reads", "operator patches", "driver manager starts",
                 "driver manager reads device-plugin", "gate hold pod: pending"):
        world = next(after for name, after in moves(world) if name.startswith(step))
    assert world.label_map[DEVICE_PLUGIN] == "false"
    while world.manager != "done":
        world = next(after for name, after in moves(world) if name.startswith("driver manager"))
    assert world.label_map[DEVICE_PLUGIN] == "true" and not world.verdict
    # The half measure: the labeller sweeps both switches off a node without gpu.present, then sets
    # them "true" once NFD's label arrives.
    half = {key: value for key, value in labels.items() if key != NVIDIA_PCI_LABEL}
    trace, _, _ = explore(half, selected_while_held)
    assert trace is not None, "the two operand labels alone are not enough"
    assert any(step.startswith("operator patches") and f"'{DEVICE_PLUGIN}': None" in step for step in trace), \
        f"the labeller removes the pool's switch (it read the node before NFD labelled it): {trace}"


def test_the_labels_are_false_in_every_state_before_the_verdict(operator_plan: Any) -> None:
    """Stronger than "not true": the operands' switches read "false" from registration to verdict,
    so every snapshot the driver manager can take is "false" (and maybeSetTrue keeps it)."""
    labels = _pools(operator_plan)["h100"].inputs["nodeLabels"]
    start = World(tuple(sorted(labels.items())))
    seen, queue = {start}, deque([start])
    while queue:
        world = queue.popleft()
        if not world.verdict:
            assert world.label_map.get(DEVICE_PLUGIN) == world.label_map.get(DCGM_EXPORTER) == "false", world
        for _, after in moves(world):
            if after not in seen:
                seen.add(after)
                queue.append(after)


def test_only_gpu_operator_pools_with_the_gate_get_the_labels(operator_plan: Any) -> None:
    """An operand switched off by the pool must have the gate's verdict to switch it on: no labels on
    device-plugin pools (the operator's labeller never runs there), none with the gate off (nothing
    would ever write "true"), none without the in-cluster layer."""
    pools = _pools(operator_plan)
    expected = {DEVICE_PLUGIN: "false", DCGM_EXPORTER: "false", NVIDIA_PCI_LABEL: "true"}
    assert expected.items() <= pools["h100"].inputs["nodeLabels"].items()
    assert not expected.keys() & pools["a100"].inputs["nodeLabels"].keys()
    for path, value in (("gpuHealth.gate.enabled", False), ("inCluster.enabled", False)):
        plan = shared_plan(edit(_operator_spec(), path, value))
        assert not expected.keys() & _pools(plan)["h100"].inputs["nodeLabels"].keys(), path


def test_adding_the_labels_updates_the_pool_in_place(operator_plan: Any) -> None:
    """Turning the gate on for an existing GPU Operator pool changes only its nodeLabels, which
    neither aksgpu (REPLACE_ON_CHANGES) nor the provider replace on: pulumi-azure-native's
    forceNewMap names only gpuInstanceProfile and vmSize for ContainerService AgentPool
    (provider/pkg/gen), and the AKS 2025-09-01 spec marks no agent pool property create-only.
    AKS updates pool labels in place and applies them to the pool's nodes (azure-aks-docs
    use-labels.md "Updating labels on existing node pools"; Azure/AKS#1515, shipped)."""
    off = _pools(shared_plan(edit(_operator_spec(), "gpuHealth.gate.enabled", False)))["h100"]
    on = _pools(operator_plan)["h100"]
    changed = {key for key in on.inputs.keys() | off.inputs.keys() if on.inputs.get(key) != off.inputs.get(key)}
    assert changed == {"nodeLabels"}
    assert "nodeLabels" not in REPLACE_ON_CHANGES and "nodeLabels" not in on.options["replaceOnChanges"]
    spec_file = SHARED / "specs/azure-rest-api/containerservice/resource-manager/Microsoft.ContainerService/aks/" \
        "stable/2025-09-01/managedClusters.json"
    if spec_file.is_file():
        properties = json.loads(spec_file.read_text())["definitions"]["ManagedClusterAgentPoolProfileProperties"]
        assert "x-ms-mutability" not in properties["properties"]["nodeLabels"]


def is_kubelet_label(key: str) -> bool:
    """kubernetes staging/src/k8s.io/kubelet/pkg/apis/well_known_labels.go IsKubeletLabel: a label in
    the kubernetes.io or k8s.io namespace the kubelet may set on its own Node (NodeRestriction)."""
    kubelet_labels = {"kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch",
                      "node.kubernetes.io/instance-type", "topology.kubernetes.io/zone",
                      "topology.kubernetes.io/region"}
    if key in kubelet_labels:
        return True
    namespace = key.split("/", 1)[0] if "/" in key else ""
    return any(namespace == ns or namespace.endswith("." + ns) for ns in ("kubelet.kubernetes.io",
                                                                          "node.kubernetes.io"))


def kubernetes_namespace(key: str) -> bool:
    namespace = key.split("/", 1)[0] if "/" in key else ""
    return any(namespace == ns or namespace.endswith("." + ns) for ns in ("kubernetes.io", "k8s.io"))


def test_aks_and_the_kubelet_accept_the_labels(operator_plan: Any) -> None:
    """The kubelet registers the Node with the pool's labels (--node-labels), so NodeRestriction's
    rule applies: a kubernetes.io/k8s.io-namespace label must be a kubelet label (the PCI label's
    feature.node.kubernetes.io is a subdomain of node.kubernetes.io); nvidia.com is outside those
    namespaces. AKS refuses the same keys ("node label keys in the 'kubernetes.io' or 'k8s.io'
    namespace must begin with an allowed prefix (kubelet.kubernetes.io, node.kubernetes.io)",
    Azure/AKS#2866) and its reserved prefixes kubernetes.azure.com/ and kubernetes.io/
    (use-labels.md)."""
    for key in _pools(operator_plan)["h100"].inputs["nodeLabels"]:
        assert not kubernetes_namespace(key) or is_kubelet_label(key), key
        assert not key.startswith(("kubernetes.azure.com/", "kubernetes.io/")), key
    assert not is_kubelet_label("node-restriction.kubernetes.io/x"), "the model refuses what AKS#2866 refused"


def test_the_gate_and_the_pool_name_the_same_operands() -> None:
    assert HELD_OPERAND_LABELS == node_api.HELD_OPERAND_LABELS


def test_a_user_label_cannot_take_the_gates_switch() -> None:
    spec = edit(_operator_spec(), "nodePools.1.labels", {DEVICE_PLUGIN: "true"})
    with pytest.raises(SpecError, match=r"nodePools\[1\]\.labels\.nvidia\.com/gpu\.deploy\.device-plugin"):
        parse_cluster_spec(spec)
    parse_cluster_spec(edit(spec, "gpuHealth.gate.enabled", False))


# --- the cluster autoscaler (kubernetes/autoscaler cluster-autoscaler-1.36.1) --------------------

STARTUP_WINDOW = catalog.limit("clusterAutoscalerMaxNodeStartupMinutes") * 60  # MaxNodeStartupTime, seconds
DEFAULTS = catalog.limit("clusterAutoscalerDefaults")


@dataclass(frozen=True)
class Node:
    group: str
    registered: int  # seconds after the scale-up (the Node's creationTimestamp)
    verdict: float   # seconds after the scale-up the startup taint leaves (inf: held by the breaker)


def readiness(node: Node, now: int) -> str:
    """clusterstate.go updateReadinessStats: a node with a startup taint is not ready (utils/taints
    FilterOutNodesWithStartupTaints); a not-ready node is NotStarted while creationTimestamp +
    MaxNodeStartupTime is after now, else Unready. Not yet registered: Unregistered."""
    if now < node.registered:
        return "Unregistered"
    if now >= node.verdict:
        return "Ready"
    return "NotStarted" if node.registered + STARTUP_WINDOW > now else "Unready"


def cluster_healthy(states: list[str], ok_total_unready_count: int, max_total_unready_percentage: float) -> bool:
    """clusterstate.go IsClusterHealthy (lines 493-505) over the registered nodes."""
    registered = [s for s in states if s != "Unregistered"]
    unready = registered.count("Unready")
    return not (unready > ok_total_unready_count and unready > max_total_unready_percentage / 100.0 * len(registered))


def upcoming(states: list[str], target: int) -> int:
    """clusterstate.go calculateUpcomingNodesInNodeGroup: target - (ready + unready + suspended +
    long unregistered); NotStarted and (recently) unregistered nodes are upcoming."""
    return target - sum(1 for s in states if s in ("Ready", "Unready"))


def profile_of(plan: Any) -> dict[str, Any]:
    [cluster] = plan.by_type("azure-native:containerservice:ManagedCluster")
    profile = cluster.inputs["autoScalerProfile"]
    return {"ok": int(profile.get("okTotalUnreadyCount", DEFAULTS["okTotalUnreadyCount"])),
            "pct": float(profile.get("maxTotalUnreadyPercentage", DEFAULTS["maxTotalUnreadyPercentage"])),
            "provision": int(profile["maxNodeProvisionTime"].rstrip("m")) * 60}


def burst(spec: Any, provision: int, held: bool) -> list[Node]:
    """Every gated pool scales from its minimum to its most nodes (surge included) at once; each new
    node registers after `provision` seconds and passes at the latest (its steps plus the check's
    whole limit) or, held by the breaker, never. The other pools sit at their minimum, ready."""
    nodes = [Node("base", 0, 0) for _ in range(spec.system_pool.min_nodes)]
    gated = gpu_startup.gated_pools(spec)
    for pool in spec.node_pools:
        if any(pool is g for g in gated):
            verdict = math.inf if held else provision + gpu_startup.verdict_seconds(spec, pool)
            nodes += [Node(pool.name, provision, verdict) for _ in range(pool.node_range[1])]
        else:
            nodes += [Node(pool.name, 0, 0) for _ in range(pool.min_nodes * pool.zone_pool_count)]
    return nodes


SCENARIOS = {
    "operator pool": _operator_spec(),
    "device-plugin pool, long check": edit(base_spec(), "gpuHealth.gate.timeoutSeconds", 1800),
    "breaker off, quick check": edit(edit(base_spec(), "gpuHealth.gate.breaker", {"enabled": False}),
                                     "gpuHealth.gate.timeoutSeconds", 300),
    "big perZone pools": edit(edit(_operator_spec(), "nodePools.0.perZone", True), "nodePools.0.maxCount", 40),
}


@pytest.mark.parametrize("raw", list(SCENARIOS.values()), ids=list(SCENARIOS))
def test_the_plans_profile_keeps_the_autoscaler_healthy_through_a_burst(raw: dict[str, Any]) -> None:
    spec, _ = parse_cluster_spec(raw)
    profile = profile_of(shared_plan(raw))
    held = spec.gpu_health.gate.breaker.enabled
    for provision in (300, 900):  # Azure/AKS#1898: a node in about 5 minutes, the first in 15
        nodes = burst(spec, provision, held)
        for now in range(0, 3 * 3600, 30):
            states = [readiness(node, now) for node in nodes]
            assert cluster_healthy(states, profile["ok"], profile["pct"]), (now, states.count("Unready"))


def test_with_aks_defaults_a_burst_stops_the_autoscaler() -> None:
    """The old profile (AKS's 3 and 45 %) on the same cluster: the held H100 burst halts it."""
    spec, _ = parse_cluster_spec(_operator_spec())
    nodes = burst(spec, 300, held=True)
    states = [readiness(node, 300 + STARTUP_WINDOW + 60) for node in nodes]
    assert not cluster_healthy(states, DEFAULTS["okTotalUnreadyCount"], DEFAULTS["maxTotalUnreadyPercentage"])


def scale_up_times_out(nodes: list[Node], max_node_provision_time: int) -> bool:
    """clusterstate.go updateScaleRequests: a scale-up at 0 of len(nodes) nodes succeeds once none is
    upcoming, and times out (the group is backed off) when ExpectedAddTime = 0 + maxNodeProvisionTime
    passes first."""
    for now in range(0, 4 * 3600, 10):
        if upcoming([readiness(node, now) for node in nodes], len(nodes)) == 0:
            return False
        if max_node_provision_time < now:
            return True
    raise AssertionError("the scale-up never settles")


@pytest.mark.parametrize("raw", list(SCENARIOS.values()), ids=list(SCENARIOS))
def test_the_plans_provision_time_lets_gated_scale_ups_finish(raw: dict[str, Any]) -> None:
    """Nodes that pass (or fail: a failed node is cordoned, leaves the startup taint and counts as
    Unready, no longer upcoming) at the latest possible moment. Nodes the breaker holds stay
    NotStarted for the whole window; their scale-up may time out, and the pool's backoff is what
    the breaker wants: no more new nodes into a pool whose nodes fail."""
    spec, _ = parse_cluster_spec(raw)
    profile = profile_of(shared_plan(raw))
    for pool in gpu_startup.gated_pools(spec):
        own = sum(step.seconds for step in gpu_startup.provision_steps(pool))
        for provision in sorted({own, DEFAULTS["maxNodeProvisionMinutes"] * 60}):
            nodes = [Node(pool.name, provision, provision + gpu_startup.verdict_seconds(spec, pool))] * 3
            assert not scale_up_times_out(nodes, profile["provision"]), (pool.name, provision)


def test_with_aks_default_provision_time_a_gated_scale_up_times_out() -> None:
    spec, _ = parse_cluster_spec(_operator_spec())
    [h100] = [pool for pool in spec.node_pools if pool.name == "h100"]
    provision = sum(step.seconds for step in gpu_startup.provision_steps(h100))
    nodes = [Node("h100", provision, provision + gpu_startup.verdict_seconds(spec, h100))] * 3
    assert scale_up_times_out(nodes, DEFAULTS["maxNodeProvisionMinutes"] * 60)


def test_a_too_low_explicit_value_warns_with_the_derived_figure() -> None:
    raw = edit(_operator_spec(), "controlPlane.autoscaler", {"okTotalUnreadyCount": 3, "maxNodeProvisionMinutes": 15})
    spec, warnings = parse_cluster_spec(raw)
    derived = gpu_startup.derived_autoscaler(spec)
    by_path = {w.path: w for w in warnings}
    count = by_path["controlPlane.autoscaler.okTotalUnreadyCount"]
    assert count.severity == "warning" and f"derives {derived.unready_nodes}" in count.fix
    provision = by_path["controlPlane.autoscaler.maxNodeProvisionMinutes"]
    assert f"derives {derived.max_node_provision_minutes}" in provision.fix
    # The explicit values are what AKS gets.
    [cluster] = shared_plan(raw).by_type("azure-native:containerservice:ManagedCluster")
    assert cluster.inputs["autoScalerProfile"]["okTotalUnreadyCount"] == "3"
    # A percentage high enough makes a low count harmless (IsClusterHealthy needs both exceeded).
    _, warnings = parse_cluster_spec(edit(raw, "controlPlane.autoscaler.maxTotalUnreadyPercentage",
                                          derived.unready_share))
    assert "controlPlane.autoscaler.okTotalUnreadyCount" not in {w.path for w in warnings}
    _, warnings = parse_cluster_spec(_operator_spec())
    assert not [w for w in warnings if w.path.startswith("controlPlane.autoscaler")]


# Each case plans a cluster (a few tenths of a second): two that warn and two that do not run in the
# default run, the others with the slow tests.
@pytest.mark.parametrize("count,percentage", [(None, None), (3, None), pytest.param(3, 45, marks=pytest.mark.slow),
                                              (3, 90), (10, 45), pytest.param(40, None, marks=pytest.mark.slow),
                                              pytest.param(None, 10, marks=pytest.mark.slow),
                                              pytest.param(0, 100, marks=pytest.mark.slow)])
def test_the_warning_agrees_with_the_autoscalers_own_rule(count: int | None, percentage: int | None) -> None:
    """The spec warns exactly when some burst state of the held pools makes IsClusterHealthy false."""
    autoscaler = {key: value for key, value in (("okTotalUnreadyCount", count),
                                                ("maxTotalUnreadyPercentage", percentage)) if value is not None}
    raw = edit(_operator_spec(), "controlPlane.autoscaler", autoscaler)
    spec, warnings = parse_cluster_spec(raw)
    profile = profile_of(shared_plan(raw))
    nodes = burst(spec, 300, held=True)
    halts = False
    for gated in range(1, sum(1 for n in nodes if n.group != "base" and n.verdict == math.inf) + 1):
        states = ["Ready"] * gpu_startup.derived_autoscaler(spec).base_nodes + ["Unready"] * gated
        halts |= not cluster_healthy(states, profile["ok"], profile["pct"])
    warned = any(w.path in ("controlPlane.autoscaler.okTotalUnreadyCount",
                            "controlPlane.autoscaler.maxTotalUnreadyPercentage") for w in warnings)
    assert warned == halts


def test_the_timing_warning_is_the_autoscalers_view() -> None:
    """gpuHealth.gate.timeoutSeconds warns exactly for the pools whose node can still be under check
    when the autoscaler stops counting it as starting (updateReadinessStats: Unready)."""
    for raw in (base_spec(), _operator_spec(), edit(base_spec(), "gpuHealth.gate.timeoutSeconds", 900),
                edit(_operator_spec(), "gpuHealth.gate.timeoutSeconds", 240)):
        spec, warnings = parse_cluster_spec(raw)
        [warning] = [w for w in warnings if w.path == "gpuHealth.gate.timeoutSeconds"] or [None]
        late = []
        for index, pool in enumerate(spec.node_pools):
            if any(pool is g for g in gpu_startup.gated_pools(spec)):
                node = Node(pool.name, 0, gpu_startup.verdict_seconds(spec, pool))
                if any(readiness(node, now) == "Unready" for now in range(0, 7200, 10)):
                    late.append(f"nodePools[{index}] ({pool.name})")
        assert (warning is not None) == bool(late), raw
        if warning:
            assert all(name in warning.rule for name in late)


def test_the_startup_table_is_sourced_or_an_assumption() -> None:
    table = catalog.load("deploy_durations")["gpuNodeStartup"]
    for phase in ("provision", "startup"):
        for row in table[phase]:
            assert isinstance(row["seconds"], int) and row["seconds"] > 0
            assert row.get("driver") in (None, "Install", "None")
            assert row.get("fabric") in (None, "infiniband")
            if row.get("assumption"):
                assert len(row["reason"]) > 40, row["step"]
            else:
                assert row["source"] and row["date"], row["step"]


def test_the_watchdog_allowance_covers_every_step_before_the_check() -> None:
    """gate_startup_minutes: the minutes from a node's creation to the start of its check, for the
    slowest gated pool; the table's rows, each counted once, for that pool's driver mode."""
    table = catalog.load("deploy_durations")["gpuNodeStartup"]["startup"]
    for raw, driver in ((base_spec(), "Install"), (_operator_spec(), "None")):
        spec, _ = parse_cluster_spec(raw)
        infiniband = "infiniband" if driver == "None" else None  # the operator spec's pool is an ND H100 v5
        seconds = sum(row["seconds"] for row in table if row.get("driver") in (None, driver)
                      and row.get("fabric") in (None, infiniband))
        assert gpu_startup.gate_startup_minutes(spec) == math.ceil(seconds / 60)
        for pool in gpu_startup.gated_pools(spec):
            assert gpu_startup.gate_startup_minutes(spec) * 60 >= gpu_startup.pool_startup_seconds(pool)
    no_gate, _ = parse_cluster_spec(edit(_operator_spec(), "gpuHealth.gate.enabled", False))
    assert gpu_startup.gated_pools(no_gate) == [] and gpu_startup.gate_startup_minutes(no_gate) > 0


def test_an_infiniband_pools_allowance_waits_for_the_rdma_stack_its_gate_pod_needs() -> None:
    """The gate's pod on an InfiniBand pool is not scheduled before the RDMA resource exists, so the
    watchdog's allowance for such a pool counts the DOCA driver's load; other pools do not."""
    rdma = next(row for row in catalog.load("deploy_durations")["gpuNodeStartup"]["startup"]
                if row["step"] == "rdmaStack")
    spec, _ = parse_cluster_spec(_operator_spec())
    pools = {pool.name: pool for pool in gpu_startup.gated_pools(spec)}
    steps = {name: [step.step for step in gpu_startup.startup_steps(pool)] for name, pool in pools.items()}
    assert "rdmaStack" in steps["h100"], steps
    assert [name for name,
            found in steps.items() if "rdmaStack" in found] == ["h100"], "the A100 pool has no InfiniBand"
    without = sum(step.seconds for step in gpu_startup.startup_steps(pools["h100"]) if step.step != "rdmaStack")
    assert gpu_startup.gate_startup_minutes(spec) * 60 >= without + rdma["seconds"]
