"""The scale issue 15 asks for: a generated fleet of 20 members of 5,000 nodes each validates as a
whole and renders a stack per member; one 5,000-node member and the shared stack plan offline, with
every Azure body valid against Azure's OpenAPI spec. The plan time of the whole fleet, against the
number of members, is measured by tests/benchmark_fleet.py, not here."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from aksgpu.cli.app import app
from aksgpu.environments.file import load_environments
from aksgpu.environments.fleet import effective_fleet
from aksgpu.plan.fleet import plan_fleet
from aksgpu.project.stackfile import resolve_stack
from tests.arm_template import cluster_arm_shape
from tests.fleet_scale import GPU_POOLS, NODES_PER_MEMBER, fleet_project
from tests.helpers import SHARED
from tests.oracles.azure_openapi import AksOpenApi
from tests.test_fleet import FLEET_BODIES

pytestmark = pytest.mark.slow  # renders and plans fleets of many members

MEMBERS = 20


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fleet_project(tmp_path_factory.mktemp("scale") / "fleet", MEMBERS)


def test_twenty_members_of_five_thousand_nodes_validate_as_one_fleet(project: Path) -> None:
    fleet = effective_fleet(load_environments(project), "scale")
    assert len(fleet.members) == MEMBERS
    assert all(member.spec.total_max_nodes == NODES_PER_MEMBER for member in fleet.members)
    assert sum(member.spec.total_max_nodes for member in fleet.members) == 100_000
    assert fleet.spec.member_regions == ["eastus", "eastus2", "southcentralus", "westus3"]
    assert sorted({m.group for m in fleet.upgrades.members}) == ["canary", "wave1", "wave2", "wave3"]


def test_render_writes_the_shared_stack_one_per_member_and_the_upgrades_stack(project: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project)
    result = CliRunner().invoke(app, ["render"])
    assert result.exit_code == 0, result.output
    assert len(list((project / "stacks").glob("Pulumi.scale*.yaml"))) == MEMBERS + 2  # and the upgrades stack


def test_one_five_thousand_node_member_plans_with_valid_azure_bodies(project: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project)
    assert CliRunner().invoke(app, ["render"]).exit_code == 0
    fleet = plan_fleet(resolve_stack("scale", cwd=project), members=["m01"])
    [member] = fleet.members
    assert member.spec.total_max_nodes == NODES_PER_MEMBER and not member.policy.failed
    replicas = fleet.shared.by_type("azure-native:containerregistry:Replication")
    assert sorted(r.inputs["location"] for r in replicas) == ["eastus", "southcentralus", "westus3"]
    plans = [fleet.shared, member.plan]
    for type_, (spec_file, operation, top_level) in FLEET_BODIES.items():
        oracle = AksOpenApi(spec_file)
        for resource in (r for plan in plans for r in plan.by_type(type_)):
            assert oracle.validate_put(operation, resource.inputs, frozenset(top_level)) == [], resource.name
    if (SHARED / "specs").is_dir():
        azure = AksOpenApi.load(SHARED)
        [cluster] = member.plan.by_type("azure-native:containerservice:ManagedCluster")
        assert azure.validate_managed_cluster(cluster_arm_shape(cluster.inputs)) == []
        pools = member.plan.by_type("azure-native:containerservice:AgentPool")
        assert len(pools) == 1 + len(GPU_POOLS) and all(azure.validate_agent_pool(pool.inputs) == [] for pool in pools)
