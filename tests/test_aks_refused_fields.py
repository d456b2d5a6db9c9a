"""aksgpu sends no field the live AKS service refuses (catalog aks_refused_fields.yaml), on either
kind of pool, although the API definition pulumi-azure-native uses lists it: the decision rests on
the table's recorded evidence, and this holds the planned requests to it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pulumi_azure_native.containerservice as containerservice
import pytest

from aksgpu import catalog
from aksgpu.plan.planner import Plan
from aksgpu.policy.checks import MISSING, value_at

SWAGGER = (Path(__file__).resolve().parents[2] / "shared" / "specs" / "azure-rest-api" / "containerservice"
           / "resource-manager" / "Microsoft.ContainerService" / "aks" / "stable" / "2025-09-01"
           / "managedClusters.json")
CLUSTER, AGENT_POOL = "azure-native:containerservice:ManagedCluster", "azure-native:containerservice:AgentPool"


def _pools(plan: Plan) -> list[tuple[str, dict[str, Any]]]:
    """Every pool request of a plan: the inline profiles, then the AgentPool resources."""
    found = [(f"ManagedCluster.agentPoolProfiles[{pool.get('name')}]", pool)
             for cluster in plan.by_type(CLUSTER) for pool in cluster.inputs.get("agentPoolProfiles", [])]
    return found + [(f"AgentPool {pool.name}", pool.inputs) for pool in plan.by_type(AGENT_POOL)]


def test_every_row_cites_dated_evidence_and_where_it_is_refused() -> None:
    table = catalog.load("aks_refused_fields")
    assert table["fields"]
    for row in table["fields"]:
        assert set(row["refusedIn"]) <= {"ManagedCluster.agentPoolProfiles", "AgentPool"}, row["field"]
        assert row["evidence"] and all(re.fullmatch(r"https://\S+", e["url"]) and e["date"] for e in row["evidence"])
        assert "not sent" in row["decision"]


def test_the_api_version_aksgpu_sends_lists_the_field_so_the_evidence_is_what_decides() -> None:
    """The swagger of the version pulumi-azure-native uses names sshAccess on both kinds of pool: a
    schema oracle alone would not have caught the refusal. When the provider moves to another API
    version, the table's row must be read again (the version is named in it)."""
    doc = Path(containerservice.managed_cluster.__file__).read_text(encoding="utf-8")
    version = re.search(r"Uses Azure REST API version (\S+)\.", doc)
    assert version is not None
    assert version.group(1) in catalog.load("aks_refused_fields")["source"]["pulumi"]
    if not SWAGGER.is_file():
        pytest.skip("Azure's OpenAPI specs are not beside the repository (../shared/specs)")
    definitions = json.loads(SWAGGER.read_text(encoding="utf-8"))["definitions"]
    assert "sshAccess" in definitions["AgentPoolSecurityProfile"]["properties"]


def test_no_planned_pool_of_any_example_sends_a_refused_field(example_plans: dict[str, Plan]) -> None:
    rows = catalog.load("aks_refused_fields")["fields"]
    checked = 0
    for env, plan in example_plans.items():
        for where, pool in _pools(plan):
            for row in rows:
                assert value_at(pool, row["field"]) is MISSING, f"{env}: {where} sends {row['field']}"
            checked += 1
    assert checked > len(example_plans)  # inline and separate pools were both seen
