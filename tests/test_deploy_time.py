"""The deploy-time estimate (aksgpu/preflight): the duration table, the schedule over the plan's
waits, the critical path, ties, the node pool orderings, and what plan, plan --json and the
pull-request summary show."""

from __future__ import annotations

import ast
import json
import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from aksgpu.plan.planner import Plan
from aksgpu.plan.report import plan_document, render_text
from aksgpu.plan.summary import EnvironmentResult, summary_markdown
from aksgpu import catalog
from aksgpu.plan import critical_path, deploy_time, pool_ordering
from tests.helpers import REPO, base_spec, shared_plan

TABLE = catalog.load("deploy_durations")
TYPES = TABLE["types"]
CLUSTER = "azure-native:containerservice:ManagedCluster"
POOL = "azure-native:containerservice:AgentPool"
GROUP = "azure-native:resources:ResourceGroup"
SUBNET = "azure-native:network:Subnet"


@dataclass
class Res:
    """A stand-in for a planned resource: what the preflight package reads."""

    name: str
    type: str
    dependencies: list[str] = field(default_factory=list)
    inputs: dict[str, Any] = field(default_factory=dict)
    parent: str | None = None
    custom: bool = True
    provider: str | None = None

    @property
    def urn(self) -> str:
        return f"urn:pulumi:test::p::{self.type}::{self.name}"


@dataclass
class FakePlan:
    resources: list[Res]


def _seconds(key: str) -> int:
    return TYPES[key]["seconds"]


def _cpu_pool(name: str, *after: Res, subnet: str = "/subscriptions/s/subnets/nodes") -> Res:
    return Res(name, POOL, [r.urn for r in after],
               {"count": 1, "vmSize": "Standard_D8ds_v5", "vnetSubnetID": subnet})


def _gpu_pool(name: str, *after: Res, subnet: str = "/subscriptions/s/subnets/gpu") -> Res:
    return Res(name, POOL, [r.urn for r in after],
               {"count": 1, "vmSize": "Standard_NC24ads_A100_v4", "gpuProfile": {"driver": "Install"},
                "vnetSubnetID": subnet})


def _chain() -> list[Res]:
    group = Res("rg", GROUP)
    cluster = Res("aks", CLUSTER, [group.urn])
    cpu = _cpu_pool("cpu", group, cluster)
    gpu = _gpu_pool("gpu", group, cluster, cpu)
    return [group, cluster, cpu, gpu]


# --- the table ---------------------------------------------------------------------------------

def _entries() -> list[tuple[str, dict[str, Any]]]:
    return ([("default", TABLE["default"])] + [(f"prefix {k}", v) for k, v in TABLE["prefixes"].items()]
            + list(TYPES.items()))


@pytest.mark.parametrize(("key", "entry"), _entries(), ids=[key for key, _ in _entries()])
def test_every_duration_is_positive_and_sourced_or_an_assumption_with_a_reason(key: str, entry: dict) -> None:
    assert isinstance(entry["seconds"], int) and entry["seconds"] > 0
    if entry.get("assumption"):
        assert len(entry.get("reason", "")) > 20, f"{key}: an assumption says why"
    else:
        assert len(entry.get("source", "")) > 20 and entry.get("date"), f"{key}: a figure names its source and date"
    assert entry.get("low", entry["seconds"]) <= entry["seconds"] <= entry.get("high", entry["seconds"])
    assert entry.get("timeout", entry.get("high", entry["seconds"])) >= entry.get("high", entry["seconds"])


def test_the_engine_assumption_and_implicit_waits_are_sourced() -> None:
    assert TABLE["engine"]["parallel"] == "unbounded" and "Defaults to unbounded" in TABLE["engine"]["source"]
    for type_, wait in TABLE["implicitWaits"].items():
        assert wait["waitsFor"] and len(wait["reason"]) > 20, type_


