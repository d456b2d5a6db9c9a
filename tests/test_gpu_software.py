"""GPU software per driver mode, judged from the plan alone: for every preset and example, every
GPU pool has exactly one component that advertises nvidia.com/gpu on its nodes, nothing GPU-specific
lands on the system pool or a CPU pool, and no GPU is advertised on a node the gate has not seen."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from aksgpu.environments.presets import preset_names
from aksgpu.plan.planner import Plan
from aksgpu.plan.report import gpu_software_by_pool
from aksgpu.node import node_api
from aksgpu.spec import SpecError, parse_cluster_spec
from tests.helpers import base_spec, edit, preset_spec, shared_plan
from tests.oracles.kubernetes import DATA
from tests.oracles.scheduling import Node, fits, plan_nodes

# cluster-autoscaler utils/taints/taints.go (tag cluster-autoscaler-1.36.1): taints with this prefix
# mark a node as still starting.
STARTUP_TAINT_PREFIX = "startup-taint.cluster-autoscaler.kubernetes.io/"
GPU_OPERATOR_VALUES = yaml.safe_load((DATA / "gpu-operator" / "values.yaml").read_text())
NFD_VALUES = yaml.safe_load((DATA / "gpu-operator" / "node-feature-discovery" / "values.yaml").read_text())


def helm_merge(defaults: Any, values: Any) -> Any:
    """Helm's coalescing of user values over chart defaults: maps merge, anything else replaces."""
    if isinstance(defaults, dict) and isinstance(values, dict):
        merged = copy.deepcopy(defaults)
        for key, value in values.items():
            merged[key] = helm_merge(defaults.get(key), value) if key in defaults else value
        return merged
    return copy.deepcopy(values)


def _pod_spec(resource: Any) -> dict[str, Any]:
    return resource.inputs["spec"]["template"]["spec"]


def device_plugins(plan: Plan) -> list[dict[str, Any]]:
    return [_pod_spec(r) for r in plan.by_type("kubernetes:apps/v1:DaemonSet")
            if any("k8s-device-plugin" in c["image"] for c in _pod_spec(r)["containers"])]


def operator_values(plan: Plan) -> list[dict[str, Any]]:
    """Effective values (chart defaults coalesced with the plan's) of every gpu-operator release."""
    found = []
    for release in plan.by_type("kubernetes:helm.sh/v3:Release"):
        if release.inputs["chart"] == "gpu-operator":
            values = helm_merge(GPU_OPERATOR_VALUES, release.inputs["values"])
            values["node-feature-discovery"] = helm_merge(NFD_VALUES, values.get("node-feature-discovery", {}))
            found.append(values)
    return found


def operator_advertises(values: dict[str, Any], node: Node) -> bool:
    """The operator's device plugin runs on a node when NFD's worker runs there (it finds the
    NVIDIA PCI device and the operator sets nvidia.com/gpu.present), the operands tolerate the
    node's taints, and no label turns the operands off (controllers/state_manager.go, v26.7.0)."""
    if not values["devicePlugin"]["enabled"] or node.labels.get("kubernetes.azure.com/accelerator") != "nvidia":
        return False
    worker = values["node-feature-discovery"]["worker"]
    if not fits({"tolerations": worker.get("tolerations"), "affinity": worker.get("affinity"),
                 "nodeSelector": worker.get("nodeSelector")}, node):
        return False
    if node.labels.get("nvidia.com/gpu.deploy.operands") == "false" or \
            node.labels.get("nvidia.com/gpu.deploy.device-plugin") == "false":
        return False
    return fits({"tolerations": values["daemonsets"]["tolerations"]}, node)


def advertisers(plan: Plan, node: Node) -> list[str]:
    found = [f"device plugin {i}" for i, spec in enumerate(device_plugins(plan)) if fits(spec, node)]
    found += [f"gpu-operator {i}" for i, values in enumerate(operator_values(plan))
              if operator_advertises(values, node)]
    return found


def gate_taint(plan: Plan) -> str | None:
    """The startup taint the gate DaemonSets put on new nodes (the one they tolerate with that prefix,
    any value: "pending" is what node_gate.py's pending step writes)."""
    for daemonset in plan.by_type("kubernetes:apps/v1:DaemonSet"):
        if daemonset.inputs["metadata"]["name"].startswith("aksgpu-gpu-gate"):
            for toleration in _pod_spec(daemonset)["tolerations"]:
                if toleration["key"].startswith(STARTUP_TAINT_PREFIX):
                    value = toleration.get("value", "pending")
                    return f"{toleration['key']}={value}:{toleration['effect']}"
    return None


def passed_labels(node: Node) -> dict[str, str]:
    """What the gate's verdict writes on a passed node: the health label, and on a GPU Operator pool
    (whose nodes join with the operator's device plugin and exporter switched off) those switches
    on (node_gate.py verdict with --release-operands)."""
    labels = {"aksgpu.io/gpu-health": "passed"}
    held = [label for label in node_api.HELD_OPERAND_LABELS if node.labels.get(label) == "false"]
    return {**labels, **{label: "true" for label in held}}


