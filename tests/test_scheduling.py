"""Who gets GPUs and when: priority classes, balloons, the spot-first priority expander, Kueue's
flavors and queues, and the InfiniBand rules that keep one job in one fabric."""

from __future__ import annotations

import re

import pytest
import yaml

from aksgpu.spec import SpecError, parse_cluster_spec
from aksgpu.spec.base import quantity
from tests.helpers import (
    base_spec,
    edit,
    find_object,
    kubernetes_manifests,
    preset_spec,
    shared_plan,
)
from tests.oracles.scheduling import fits, plan_nodes

# kubernetes/autoscaler FAQ ("How can I configure overprovisioning"): -10 is the lowest priority
# whose pending pods still make the cluster autoscaler scale up.
EXPENDABLE_CUTOFF = -10


def spot_pair_spec() -> dict:
    spec = edit(base_spec(), "controlPlane.autoscaler.expander", "priority")
    spec = edit(spec, "nodePools.1", {"name": "a100spot", "kind": "gpu", "vmSize": "Standard_NC24ads_A100_v4",
                                      "priority": "spot", "zones": ["1", "2"], "perZone": True,
                                      "minCount": 0, "maxCount": 3})
    return edit(spec, "nodePools.0.balloonNodes", 2)


def test_priority_classes_order_jobs_above_default_above_balloons() -> None:
    plan = shared_plan(base_spec())
    classes = {m["metadata"]["name"]: m for m in kubernetes_manifests(plan) if m["kind"] == "PriorityClass"}
    assert classes["aksgpu-gpu-job"]["value"] > classes["aksgpu-default"]["value"] == 0
    assert classes["aksgpu-balloon"]["value"] == EXPENDABLE_CUTOFF, "balloons still trigger scale-ups"
    assert classes["aksgpu-balloon"]["preemptionPolicy"] == "Never"
    assert [n for n, c in classes.items() if c.get("globalDefault")] == ["aksgpu-default"]