def test_variants_pick_the_pool_and_release_figures() -> None:
    assert critical_path.duration_key(_cpu_pool("cpu")) == POOL
    assert critical_path.duration_key(_gpu_pool("gpu")) == f"{POOL}#gpuDriver"
    empty = _gpu_pool("gpu0")
    empty.inputs["count"] = 0
    assert critical_path.duration_key(empty) == f"{POOL}#noNodes"
    own_driver = _gpu_pool("h100")
    own_driver.inputs["gpuProfile"] = {"driver": "None"}
    assert critical_path.duration_key(own_driver) == POOL, "no managed driver: boots like any pool"
    release = Res("op", "kubernetes:helm.sh/v3:Release", inputs={"skipAwait": True})
    assert critical_path.duration_of(release).key == "kubernetes:helm.sh/v3:Release#skipAwait"
    config_map = critical_path.duration_of(Res("cm", "kubernetes:core/v1:ConfigMap"))
    assert config_map == critical_path.Duration("kubernetes:*", TABLE["prefixes"]["kubernetes:"]["seconds"], True)
    assert critical_path.duration_of(Res("x", "azure-native:foo:Bar")).key == "default"


# --- the schedule ------------------------------------------------------------------------------

def test_a_chain_adds_up_and_is_the_critical_path() -> None:
    resources = _chain()
    sched = critical_path.schedule(resources, critical_path.waits_for(resources))
    expected = _seconds(GROUP) + _seconds(CLUSTER) + _seconds(POOL) + _seconds(f"{POOL}#gpuDriver")
    assert sched.total == expected == 5 + 600 + 250 + 480
    assert [step.name for step in sched.critical_path] == ["rg", "aks", "cpu", "gpu"]
    assert [step.start for step in sched.critical_path] == [0, 5, 605, 855]
    assert sched.serial == expected


def test_independent_resources_run_in_parallel_and_the_longest_branch_wins() -> None:
    group = Res("rg", GROUP)
    vnet = Res("vnet", "azure-native:network:VirtualNetwork", [group.urn])
    vault = Res("vault", "azure-native:keyvault:Vault", [group.urn])
    cluster = Res("aks", CLUSTER, [vnet.urn, vault.urn])
    sched = critical_path.schedule([group, vnet, vault, cluster],
                                   critical_path.waits_for([group, vnet, vault, cluster]))
    assert sched.total == _seconds(GROUP) + max(_seconds(vnet.type), _seconds(vault.type)) + _seconds(CLUSTER)
    assert [step.name for step in sched.critical_path] == ["rg", "vault", "aks"]


def test_ties_go_to_the_smaller_urn_whatever_the_input_order() -> None:
    group = Res("rg", GROUP)
    twins = [Res(name, "azure-native:network:Subnet", [group.urn]) for name in ("b-subnet", "a-subnet")]
    ends = [Res(name, "azure-native:network:NetworkSecurityGroup", [t.urn for t in twins]) for name in ("z", "y")]
    resources = [group, *twins, *ends]
    paths = set()
    for seed in range(5):
        random.Random(seed).shuffle(resources)
        sched = critical_path.schedule(resources, critical_path.waits_for(resources))
        paths.add(tuple(step.name for step in sched.critical_path))
    assert paths == {("rg", "a-subnet", "y")}


def test_provider_custom_parent_and_implicit_waits_count_but_component_parents_do_not() -> None:
    component = Res("comp", "aksgpu:index:Thing", custom=False)
    group = Res("rg", GROUP, parent=component.urn)
    cluster = Res("aks", CLUSTER, [group.urn], parent=component.urn)
    provider = Res("k8s", "pulumi:providers:kubernetes", parent=component.urn)
    namespace = Res("ns", "kubernetes:core/v1:Namespace", provider=f"{provider.urn}")
    child = Res("child", "azure-native:keyvault:Key", parent=group.urn)
    on_component = Res("after-comp", "azure-native:network:Subnet", [component.urn])
    resources = [component, group, cluster, provider, namespace, child, on_component]
    graph = critical_path.waits_for(resources)
    assert graph[group.urn] == set() and component.urn not in graph
    assert graph[provider.urn] == {cluster.urn}, "the kubeconfig comes from the cluster (implicitWaits)"
    assert graph[namespace.urn] == {provider.urn}
    assert graph[child.urn] == {group.urn}
    assert graph[on_component.urn] == {group.urn, cluster.urn, provider.urn, child.urn}, \
        "a component stands for its custom descendants"


