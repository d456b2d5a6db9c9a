"""Preflight in the plan: the vCPU quota per family and region, and the addresses each range
gives at full scale (aksgpu/preflight/quota.py, spec/network.py address_plan)."""

from __future__ import annotations

import json
import math
import re

import jmespath
import pytest
from typer.testing import CliRunner

from aksgpu.cli.app import app
from aksgpu import catalog
from aksgpu.spec import parse_cluster_spec
from aksgpu.spec.network import address_plan
from aksgpu.preflight.quota import quota_needs, request_command, usage_command
from tests.helpers import EXAMPLE, base_spec, edit

runner = CliRunner()


def _surged(nodes: int) -> int:
    return nodes + math.ceil(nodes * 10 / 100)  # AKS's default max surge, 10%


def _needs(spec_dict: dict) -> dict:
    spec, _ = parse_cluster_spec(spec_dict)
    return {need.counter: need for need in quota_needs(spec)}


def test_quota_per_family_counts_vcpus_at_min_and_at_full_scale_with_surge() -> None:
    needs = _needs(base_spec())
    gpu, system = catalog.vm_sizes()["Standard_NC24ads_A100_v4"], catalog.vm_sizes()["Standard_D8ds_v5"]
    a100 = needs[gpu.quota_family]
    assert (a100.vcpus_min, a100.vcpus_max) == (0, _surged(4) * gpu.vcpus)
    d8 = needs[system.quota_family]
    assert (d8.vcpus_min, d8.vcpus_max) == (3 * system.vcpus, _surged(3) * system.vcpus)
    assert needs["cores"].vcpus_max == a100.vcpus_max + d8.vcpus_max and "lowPriorityCores" not in needs


def test_spot_pools_count_against_the_regional_spot_counter_without_surge() -> None:
    needs = _needs(edit(base_spec(), "nodePools.0.priority", "spot"))
    gpu = catalog.vm_sizes()["Standard_NC24ads_A100_v4"]
    assert needs["lowPriorityCores"].vcpus_max == 4 * gpu.vcpus
    assert gpu.quota_family not in needs and needs["cores"].sizes == {"Standard_D8ds_v5"}
    assert request_command(needs["lowPriorityCores"]).endswith(f"value={4 * gpu.vcpus} --resource-type lowPriority")


def test_a_size_outside_the_table_is_named_not_counted() -> None:
    needs = _needs(edit(base_spec(), "nodePools.1", {"name": "cpu", "vmSize": "Standard_D16pds_v6", "count": 2,
                                                               "vmSizeNotInCatalog": True}))
    assert needs["cores"].unknown_sizes == {"Standard_D16pds_v6"}


def test_the_usage_command_selects_exactly_the_needed_counters() -> None:
    spec, _ = parse_cluster_spec(base_spec())
    needs = quota_needs(spec)
    command = usage_command(needs)
    query = command.split('--query "', 1)[1].rsplit('"', 1)[0]
    usage = [{"name": {"value": name}, "currentValue": 1, "limit": 10}
             for name in [need.counter for need in needs] + ["standardFSv2Family", "availabilitySets"]]
    assert [row["name"] for row in jmespath.search(query, usage)] == [need.counter for need in needs]
    assert f"-l {spec.location} " in command


def test_the_address_plan_counts_nodes_pods_and_overlay_blocks() -> None:
    vnet = {"mode": "create", "podSubnet": "pods",
            "subnets": [{"name": "nodes", "cidr": "10.224.0.0/24"}, {"name": "pods", "cidr": "10.225.0.0/20"}]}
    spec, _ = parse_cluster_spec(edit(edit(base_spec(), "network.plugin", "azure"), "network.vnet", vnet))
    ranges = {found.name: found for found in address_plan(spec)}
    gpu_pool, system = spec.node_pools[0], spec.system_pool
    nodes_max = _surged(gpu_pool.max_nodes) + _surged(system.max_nodes)
    assert ranges["subnet nodes"].at_max == nodes_max and ranges["subnet nodes"].capacity == 256 - 5
    pods = spec.network.default_max_pods(gpu_pool)
    assert ranges["subnet pods"].at_max == nodes_max * pods and ranges["subnet pods"].holds == "pods"
    assert "pod CIDR" not in ranges  # plugin azure has no overlay range