def test_balloons_hold_whole_nodes_of_their_pool() -> None:
    plan = shared_plan(spot_pair_spec())
    balloon = find_object(plan, "Deployment", "aksgpu-balloon-a100")
    assert balloon["spec"]["replicas"] == 2
    assert balloon["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true", "up does not wait for scale-ups"
    pod = balloon["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "aksgpu-balloon" and pod["terminationGracePeriodSeconds"] == 0
    [container] = pod["containers"]
    assert container["image"].startswith("registry.k8s.io/pause:")
    resources = container["resources"]
    assert resources["requests"]["nvidia.com/gpu"] == "1" == resources["limits"]["nvidia.com/gpu"]
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["topologyKey"] == "kubernetes.io/hostname", "one balloon per node"
    placed = [node.pool for node in plan_nodes(plan)
              if fits(pod, node.with_state({"aksgpu.io/gpu-health": "passed"}))]
    assert placed == ["a100"], "balloons fit their own pool only"
    cpu = find_object(shared_plan(edit(base_spec(), "nodePools.1", {
        "name": "cpu", "vmSize": "Standard_D16ds_v5", "minCount": 1, "maxCount": 5, "balloonNodes": 1})),
        "Deployment", "aksgpu-balloon-cpu")
    requests = cpu["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
    assert requests == {"cpu": "12000m", "memory": "32768Mi"}, "most of a 16 vCPU, 64 GiB node"


def test_the_priority_expander_prefers_spot_and_names_every_scale_set() -> None:
    plan = shared_plan(spot_pair_spec())
    config = find_object(plan, "ConfigMap", "cluster-autoscaler-priority-expander")
    assert config["metadata"]["namespace"] == "kube-system"
    priorities = yaml.safe_load(config["data"]["priorities"])
    assert all(isinstance(level, int) and level > 0 for level in priorities), "positive integers (expander readme)"
    # AKS names a pool's scale set aks-<pool>-<number>-vmss (cluster-autoscaler logs, Azure/AKS#2359).
    scale_sets = {"aks-a100-12345678-vmss", "aks-a100spot1-29141059-vmss", "aks-a100spot2-29141059-vmss"}

    def level(scale_set: str) -> list[int]:
        return [p for p, patterns in priorities.items() if any(re.fullmatch(x, scale_set) for x in patterns)]

    assert level("aks-a100spot1-29141059-vmss") == level("aks-a100spot2-29141059-vmss") == [max(priorities)]
    assert level("aks-a100-12345678-vmss") == [min(priorities)] and max(priorities) > min(priorities)
    assert all(len(level(s)) == 1 for s in scale_sets), "each scale set matches exactly one priority"
    assert level("aks-a1000-12345678-vmss") == [] and level("aks-a100spot10-1-vmss") == [], "no prefix matches"


def test_expander_rules() -> None:
    with pytest.raises(SpecError, match=r"controlPlane.autoscaler.expander = \"priority\".*ConfigMap"):
        parse_cluster_spec(edit(spot_pair_spec(), "inCluster.enabled", False))
    spec = edit(spot_pair_spec(), "controlPlane.autoscaler.expander", "least-waste")
    _, warnings = parse_cluster_spec(spec)
    [warning] = [w for w in warnings if w.path == "controlPlane.autoscaler.expander"]
    assert "a100spot (spot) and a100 (on-demand)" in warning.rule
    assert not [m for m in kubernetes_manifests(shared_plan(spec)) if m["kind"] == "ConfigMap"
                and m["metadata"]["name"] == "cluster-autoscaler-priority-expander"]


@pytest.mark.parametrize(("edits", "message"), [
    ([("nodePools.0.balloonNodes", 9)], "holds at most 4 nodes"),
    ([("nodePools.0.balloonNodes", 1), ("inCluster.enabled", False)], "balloons are pods"),
])
def test_balloon_rules(edits: list, message: str) -> None:
    spec = base_spec()
    for path, value in edits:
        spec = edit(spec, path, value)
    with pytest.raises(SpecError) as error:
        parse_cluster_spec(spec)
    assert message in str(error.value) and "nodePools[0].balloonNodes" in str(error.value)


# --- Kueue ------------------------------------------------------------------------------------


def test_fleet_kueue_flavors_queues_and_local_queues() -> None:
    plan = shared_plan(preset_spec("fleet"))
    objects = kubernetes_manifests(plan)
    flavors = {m["metadata"]["name"]: m["spec"] for m in objects if m["kind"] == "ResourceFlavor"}
    # One flavor per InfiniBand pool (a gang never spans two fabrics), one per shape otherwise.
    assert {"nd96isr-h100-v5-ondemand-research-h100a", "nd96isr-h100-v5-ondemand-research-h100b",
            "nd96isr-h200-v5-ondemand-research-h200", "nc24ads-a100-v4-ondemand-serving",
            "nc24ads-a100-v4-spot-serving"} == set(flavors)
    h100a = flavors["nd96isr-h100-v5-ondemand-research-h100a"]
    assert h100a["nodeLabels"]["kubernetes.azure.com/agentpool"] == "h100a"
    assert {"key": "aksgpu.io/team", "operator": "Equal", "value": "research",
            "effect": "NoSchedule"} in h100a["tolerations"]
    spot = flavors["nc24ads-a100-v4-spot-serving"]
    assert spot["nodeLabels"]["kubernetes.azure.com/scalesetpriority"] == "spot"
    assert any(t["key"] == "kubernetes.azure.com/scalesetpriority" for t in spot["tolerations"])
    nodes = {node.pool: node.with_state({"aksgpu.io/gpu-health": "passed"}) for node in plan_nodes(plan)}
    for name, flavor in flavors.items():
        pod = {"nodeSelector": flavor["nodeLabels"], "tolerations": flavor["tolerations"]}
        fitting = {pool for pool, node in nodes.items() if fits(pod, node)}
        assert fitting, f"{name} admits pods that fit no node"
        if "research-h100a" in name:
            assert fitting == {"h100a"}
    # aksgpu-fabric-acceptance: the InfiniBand acceptance runs' own queue (tests/test_fabric_acceptance.py).
    queues = {m["metadata"]["name"]: m["spec"] for m in objects if m["kind"] == "ClusterQueue"
              and m["metadata"]["name"] != "aksgpu-fabric-acceptance"}
    assert set(queues) == {"research-8gpu", "serving-1gpu"}
    research = queues["research-8gpu"]["resourceGroups"][0]
    assert research["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu"]
    quotas = {f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]} for f in research["flavors"]}
    assert quotas["nd96isr-h100-v5-ondemand-research-h100a"]["nvidia.com/gpu"] == str(100 * 8)
    assert not any("serving" in name for name in quotas), "a team's queue has its own and shared flavors only"
    serving = [f["name"] for f in queues["serving-1gpu"]["resourceGroups"][0]["flavors"]]
    assert serving.index("nc24ads-a100-v4-ondemand-serving") < serving.index("nc24ads-a100-v4-spot-serving")
    local = {(m["metadata"]["namespace"], m["metadata"]["name"], m["spec"]["clusterQueue"])
             for m in objects if m["kind"] == "LocalQueue" and m["metadata"]["namespace"] != "aksgpu-system"}
    assert local == {("research", "gpu-8", "research-8gpu"), ("serving", "gpu-1", "serving-1gpu")}
    assert queues["research-8gpu"]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "research"}}