def test_a_cycle_is_an_error_not_a_wrong_number() -> None:
    a = Res("a", GROUP, ["urn:pulumi:test::p::azure-native:resources:ResourceGroup::b"])
    b = Res("b", GROUP, [a.urn])
    with pytest.raises(ValueError, match="cycle"):
        critical_path.schedule([a, b], critical_path.waits_for([a, b]))


def test_simulated_orderings_on_a_hand_built_graph() -> None:
    group, cluster, cpu, gpu = _chain()
    cpu2 = _cpu_pool("cpu2", group, cluster, gpu)
    resources = [group, cluster, cpu, gpu, cpu2]
    graph = critical_path.waits_for(resources)
    assert pool_ordering.declared_ordering(resources, graph) == "chained"
    per_subnet = pool_ordering.reorder(resources, graph, "perSubnet")
    assert per_subnet[gpu.urn] == {group.urn, cluster.urn}
    assert per_subnet[cpu2.urn] == {group.urn, cluster.urn, cpu.urn}
    assert pool_ordering.declared_ordering(resources, per_subnet) == "perSubnet"
    rechained = pool_ordering.reorder(resources, per_subnet, "chained")
    assert pool_ordering.declared_ordering(resources, rechained) == "chained"
    # One chain again: each subnet's own order kept, across subnets URN order (cpu, cpu2, gpu).
    assert rechained[cpu2.urn] == {group.urn, cluster.urn, cpu.urn}
    assert rechained[gpu.urn] == {group.urn, cluster.urn, cpu2.urn}
    estimate = deploy_time.estimate(FakePlan(resources))
    base = _seconds(GROUP) + _seconds(CLUSTER)
    assert estimate.schedule.total == base + 2 * _seconds(POOL) + _seconds(f"{POOL}#gpuDriver")
    assert estimate.alternative_total == base + max(2 * _seconds(POOL), _seconds(f"{POOL}#gpuDriver"))


# --- real plans --------------------------------------------------------------------------------

def _two_subnet_spec(order: str) -> dict[str, Any]:
    spec = base_spec()
    spec["network"] = {"vnet": {"mode": "create", "addressSpace": ["10.224.0.0/12"], "subnets": [
        {"name": "nodes", "cidr": "10.224.0.0/16"}, {"name": "gpu", "cidr": "10.225.0.0/16"}]}}
    spec["nodePoolOrder"] = order
    spec["nodePools"] = [
        {"name": "cpu", "vmSize": "Standard_D8ds_v5", "count": 1},
        {"name": "gpu", "kind": "gpu", "vmSize": "Standard_NC24ads_A100_v4", "count": 1, "subnet": "gpu"},
        {"name": "cpu2", "vmSize": "Standard_D8ds_v5", "count": 1},
    ]
    return spec


@pytest.fixture(scope="module")
def ordered_plans() -> dict[str, Plan]:
    return {order: shared_plan(_two_subnet_spec(order)) for order in ("chained", "perSubnet")}


def test_chained_and_per_subnet_plans_and_their_simulations_agree(ordered_plans: dict[str, Plan]) -> None:
    chained = deploy_time.estimate(ordered_plans["chained"])
    per_subnet = deploy_time.estimate(ordered_plans["perSubnet"])
    assert chained.ordering == {"declared": "chained", "alternative": "perSubnet", "pools": 3, "subnets": 2}
    assert per_subnet.ordering["declared"] == "perSubnet"
    # Chained: cpu, gpu, cpu2 one after another. perSubnet: the gpu pool beside the two cpu pools.
    pools = {step.name.rsplit("-", 1)[-1]: step for step in chained.schedule.steps.values() if step.type == POOL}
    assert [pools[n].duration.key for n in ("cpu", "gpu", "cpu2")] == [POOL, f"{POOL}#gpuDriver", POOL]
    saved = _seconds(f"{POOL}#gpuDriver") + 2 * _seconds(POOL) - max(2 * _seconds(POOL), _seconds(f"{POOL}#gpuDriver"))
    assert chained.schedule.total - per_subnet.schedule.total == saved
    assert chained.alternative_total == per_subnet.schedule.total, "simulated perSubnet = planned perSubnet"
    assert per_subnet.alternative_total == chained.schedule.total, "simulated chained = planned chained"