def admitted(plan: Plan, node: Node) -> Node:
    """The node after the gate passed it: labelled passed, operands released, startup taint gone."""
    return node.with_state(labels=passed_labels(node)) if gate_taint(plan) else node


PLANS = {f"preset {name}": lambda name=name: shared_plan(preset_spec(name)) for name in preset_names()}


@pytest.fixture(scope="module")
def preset_plans() -> dict[str, Plan]:
    return {name: make() for name, make in PLANS.items()}


def _all_plans(preset_plans: dict[str, Plan], example_plans: dict[str, Plan]) -> dict[str, Plan]:
    return {**preset_plans, **{f"example {name}": plan for name, plan in example_plans.items()}}


def test_every_gpu_pool_has_exactly_one_component_advertising_its_gpus(
        preset_plans: dict[str, Plan], example_plans: dict[str, Plan]) -> None:
    checked = 0
    for name, plan in _all_plans(preset_plans, example_plans).items():
        for node in plan_nodes(plan):
            found = advertisers(plan, admitted(plan, node))
            if node.gpus:
                assert len(found) == 1, f"{name}: GPU pool {node.pool} has {found or 'nothing'}"
                checked += 1
            else:
                assert not found, f"{name}: {found} on {node.pool}, a pool without GPUs"
    assert checked >= 15, "every preset and example has GPU pools to check"


def test_the_report_names_the_same_component_per_pool(preset_plans: dict[str, Plan]) -> None:
    plan = preset_plans["preset fleet"]
    reported = gpu_software_by_pool(plan)
    for node in plan_nodes(plan):
        derived = advertisers(plan, admitted(plan, node))
        expected = [] if not derived else [
            "NVIDIA device plugin" if derived[0].startswith("device") else "GPU Operator"]
        assert reported.get(node.pool, []) == expected, node.pool


def test_the_driver_mode_decides_the_software(example_plans: dict[str, Plan]) -> None:
    plan = example_plans["prod"]
    pools = {p.inputs["agentPoolName"]: p.inputs for p in plan.by_type("azure-native:containerservice:AgentPool")}
    for node in plan_nodes(plan):
        if not node.gpus:
            continue
        [found] = advertisers(plan, admitted(plan, node))
        driver = pools[node.pool]["gpuProfile"]["driver"]
        assert found.startswith("device plugin" if driver == "Install" else "gpu-operator"), node.pool


def test_gpu_agents_run_on_gpu_pools_only(preset_plans: dict[str, Plan], example_plans: dict[str, Plan]) -> None:
    """Device plugin, DCGM exporter and gate fit no system or CPU node, in any state of its life."""
    for name, plan in _all_plans(preset_plans, example_plans).items():
        taint = gate_taint(plan)
        for node in plan_nodes(plan):
            if node.gpus:
                continue
            states = [node, node.with_state({"aksgpu.io/gpu-health": "pending"}, [taint] if taint else [])]
            for daemonset in plan.by_type("kubernetes:apps/v1:DaemonSet"):
                assert not any(fits(_pod_spec(daemonset), state) for state in states), \
                    f"{name}: {daemonset.name} fits {node.pool}"
            for values in operator_values(plan):
                worker = values["node-feature-discovery"]["worker"]
                assert not fits({"tolerations": worker["tolerations"], "affinity": worker["affinity"]}, node), \
                    f"{name}: the operator's node feature discovery worker fits {node.pool}"


def test_no_gpu_is_advertised_before_the_gate_has_passed_the_node(preset_plans: dict[str, Plan]) -> None:
    """A new GPU node: no GPU advertised until its verdict, whichever component would advertise
    them; the gate's taint (a cluster-autoscaler startup taint) comes from a pod that needs no
    GPU runtime, so it can run before the GPU Operator has installed anything."""
    for name, plan in preset_plans.items():
        taint = gate_taint(plan)
        assert taint and taint.startswith(STARTUP_TAINT_PREFIX), f"{name}: the gate uses a startup taint"
        gates = [r for r in plan.by_type("kubernetes:apps/v1:DaemonSet") if r.inputs["metadata"]["name"].startswith(
            "aksgpu-gpu-gate")]
        for node in plan_nodes(plan):
            if not node.gpus:
                continue
            first = [g for g in gates if fits(_pod_spec(g), node)]
            assert len(first) == 1, f"{name}: exactly one gate DaemonSet takes a new {node.pool} node"
            assert "runtimeClassName" not in _pod_spec(first[0]), "the first step needs no GPU runtime"
            assert _pod_spec(first[0])["initContainers"][0]["name"] == "pending"
            pending_args = _pod_spec(first[0])["initContainers"][0]["command"]
            pending = node.with_state({"aksgpu.io/gpu-health": "pending", **(
                {"nvidia.com/gpu.deploy.device-plugin": "false"} if "--hold-operands" in pending_args else {})},
                [taint])
            # aksgpu's device plugin waits for a verdict; the GPU Operator's is off from the node's
            # first label on: its pool creates it with the switches "false" (every interleaving with
            # the operator's labeller and driver manager: tests/test_gpu_node_startup.py).
            assert not any(fits(spec, node) for spec in device_plugins(plan)), f"{name}: on a new {node.pool} node"
            assert advertisers(plan, node) == [], f"{name}: GPUs advertised on a new {node.pool} node"
            assert advertisers(plan, pending) == [], f"{name}: GPUs advertised on {node.pool} under check"
            checks = [g for g in gates if fits(_pod_spec(g), pending) and any(
                c["name"] == "check" for c in _pod_spec(g)["initContainers"])]
            assert len(checks) == 1, f"{name}: one check runs on a pending {node.pool} node"
            passed = node.with_state(passed_labels(node))
            assert len(advertisers(plan, passed)) == 1
            assert not any(fits(_pod_spec(g), passed) for g in gates), "a decided node leaves the gate"