def test_a_queue_only_holds_nodes_that_fit_its_pods() -> None:
    """Kueue assigns a flavor by quota alone: a queue per node shape keeps an 8-GPU pod off 1-GPU nodes."""
    plan = shared_plan(edit(preset_spec("fleet"), "access.teams", [{"name": "research"}, {"name": "serving"},
                                                                 {"name": "shared-user"}]))
    objects = kubernetes_manifests(plan)
    flavors = {m["metadata"]["name"]: m["spec"] for m in objects if m["kind"] == "ResourceFlavor"}
    nodes = {node.pool: node.with_state({"aksgpu.io/gpu-health": "passed"}) for node in plan_nodes(plan)}
    for queue in (m for m in objects if m["kind"] == "ClusterQueue"):
        # The acceptance's queue takes whole InfiniBand nodes (tests/test_fabric_acceptance.py).
        gpus = 8 if queue["metadata"]["name"] == "aksgpu-fabric-acceptance" else \
            int(queue["metadata"]["name"].rsplit("-", 1)[1].removesuffix("gpu"))
        for flavor in queue["spec"]["resourceGroups"][0]["flavors"]:
            spec = flavors[flavor["name"]]
            pod = {"nodeSelector": spec["nodeLabels"], "tolerations": spec["tolerations"]}
            assert all(node.gpus == gpus for node in nodes.values() if fits(pod, node)), queue["metadata"]["name"]


def _gpu_quota_sum(queues: list[dict]) -> int:
    """The most GPUs the queues can admit: nominal quota plus what they may borrow in the cohort."""
    return sum(int(r["nominalQuota"]) + int(r.get("borrowingLimit", "0")) for q in queues
               for f in q["spec"]["resourceGroups"][0]["flavors"] for r in f["resources"]
               if r["name"] == "nvidia.com/gpu")


def test_a_teams_queues_together_admit_no_more_than_its_quota() -> None:
    spec = preset_spec("fleet", access={"teams": [{"name": "research", "quota": {"gpus": 64, "cpu": "2000",
                                                                                "memory": "16Ti"}},
                                                  {"name": "serving"}]})
    spec = edit(spec, "nodePools.6", {"name": "shared", "kind": "gpu", "vmSize": "Standard_NC24ads_A100_v4",
                                      "zones": ["1"], "minCount": 0, "maxCount": 10})
    objects = kubernetes_manifests(shared_plan(spec))
    research = [m for m in objects if m["kind"] == "ClusterQueue" and m["metadata"]["name"].startswith("research-")]
    assert {q["metadata"]["name"] for q in research} == {"research-8gpu", "research-1gpu"}
    assert _gpu_quota_sum(research) == 64, "the team's own pools first, the shared A100s get the rest (none)"
    quota = next(m for m in objects if m["kind"] == "ResourceQuota" and m["metadata"]["namespace"] == "research"
                 and m["metadata"]["name"] == "aksgpu-quota")
    assert int(quota["spec"]["hard"]["requests.nvidia.com/gpu"]) == 64
    cpu = sum(quantity(r["nominalQuota"]) for q in research for f in q["spec"]["resourceGroups"][0]["flavors"]
              for r in f["resources"] if r["name"] == "cpu")
    assert 1999 <= cpu <= 2000, "CPU follows the GPUs, rounded down to millicores"
    serving = [m for m in objects if m["kind"] == "ClusterQueue" and m["metadata"]["name"].startswith("serving-")]
    # serving's default quota is its own A100s (1,200 on-demand + 900 spot): the shared pool gets none.
    assert _gpu_quota_sum(serving) == 1200 + 900
    shared = [f for q in serving for f in q["spec"]["resourceGroups"][0]["flavors"] if "ondemand" in f["name"]
              and "serving" not in f["name"]]
    assert [next(r["nominalQuota"] for r in f["resources"] if r["name"] == "nvidia.com/gpu") for f in shared] == ["0"]


