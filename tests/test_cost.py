"""The cost estimate (aksgpu/preflight/cost.py) and its price table: every expectation is computed
here from the table's own values, so a changed price moves both sides; the table itself must be
sourced, dated and made of prices."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from aksgpu.cli.app import app
from aksgpu import catalog
from aksgpu.spec import parse_cluster_spec
from aksgpu.preflight.cost import estimate, typical_nodes
from aksgpu.preflight.cost_report import difference, markdown_lines, text_lines
from aksgpu.preflight.prices import shipped_table, table_problems
from tests.helpers import base_spec, edit

runner = CliRunner()
TABLE = catalog.load("prices")


def _spec(raw: dict[str, Any]) -> Any:
    return parse_cluster_spec(raw)[0]


def _small() -> dict[str, Any]:
    """eastus; system pool 3 x D8ds_v5; a100 0-4 regular; t4 1-3 spot; Standard tier, Premium registry."""
    spec = edit(base_spec(), "location", "eastus")
    return edit(spec, "nodePools.1", {"name": "t4", "kind": "gpu", "vmSize": "Standard_NC4as_T4_v3",
                                      "priority": "spot", "minCount": 1, "maxCount": 3})


def _price(size: str, kind: str, region: str = "eastus") -> float:
    return TABLE["vm"][region][size][kind]


def _fixed(key: str) -> float:
    return TABLE["fixed"][key]["price"]


# --- the price table ------------------------------------------------------------------------


def test_the_shipped_table_is_sourced_dated_and_made_of_prices() -> None:
    assert table_problems(TABLE) == []
    assert TABLE["currency"] == "USD" and isinstance(TABLE["retrieved"], datetime.date)
    for key, source in TABLE["sources"].items():
        assert source["text"] and isinstance(source["retrieved"], datetime.date), key
    for region, sizes in TABLE["vm"].items():
        for size, row in sizes.items():
            assert row["source"] in TABLE["sources"], (region, size)
            assert isinstance(row["onDemand"], float | int) and row["onDemand"] > 0, (region, size)
            if row["spot"] is not None:
                assert 0 < row["spot"] <= row["onDemand"], f"spot above on-demand: {size} in {region}"


def test_a_table_check_that_can_fail_does() -> None:
    broken = json.loads(json.dumps(TABLE, default=str))
    assert table_problems(broken)  # dates as text are not dates
    broken = {**TABLE, "fixed": {**TABLE["fixed"], "natGateway": {"price": -1, "source": "nowhere"}}}
    problems = table_problems(broken)
    assert any("natGateway names no known source" in p for p in problems)
    assert any("natGateway.price = -1" in p for p in problems)


def test_h100_spot_prices_are_unknown_not_copied_from_on_demand() -> None:
    for region, sizes in TABLE["vm"].items():
        for size, row in sizes.items():
            if "H100" in size:
                assert row["spot"] is None, f"{size} in {region}: the catalog's spot column repeats on-demand"
    assert TABLE["fixed"]["acrStandard"]["price"] is None, "no source gives the ACR Standard price"


# --- the estimate ---------------------------------------------------------------------------


def test_a_small_spec_costs_what_the_table_says_by_hand() -> None:
    found = estimate(_spec(_small()), shipped_table())
    pools = {pool.name: pool for pool in found.pools}
    assert [p.name for p in found.pools] == ["system", "a100", "t4"]
    d8, a100 = _price("Standard_D8ds_v5", "onDemand"), _price("Standard_NC24ads_A100_v4", "onDemand")
    t4_spot = _price("Standard_NC4as_T4_v3", "spot")
    assert (pools["system"].nodes.min, pools["system"].nodes.typical, pools["system"].nodes.max) == (3, 3, 3)
    assert (pools["a100"].nodes.min, pools["a100"].nodes.typical, pools["a100"].nodes.max) == (0, 2, 4)
    assert (pools["t4"].nodes.min, pools["t4"].nodes.typical, pools["t4"].nodes.max) == (1, 2, 3)
    nodes = {"min": 3 + 0 + 1, "typical": 3 + 2 + 2, "max": 3 + 4 + 3}
    insights = TABLE["assumptions"]["containerInsights"]
    gb_per_node_hour = insights["clusterMbPerHour"] / insights["clusterNodes"] / 1000
    fixed = _fixed("aksTierStandard") + _fixed("acrPremium") / 24 + _fixed("publicIp")
    expected = {
        "min": 3 * d8 + 0 * a100 + 1 * t4_spot + fixed + nodes["min"] * gb_per_node_hour * _fixed("logAnalyticsGb"),
        "typical": 3 * d8 + 2 * a100 + 2 * t4_spot + fixed
        + nodes["typical"] * gb_per_node_hour * _fixed("logAnalyticsGb"),
        "max": 3 * d8 + 4 * a100 + 3 * t4_spot + fixed + nodes["max"] * gb_per_node_hour * _fixed("logAnalyticsGb"),
    }
    for scale, value in expected.items():
        assert getattr(found.hourly, scale) == pytest.approx(value)
        assert getattr(found.monthly, scale) == pytest.approx(value * TABLE["hoursPerMonth"])
    assert found.complete and found.missing == []
    assert {part.key for part in found.fixed} == {"aksTierStandard", "acrPremium", "logAnalyticsGb", "publicIp"}


def test_spot_pools_are_priced_at_spot_and_regular_ones_at_pay_as_you_go() -> None:
    spot = estimate(_spec(_small()), shipped_table()).pools[2]
    regular = estimate(_spec(edit(_small(), "nodePools.1.priority", "regular")), shipped_table()).pools[2]
    assert spot.node_hour == _price("Standard_NC4as_T4_v3", "spot")
    assert regular.node_hour == _price("Standard_NC4as_T4_v3", "onDemand")
    assert spot.hourly.max < regular.hourly.max


@pytest.mark.parametrize(("low", "high"), [(0, 0), (0, 1), (0, 20), (1, 20), (3, 6), (5, 5)])
def test_min_le_typical_le_max(low: int, high: int) -> None:
    assert low <= typical_nodes(low, high) <= high


def test_a_pool_without_a_price_is_listed_as_missing_and_not_counted() -> None:
    spec = edit(_small(), "nodePools.2", {"name": "h100", "kind": "gpu", "vmSize": "Standard_ND96isr_H100_v5",
                                          "priority": "spot", "zones": ["1"], "minCount": 0, "maxCount": 2})
    found = estimate(_spec(spec), shipped_table())
    without = estimate(_spec(_small()), shipped_table())
    assert not found.complete
    assert found.missing == [f"no spot price for Standard_ND96isr_H100_v5 in eastus (price table of "
                             f"{TABLE['retrieved']}, shipped with aksgpu): pool h100 not counted"]
    assert found.pools[-1].hourly is None
    # Not counted as 0 nodes' worth of anything either: only the workspace grows with its nodes.
    ingestion = [p.hourly.max for p in found.fixed if p.key == "logAnalyticsGb"][0]
    ingestion_without = [p.hourly.max for p in without.fixed if p.key == "logAnalyticsGb"][0]
    assert found.hourly.max - without.hourly.max == pytest.approx(ingestion - ingestion_without)
    assert "lower bound" in "\n".join(text_lines(found))


def test_an_unpriced_region_says_no_price_for_each_size_and_never_fails() -> None:
    found = estimate(_spec(edit(_small(), "location", "swedencentral")), shipped_table())
    assert len(found.missing) == 3
    assert all(line.startswith("no ") and " in swedencentral (price table of " in line for line in found.missing)
    assert "no price" in "\n".join(text_lines(found))


def test_the_fixed_parts_follow_the_spec() -> None:
    spec = _small()
    for path, value in (("controlPlane.tier", "Premium"), ("registry.sku", "Standard"),
                        ("registry.publicNetworkAccess", True), ("registry.zoneRedundancy", False),
                        ("registry.untaggedRetentionDays", None), ("network.outbound", "managedNATGateway"),
                        ("network.outboundIps", 3), ("monitoring.managedPrometheus", False)):
        spec = edit(spec, path, value)
    found = estimate(_spec(spec), shipped_table())
    parts = {part.key: part for part in found.fixed}
    assert parts["aksTierPremium"].hourly.max == _fixed("aksTierPremium")
    assert parts["acrStandard"].hourly is None, "ACR Standard has no sourced price"
    assert any("ACR Standard" in line for line in found.missing)
    assert parts["natGateway"].hourly.max == _fixed("natGateway")
    assert parts["publicIp"].hourly.max == pytest.approx(3 * _fixed("publicIp"))
    assert any("NAT gateway data processed" in line for line in found.not_estimated)


def test_free_tier_is_zero_but_flags_the_unverified_report() -> None:
    found = estimate(_spec(edit(_small(), "controlPlane.tier", "Free")), shipped_table())
    assert [p.hourly.max for p in found.fixed if p.key == "aksTierFree"] == [0]
    assert any("unverified" in line for line in found.assumptions)


def test_hsm_keys_and_private_endpoints_of_the_example_prod(example_project_spec: Any) -> None:
    found = estimate(example_project_spec, shipped_table())
    parts = {part.key: part for part in found.fixed}
    hours = TABLE["hoursPerMonth"]
    assert parts["keyVaultHsmKey2048"].hourly.max == pytest.approx(2 * _fixed("keyVaultHsmKey2048") / hours)
    assert parts["privateEndpoint"].hourly.max == pytest.approx(2 * _fixed("privateEndpoint"))
    assert parts["natGateway"].hourly.max == _fixed("natGateway")
    names = [pool.name for pool in found.pools]
    assert names[:4] == ["system", "a1001", "a1002", "a1003"], "one AKS pool per zone, as the plan has"
    assert sum(pool.nodes.max for pool in found.pools) == example_project_spec.total_max_nodes


@pytest.fixture
def example_project_spec() -> Any:
    from tests.helpers import EXAMPLE

    raw = yaml.safe_load((EXAMPLE / "stacks" / "Pulumi.prod.yaml").read_text())["config"]["aksgpu:cluster"]
    return _spec(raw)


def test_the_json_shape() -> None:
    document = estimate(_spec(_small()), shipped_table()).json()
    assert set(document) == {"currency", "hoursPerMonth", "region", "priceTable", "pools", "fixed", "total",
                             "missing", "notEstimated", "assumptions"}
    assert document["priceTable"] == {"date": str(TABLE["retrieved"]), "path": None, "shipped": True,
                                      "source": TABLE["source"]}
    pool = document["pools"][2]
    assert set(pool) == {"name", "vmSize", "priority", "nodes", "onDemandPerNodeHour", "spotPerNodeHour",
                         "osDiskPerNodeHour", "perNodeHour", "hourly", "monthly"}
    assert pool["nodes"] == {"min": 1, "typical": 2, "max": 3}
    assert set(document["total"]) == {"hourly", "monthly", "complete"}
    assert json.loads(json.dumps(document)) == document
    assert "| **total** | | |" in "\n".join(markdown_lines(document))


def test_the_difference_of_two_specs() -> None:
    table = shipped_table()
    a, b = (estimate(_spec(spec), table) for spec in (_small(), edit(_small(), "nodePools.0.maxCount", 8)))
    diff = difference(a, b, "small", "bigger")
    a100 = _price("Standard_NC24ads_A100_v4", "onDemand")
    hours = TABLE["hoursPerMonth"]
    insights = TABLE["assumptions"]["containerInsights"]
    ingestion = insights["clusterMbPerHour"] / insights["clusterNodes"] / 1000 * _fixed("logAnalyticsGb")
    assert diff["monthly"]["max"]["difference"] == pytest.approx(4 * (a100 + ingestion) * hours, abs=0.01)
    assert diff["monthly"]["typical"]["difference"] == pytest.approx(2 * (a100 + ingestion) * hours, abs=0.01)


def test_a_refreshed_table_in_the_project_is_used(project: Path) -> None:
    raw = {**TABLE, "retrieved": datetime.date(2030, 1, 2),
           "vm": {"eastus2": {"Standard_D4ds_v5": {"onDemand": 1.0, "spot": 0.5, "source": "skypilot-catalog"}}}}
    (project / "stacks" / "prices.yaml").write_text(yaml.safe_dump(raw))
    result = runner.invoke(app, ["cost", "dev", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["priceTable"]["date"] == "2030-01-02" and not document["priceTable"]["shipped"]
    assert document["pools"][0]["perNodeHour"] == 1.0
    assert len(document["missing"]) == 2, "the T4 pools have no price in this table"


# --- the command ----------------------------------------------------------------------------


def test_cost_prints_the_estimate_and_exits_0(project: Path) -> None:
    result = runner.invoke(app, ["cost", "prod"])
    assert result.exit_code == 0, result.output
    assert f"price table of {TABLE['retrieved']}, shipped with aksgpu" in result.output
    assert "a1001" in result.output and "control plane, Premium tier" in result.output
    assert "Assumptions:" in result.output and "typical =" in result.output


def test_cost_exit_codes(project: Path) -> None:
    assert runner.invoke(app, ["cost", "nope"]).exit_code == 2
    stack = project / "stacks" / "Pulumi.dev.yaml"
    stack.write_text(stack.read_text().replace("tier: Free", "tier: Gold"))
    result = runner.invoke(app, ["cost", "dev"])
    assert result.exit_code == 1 and "Gold" in result.output
    (project / "stacks" / "prices.yaml").write_text("kind: something-else\n")
    result = runner.invoke(app, ["cost", "prod"])
    assert result.exit_code == 2 and "is not an aksgpu price table" in result.output


def test_plan_json_and_diff_carry_the_cost(project: Path) -> None:
    result = runner.invoke(app, ["diff", "dev", "prod", "--json"])
    assert result.exit_code == 0, result.output
    cost = json.loads(result.output)["cost"]
    table = shipped_table()
    dev, prod = (estimate(_spec(yaml.safe_load((project / "stacks" / f"Pulumi.{env}.yaml").read_text())["config"]
                                ["aksgpu:cluster"]), table) for env in ("dev", "prod"))
    assert cost["monthly"]["max"]["difference"] == pytest.approx(prod.monthly.max - dev.monthly.max, abs=0.01)
    text = runner.invoke(app, ["diff", "dev", "prod"]).output
    assert "Monthly cost (USD, price table of" in text and "typical  dev $" in text


@pytest.mark.parametrize(("change", "fragment"), [
    ({"sources": ["a", "b"]}, "sources is not a mapping"),
    ({"vm": {"eastus2": [1, 2]}}, "vm.eastus2 is not a mapping"),
    ({"hoursPerMonth": "lots"}, "hoursPerMonth = 'lots'"),
    ({"assumptions": {}}, "assumptions.containerInsights needs"),
])
def test_a_malformed_project_table_is_one_clear_error(project: Path, change: dict, fragment: str) -> None:
    (project / "stacks" / "prices.yaml").write_text(yaml.safe_dump({**TABLE, **change}))
    for command in (["cost", "prod"], ["plan", "prod"]):
        result = runner.invoke(app, command)
        assert result.exit_code == 2 and fragment in result.output, (command, result.output)
        assert "bug in aksgpu" not in result.output