def test_without_the_gate_the_device_plugin_needs_no_gate_label() -> None:
    plan = shared_plan(edit(base_spec(), "gpuHealth.gate", {"enabled": False}))
    assert gate_taint(plan) is None
    [node] = [n for n in plan_nodes(plan) if n.gpus]
    assert len(advertisers(plan, node)) == 1


def test_the_device_plugin_is_nvidias_manifest_placed_on_the_pools() -> None:
    upstream = yaml.safe_load(
        (DATA / "device-plugin" / "nvidia-device-plugin.yml").read_text())["spec"]["template"]["spec"]
    plan = shared_plan(base_spec())
    [ours] = device_plugins(plan)
    [container], [theirs] = ours["containers"], upstream["containers"]
    assert container["image"].partition("@")[0] == theirs["image"], \
        "the pinned default is the version whose manifest is stored"
    assert container["securityContext"] == theirs["securityContext"]
    assert container["volumeMounts"][0]["mountPath"] == theirs["volumeMounts"][0]["mountPath"]
    assert ours["volumes"][0]["hostPath"] == upstream["volumes"][0]["hostPath"]
    assert ours["priorityClassName"] == upstream["priorityClassName"]
    assert {"name": "MIG_STRATEGY", "value": "none"} in container["env"]
    mig = device_plugins(shared_plan(edit(base_spec(), "nodePools.0.gpu", {"migProfile": "MIG3g"})))[0]
    assert {"name": "MIG_STRATEGY", "value": "single"} in mig["containers"][0]["env"]


def test_a_version_in_the_spec_reaches_the_image_and_the_chart() -> None:
    spec = edit(edit(base_spec(), "gpuSoftware.devicePlugin.version", "v0.19.3"),
                "nodePools.1", {"name": "h100", "kind": "gpu", "vmSize": "Standard_ND96isr_H100_v5", "zones": ["1"],
                                "minCount": 0, "maxCount": 2, "gpu": {"driver": "None"}})
    spec = edit(spec, "gpuSoftware.gpuOperator", {"chartVersion": "v25.10.1", "driverVersion": "580.105.08"})
    plan = shared_plan(spec)
    assert device_plugins(plan)[0]["containers"][0]["image"] == "nvcr.io/nvidia/k8s-device-plugin:v0.19.3"
    [release] = [r for r in plan.by_type("kubernetes:helm.sh/v3:Release") if r.inputs["chart"] == "gpu-operator"]
    assert release.inputs["version"] == "v25.10.1"
    assert release.inputs["values"]["driver"] == {"enabled": True, "version": "580.105.08"}
    assert release.inputs["repositoryOpts"] == {"repo": "https://helm.ngc.nvidia.com/nvidia"}


def test_amd_gpus_are_refused_with_the_fix_named() -> None:
    spec = edit(base_spec(), "nodePools.0", {"name": "mi300x", "kind": "gpu", "vmSize": "Standard_ND96isr_MI300X_v5",
                                            "zones": ["1"], "minCount": 0, "maxCount": 2, "gpu": {"driver": "None"}})
    with pytest.raises(SpecError) as error:
        parse_cluster_spec(spec)
    text = str(error.value)
    assert 'nodePools[0].vmSize = "Standard_ND96isr_MI300X_v5"' in text and "AMD GPU Operator" in text
    assert "inCluster.enabled: false" in text
    _, warnings = parse_cluster_spec(edit(spec, "inCluster.enabled", False))
    assert any(w.path == "inCluster.enabled" for w in warnings), "no GPU software at all is a warning"


def test_without_the_in_cluster_layer_no_kubernetes_object_is_declared() -> None:
    plan = shared_plan(edit(base_spec(), "inCluster.enabled", False))
    assert not [r for r in plan.resources if r.type.startswith(("kubernetes:", "pulumi:providers:kubernetes"))]