def test_every_flavor_with_gpus_also_gets_cpu_and_memory(example_plans: dict) -> None:
    """prod's research team: its H100s and 8 of the shared A100s under quota cpu 1024, memory 8Ti."""
    queues = [m for m in kubernetes_manifests(example_plans["prod"]) if m["kind"] == "ClusterQueue"]
    checked = 0
    for queue in queues:
        for flavor in queue["spec"]["resourceGroups"][0]["flavors"]:
            quota = {r["name"]: quantity(r["nominalQuota"]) for r in flavor["resources"]}
            if quota["nvidia.com/gpu"] > 0:
                assert quota["cpu"] > 0 and quota["memory"] > 0, flavor["name"]
                checked += 1
    a100 = next(f for q in queues for f in q["spec"]["resourceGroups"][0]["flavors"]
                if f["name"] == "nc24ads-a100-v4-ondemand")
    assert {r["name"]: r["nominalQuota"] for r in a100["resources"]}["nvidia.com/gpu"] == "8"
    assert checked >= 2


def test_kueue_waits_for_pods_ready_and_runs_on_the_system_pool() -> None:
    plan = shared_plan(preset_spec("fleet"))
    [release] = [r for r in plan.by_type("kubernetes:helm.sh/v3:Release") if r.inputs["name"] == "kueue"]
    config = yaml.safe_load(release.inputs["values"]["managerConfig"]["controllerManagerConfigYaml"])
    assert config["waitForPodsReady"]["timeout"] == "30m" and config["waitForPodsReady"]["blockAdmission"] is False
    # The team namespaces carry aksgpu.io/team; aksgpu-system and gpu-operator do not.
    assert config["managedJobsNamespaceSelector"] == {
        "matchExpressions": [{"key": "aksgpu.io/team", "operator": "Exists"}]}
    namespaces = {m["metadata"]["name"]: m["metadata"]["labels"] for m in kubernetes_manifests(plan)
                  if m["kind"] == "Namespace"}
    assert {name for name, labels in namespaces.items() if "aksgpu.io/team" in labels} == {"research", "serving"}
    manager = release.inputs["values"]["controllerManager"]
    assert manager["nodeSelector"] == {"kubernetes.azure.com/mode": "system"}
    queue = next(r for r in plan.resources if r.type.endswith(":ClusterQueue"))
    assert release.urn in queue.dependencies, "Kueue's objects wait for its CRDs"


def test_kueue_needs_teams() -> None:
    with pytest.raises(SpecError, match="no team is declared"):
        parse_cluster_spec(edit(base_spec(), "gangScheduling.enabled", True))


# --- InfiniBand -------------------------------------------------------------------------------


def _ib_pool(name: str, zones: list[str], **extra: object) -> dict:
    return {"name": name, "kind": "gpu", "vmSize": "Standard_ND96isr_H100_v5", "zones": zones, "minCount": 0,
            "maxCount": 8, "gpu": {"driver": "None"}, **extra}


def test_an_infiniband_pool_over_several_zones_is_refused() -> None:
    with pytest.raises(SpecError) as error:
        parse_cluster_spec(edit(base_spec(), "nodePools.0", _ib_pool("h100", ["1", "2"])))
    assert 'nodePools[0].zones = ["1", "2"]' in str(error.value) and "one zone" in str(error.value)


def test_look_alike_infiniband_pools_are_refused_unless_told_apart() -> None:
    spec = edit(edit(base_spec(), "nodePools.0", _ib_pool("h100a", ["1"])), "nodePools.1", _ib_pool("h100b", ["2"]))
    with pytest.raises(SpecError) as error:
        parse_cluster_spec(spec)
    assert 'AKS pool "h100b" looks like "h100a"' in str(error.value) and "aksgpu.io/ib-domain" in str(error.value)
    parse_cluster_spec(edit(spec, "nodePools.1.labels", {"aksgpu.io/ib-domain": "h100b"}))
    parse_cluster_spec(edit(spec, "controlPlane.autoscaler.balanceSimilarNodeGroups", False))
    per_zone = edit(base_spec(), "nodePools.0", _ib_pool("h100", ["1", "2"], perZone=True))
    with pytest.raises(SpecError, match="set perZone: false and declare one pool per zone"):
        parse_cluster_spec(per_zone)