def test_one_subnet_has_no_alternative() -> None:
    estimate = deploy_time.estimate(shared_plan(base_spec()))
    assert estimate.ordering["declared"] is None and estimate.alternative_total is None
    assert "changes nothing" in deploy_time.ordering_text(deploy_time.document(estimate))


def test_example_estimates_put_the_cluster_on_the_critical_path(example_plans: dict[str, Plan]) -> None:
    for env, plan in example_plans.items():
        doc = deploy_time.document(deploy_time.estimate(plan))
        path = doc["criticalPath"]
        assert doc["totalSeconds"] >= _seconds(CLUSTER), env
        assert CLUSTER in [step["type"] for step in path], env
        assert path[0]["startSeconds"] == 0 and path[-1]["finishSeconds"] == doc["totalSeconds"]
        for before, after in zip(path, path[1:], strict=False):
            assert after["startSeconds"] == before["finishSeconds"]
        assert doc["serialSeconds"] == sum(row["seconds"] for row in doc["byType"].values())
    prod = deploy_time.document(deploy_time.estimate(example_plans["prod"]))
    assert prod["nodePoolOrdering"]["declared"] == "chained"
    assert prod["nodePoolOrdering"]["alternativeTotalSeconds"] < prod["totalSeconds"]


def test_plan_json_text_and_summary_carry_the_estimate(example_plans: dict[str, Plan]) -> None:
    plan = example_plans["prod"]
    document = json.loads(json.dumps(plan_document(plan, [])))
    estimate = document["deployTime"]
    assert set(estimate) == {"totalSeconds", "totalMinutes", "serialSeconds", "parallel", "criticalPath",
                             "nodePoolOrdering", "assumedTypes", "criticalPathAssumedSteps", "byType", "table"}
    assert set(estimate["criticalPath"][0]) == {"type", "name", "urn", "durationKey", "seconds", "startSeconds",
                                                "finishSeconds", "assumed"}
    assert set(estimate["nodePoolOrdering"]) == {"declared", "alternative", "pools", "subnets",
                                                 "alternativeTotalSeconds"}
    assert (REPO / estimate["table"]).is_file()
    assert estimate["assumedTypes"] and estimate["criticalPathAssumedSteps"] > 0
    text = render_text(plan, [])
    assert "Deploy time (first `pulumi up`, estimate): about " in text
    assert "Rests on assumed figures" in text and " *\n" in text and "perSubnet would give" in text
    result = EnvironmentResult("prod", "stacks/Pulumi.prod.yaml", None, deploy_time=estimate)
    markdown = summary_markdown([result])
    assert "**Deploy time (estimate)**" in markdown and "critical path ResourceGroup → " in markdown


def test_the_same_plan_gives_the_same_estimate(example_plans: dict[str, Plan]) -> None:
    plan = example_plans["prod"]
    first = json.dumps(deploy_time.document(deploy_time.estimate(plan)))
    shuffled = list(plan.resources)
    random.Random(7).shuffle(shuffled)
    assert json.dumps(deploy_time.document(deploy_time.estimate(FakePlan(shuffled)))) == first
    assert json.dumps(deploy_time.document(deploy_time.estimate(plan))) == first


@pytest.mark.parametrize("module", sorted((REPO / "aksgpu" / "preflight").glob("*.py")), ids=lambda p: p.name)
def test_preflight_modules_are_short_and_know_nothing_of_the_cli(module: Any) -> None:
    text = module.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 420
    tree = ast.parse(text)
    imported = [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    imported += [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    assert not [name for name in imported if name.startswith("aksgpu.cli")]


def test_the_readme_shows_the_prod_estimate_as_plan_prints_it(example_plans: dict[str, Plan]) -> None:
    from tests.docs_pages import docs_page
    from tests.docs_pages import section as docs_section

    section = docs_section(docs_page("guides/estimates.md"), "Deploy-time estimate")
    printed = "\n".join(deploy_time.text_lines(deploy_time.document(deploy_time.estimate(example_plans["prod"]))))
    assert f"```\n{printed}\n```" in section, "paste the section of `aksgpu plan prod` again"