def test_the_plan_shows_quota_and_addresses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(EXAMPLE)
    text = runner.invoke(app, ["plan", "stacks/Pulumi.prod.yaml"]).output
    document = json.loads(runner.invoke(app, ["plan", "stacks/Pulumi.prod.yaml", "--json"]).output)
    preflight = document["preflight"]
    h100 = next(need for need in preflight["quota"] if need["counter"] == "standardNDSH100v5Family")
    assert h100["vcpusMax"] == _surged(16) * 96 and "--resource-name standardNDSH100v5Family" in h100["requestCommand"]
    assert re.search(rf"standardNDSH100v5Family\s+0 / {h100['vcpusMax']}\s+ND96isr_H100_v5", text)
    pod_cidr = next(found for found in preflight["addresses"] if found["name"] == "pod CIDR")
    assert pod_cidr["capacity"] == 2 ** (24 - 14) and pod_cidr["freeAtMax"] == pod_cidr["capacity"] - pod_cidr["atMax"]
    assert "Addresses (used at min scale" in text and "free at full scale" in text


def test_the_readme_shows_each_presets_quota_and_the_example_addresses_as_computed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.docs_pages import docs_page
    from tests.helpers import preset_spec

    readme = docs_page("guides/estimates.md")
    for preset in ("dev", "inference", "training", "fleet"):
        spec, _ = parse_cluster_spec(preset_spec(preset))
        for need in quota_needs(spec):
            row = f"| `{preset}` | {need.counter} | {need.vcpus_min:,} | {need.vcpus_max:,} |"
            assert row in readme, f"docs quota table is stale: {row}"
    monkeypatch.chdir(EXAMPLE)
    text = runner.invoke(app, ["plan", "stacks/Pulumi.prod.yaml"]).output
    shown = text.split("Addresses (used at min scale")[1].split("\n\n")[0].splitlines()[1:]
    assert shown and all(line.strip() in readme for line in shown), "docs address lines are stale"


def preset_row(preset: str) -> str:
    """A preset's README row: monthly cost at min / typical / max (aksgpu cost) and the first
    `pulumi up` estimate (aksgpu plan), as the commands compute them."""
    from aksgpu.plan import deploy_time
    from aksgpu.preflight.cost import estimate
    from aksgpu.preflight.prices import shipped_table
    from tests.helpers import preset_spec, shared_plan

    spec_dict = preset_spec(preset)
    spec, _ = parse_cluster_spec(spec_dict)
    cost = estimate(spec, shipped_table()).json()
    monthly = cost["total"]["monthly"]
    money = " / ".join(f"${monthly[key]:,.0f}" for key in ("min", "typical", "max"))
    if not cost["total"]["complete"]:
        money += f" (a lower bound: {len(cost['missing'])} price(s) missing)"
    found = deploy_time.document(deploy_time.estimate(shared_plan(spec_dict)))
    other = found["nodePoolOrdering"]["alternativeTotalSeconds"]
    minutes = f"about {round(found['totalSeconds'] / 60)} min"
    if other is not None:
        minutes += f" ({found['nodePoolOrdering']['alternative']}: about {round(other / 60)} min)"
    return f"| `{preset}` | {money} | {minutes} |"


def test_the_readme_shows_each_presets_cost_and_deploy_time_as_computed() -> None:
    from tests.docs_pages import docs_page

    readme = docs_page("guides/estimates.md")
    for preset in ("dev", "inference", "training", "fleet"):
        row = preset_row(preset)
        assert row in readme, f"docs preset table is stale: {row}"


def test_each_zone_of_a_per_zone_pool_surges_and_spot_pools_never_do() -> None:
    per_zone = edit(edit(base_spec(), "nodePools.0.perZone", True), "nodePools.0.zones", ["1", "2", "3"])
    per_zone = edit(per_zone, "nodePools.0.upgrade", {"maxSurge": "1"})
    gpu = catalog.vm_sizes()["Standard_NC24ads_A100_v4"]
    need = _needs(per_zone)[gpu.quota_family]
    assert need.vcpus_max == 3 * (4 + 1) * gpu.vcpus, "maxSurge 1 on each of the three AgentPools"
    spot, _ = parse_cluster_spec(edit(base_spec(), "nodePools.0.priority", "spot"))
    assert spot.node_pools[0].node_range == (0, 4)
    nodes = {found.name: found for found in address_plan(spot)}["pod CIDR"]
    assert nodes.at_max == 4 + _surged(3), "spot nodes without surge, system nodes with"


def test_family_names_with_spaces_are_quoted_and_unknown_families_get_no_command() -> None:
    t4 = edit(base_spec(), "nodePools.0.vmSize", "Standard_NC4as_T4_v3")
    t4 = edit(t4, "nodePools.1", {"name": "cpu", "vmSize": "Standard_D4s_v5", "count": 1})
    needs = _needs(t4)
    import shlex

    command = request_command(needs["Standard NCASv3_T4 Family"])
    assert shlex.split(command)[4] == "Standard NCASv3_T4 Family"  # az quota create --resource-name NAME
    unknown = next(need for counter, need in needs.items() if counter.startswith("unknown family"))
    assert request_command(unknown) is None and unknown.counter not in usage_command(list(needs.values()))
