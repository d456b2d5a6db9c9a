"""Fleets: the fleet spec and its rules, a fleet environment rendered into a shared stack and one
stack per member, the offline plan of a fleet (members read the shared stack's outputs through a
stack reference), every Fleet Manager and replication body against Azure's OpenAPI spec for the
API version pulumi-azure-native uses, `aksgpu up` of a fleet, and which stacks CI previews."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from aksgpu.cli.app import app
from aksgpu.ci.pipelines import changed_environments
from aksgpu.environments.file import load_environments
from aksgpu.environments.file import member_stack
from aksgpu.environments.fleet import effective_fleet
from aksgpu.environments.render import plan_renders, render_state
from aksgpu.plan.fleet import FleetPlan, fleet_facts, plan_fleet
from aksgpu.project.stackfile import resolve_stack
from aksgpu.spec import SpecError, parse_cluster_spec
from aksgpu.spec.fleet import parse_fleet_spec, parse_fleet_upgrades_spec
from tests.helpers import FLEET_EXAMPLE, REPO, VALIDATE_COMMANDS, base_spec, edit
from tests.oracles.azure_openapi import AksOpenApi

SPEC_DATA = REPO / "tests" / "data" / "azure-rest-api"
FLEET_API = SPEC_DATA / ("containerservice/resource-manager/Microsoft.ContainerService/fleet/preview/"
                         "2024-05-02-preview/fleets.json")
REPLICATION_API = SPEC_DATA / ("containerregistry/resource-manager/Microsoft.ContainerRegistry/Registry/preview/"
                               "2024-11-01-preview/containerregistry.json")
# Azure type -> (spec file, PUT operation, inputs at the top of the body); pulumi-azure-native 3.29.0 uses
# 2024-05-02-preview for the Fleet Manager types and 2024-11-01-preview for Replication (SOURCE.md).
FLEET_BODIES = {
    "azure-native:containerservice:Fleet": (FLEET_API, "Fleets_CreateOrUpdate", {"location", "tags", "identity"}),
    "azure-native:containerservice:FleetMember": (FLEET_API, "FleetMembers_Create", set()),
    "azure-native:containerservice:FleetUpdateStrategy": (FLEET_API, "FleetUpdateStrategies_CreateOrUpdate", set()),
    "azure-native:containerservice:AutoUpgradeProfile": (FLEET_API, "AutoUpgradeProfiles_CreateOrUpdate", set()),
    "azure-native:containerregistry:Replication": (REPLICATION_API, "Replications_Create", {"location", "tags"}),
}
runner = CliRunner()


@pytest.fixture(scope="module")
def fleet_plan() -> FleetPlan:
    return plan_fleet(resolve_stack("training", cwd=FLEET_EXAMPLE))


def _environments_document(project: Path) -> dict[str, Any]:
    return yaml.safe_load((project / "stacks" / "environments.yaml").read_text())


def _write_environments(project: Path, document: dict[str, Any]) -> None:
    (project / "stacks" / "environments.yaml").write_text(yaml.safe_dump(document, sort_keys=False))


def _shared_raw() -> dict[str, Any]:
    return resolve_stack("training", cwd=FLEET_EXAMPLE).fleet


def _upgrades_raw() -> dict[str, Any]:
    return resolve_stack("training-upgrades", cwd=FLEET_EXAMPLE).fleet_upgrades


# --- the fleet spec ------------------------------------------------------------------------------


def test_the_example_fleet_spec_is_valid_and_knows_its_regions() -> None:
    spec, _ = parse_fleet_spec(_shared_raw())
    assert spec.member_regions == ["eastus2", "westus3"]
    upgrades, _ = parse_fleet_upgrades_spec(_upgrades_raw())
    assert upgrades.upgrades_kubernetes and upgrades.upgrades_node_images and upgrades.stack == "training"


@pytest.mark.parametrize(("path", "value", "expected"), [
    ("members.1.name", "canary", 'members = "canary": member names must be unique'),
    ("hub", {"enabled": False, "vmSize": "Standard_D4s_v4"}, "this fleet has none"),
    ("registry.name", "no-dashes-allowed", "container registry name (Microsoft.ContainerRegistry/registries): 5-50"),
    ("name", "Gpu_Fleet", "1-63 lowercase letters"),
    ("members.0.group", "Canary", "1-50 lowercase letters"),
])
def test_fleet_rules_name_the_field(path: str, value: Any, expected: str) -> None:
    with pytest.raises(SpecError) as error:
        parse_fleet_spec(edit(_shared_raw(), path, value))
    assert expected in str(error.value)


@pytest.mark.parametrize(("path", "value", "expected"), [
    ("members.2.group", "wave9", "member westus3's group is in no stage"),
    ("updateStages.1.groups", ["eastus2", "westus3", "ghost"], "no member is in this group"),
    ("updateStages.1.groups", ["eastus2", "canary", "westus3"], "group canary is already in stage canary"),
    ("autoUpgrade", [{"name": "a", "channel": "Stable"}, {"name": "b", "channel": "Rapid"}], "competing"),
    ("updateStages.0.afterStageWaitSeconds", -1, "updateStages[0].afterStageWaitSeconds"),
    ("updateStages.0.name", "Canary", "1-50 lowercase letters"),
])
def test_upgrade_rules_name_the_field(path: str, value: Any, expected: str) -> None:
    with pytest.raises(SpecError) as error:
        parse_fleet_upgrades_spec(edit(_upgrades_raw(), path, value))
    assert expected in str(error.value)


def test_a_stage_holds_at_most_fifty_groups() -> None:
    raw = _upgrades_raw()
    raw["members"] = [{"name": f"m{i}", "stack": f"s{i}", "clusterName": f"c{i}", "location": "eastus2",
                       "group": f"g{i}"} for i in range(51)]
    raw["updateStages"] = [{"name": "all", "groups": [f"g{i}" for i in range(51)]}]
    with pytest.raises(SpecError) as error:
        parse_fleet_upgrades_spec(raw)
    assert "at most 50 groups" in str(error.value)
    raw["updateStages"] = [{"name": "one", "groups": [f"g{i}" for i in range(50)]},
                           {"name": "two", "groups": ["g50"]}]
    parse_fleet_upgrades_spec(raw)


def test_a_cluster_uses_the_fleets_registry_and_workspaces_only_as_a_member() -> None:
    spec = edit(edit(base_spec(), "registry", {"mode": "fleet", "publicNetworkAccess": True}),
                "monitoring.logAnalytics", {"mode": "fleet"})
    with pytest.raises(SpecError) as error:
        parse_cluster_spec(spec)
    assert "registry.mode" in str(error.value) and "monitoring.logAnalytics.mode" in str(error.value)
    parse_cluster_spec(edit(spec, "fleet", {"stack": "fleet", "member": "one", "group": "canary"}))


# --- a fleet environment -------------------------------------------------------------------------


def test_every_member_gets_the_fleet_layer() -> None:
    fleet = effective_fleet(load_environments(FLEET_EXAMPLE), "training")
    assert [m.environment.name for m in fleet.members] == ["training-canary", "training-eastus2", "training-westus3"]
    for member in fleet.members:
        spec = member.spec
        assert spec.fleet is not None and spec.fleet.stack == "training"
        assert spec.registry.mode == "fleet" and spec.monitoring.log_analytics.mode == "fleet"
        assert spec.monitoring.prometheus_workspace == "fleet"
        # Fleet Manager's FAQ: with AKS's own auto-upgrade on too, whichever runs first upgrades the cluster.
        assert spec.control_plane.upgrade_channel == "none"
        assert {w.rule for w in spec.policy.waivers} >= {"aks-auto-upgrade", "aks-node-os-upgrade"}
        # The team and tags of the environment's overrides reach every member.
        assert spec.tags["cost-center"] == "ml-platform" and [t.name for t in spec.access.teams] == ["research"]
    assert fleet.spec.location == "eastus2" and fleet.spec.registry_name == "gputrainingacr"


def test_a_member_that_turns_aks_auto_upgrade_back_on_is_refused(fleet_project: Path) -> None:
    document = _environments_document(fleet_project)
    document["environments"]["training"]["fleet"]["members"][1]["overrides"]["controlPlane"] = {
        "upgradeChannel": "patch"}
    _write_environments(fleet_project, document)
    with pytest.raises(SpecError) as error:
        effective_fleet(load_environments(fleet_project), "training")
    assert ("environments.training.fleet.members[name=eastus2].overrides.controlPlane.upgradeChannel = \"patch\""
            in str(error.value))


def test_member_errors_name_where_they_were_written(fleet_project: Path) -> None:
    document = _environments_document(fleet_project)
    document["environments"]["training"]["fleet"]["members"][2]["overrides"]["nodePools"] = [
        {"name": "h100", "maxCount": 5000}]
    _write_environments(fleet_project, document)
    with pytest.raises(SpecError) as error:
        effective_fleet(load_environments(fleet_project), "training")
    assert "environments.training.fleet.members[name=westus3].overrides.nodePools[name=h100].maxCount" \
        in str(error.value)


def test_a_bad_member_name_is_named_where_it_was_written(fleet_project: Path) -> None:
    document = _environments_document(fleet_project)
    document["environments"]["training"]["fleet"]["members"][0]["name"] = "Canary_1"
    _write_environments(fleet_project, document)
    with pytest.raises(SpecError) as error:
        effective_fleet(load_environments(fleet_project), "training")
    assert [issue.path for issue in error.value.issues] == ["environments.training.fleet.members[0].name"]


def test_default_stages_follow_the_members_groups_with_an_hour_between(fleet_project: Path) -> None:
    document = _environments_document(fleet_project)
    del document["environments"]["training"]["fleet"]["updateStages"]
    _write_environments(fleet_project, document)
    stages = effective_fleet(load_environments(fleet_project), "training").upgrades.update_stages
    assert [(s.name, s.groups, s.after_stage_wait_seconds) for s in stages] == [
        ("canary", ["canary"], 3600), ("eastus2", ["eastus2"], 3600), ("westus3", ["westus3"], 0)]


def test_overlapping_member_networks_and_clashing_stack_names(fleet_project: Path) -> None:
    document = _environments_document(fleet_project)
    members = document["environments"]["training"]["fleet"]["members"]
    members[2]["overrides"]["network"] = copy.deepcopy(members[1]["overrides"]["network"])
    document["environments"]["training-canary"] = {"preset": "dev"}
    _write_environments(fleet_project, document)
    with pytest.raises(SpecError) as error:
        effective_fleet(load_environments(fleet_project), "training")
    text = "\n".join(str(issue) for issue in error.value.issues)
    assert "its stack training-canary is also rendered from environment training-canary" in text
    assert "overlaps member eastus2's 10.32.0.0/12" in text


# --- rendering ---------------------------------------------------------------------------------


def test_the_committed_fleet_stacks_are_what_render_writes() -> None:
    rendered = plan_renders(load_environments(FLEET_EXAMPLE), "training")
    assert [r.path.name for r in rendered] == ["Pulumi.training.yaml", "Pulumi.training-canary.yaml",
                                               "Pulumi.training-eastus2.yaml", "Pulumi.training-westus3.yaml",
                                               "Pulumi.training-upgrades.yaml"]
    assert all(r.state == "current" for r in rendered), [(r.path.name, r.state, r.reason) for r in rendered]


def test_a_hand_edited_shared_stack_is_kept(fleet_project: Path) -> None:
    path = fleet_project / "stacks" / "Pulumi.training.yaml"
    path.write_text(path.read_text().replace("prometheus: true", "prometheus: false"))
    state = render_state(resolve_stack("training", cwd=fleet_project))
    assert state is not None and state.state == "hand-edited" and "aksgpu:fleet" in state.reason
    result = runner.invoke(app, ["render", "training"])
    assert result.exit_code == 2 and "edited by hand" in result.output
    assert "prometheus: false" in path.read_text()


def test_render_of_one_member_stack(fleet_project: Path) -> None:
    (fleet_project / "stacks" / "Pulumi.training-westus3.yaml").unlink()
    result = runner.invoke(app, ["render", "training-westus3"])
    assert result.exit_code == 0, result.output
    assert "Pulumi.training-westus3.yaml: created" in result.output


# --- the offline plan ----------------------------------------------------------------------------


def test_members_read_the_shared_stacks_outputs(fleet_plan: FleetPlan) -> None:
    assert fleet_plan.shared.outputs["fleetName"] == "gpu-training"
    # organization/<project>/<stack>: a self-managed backend's organization, Pulumi.yaml's project name.
    assert fleet_plan.upgrades.stack_references == ["organization/gpu-fleet/training"]
    for member in fleet_plan.members:
        assert member.plan.stack_references == ["organization/gpu-fleet/training"]
        [join] = member.plan.by_type("azure-native:containerservice:FleetMember")
        assert join.inputs["fleetName"] == "gpu-training"
        assert join.inputs["resourceGroupName"] == "rg-gpu-training-fleet"
        assert join.inputs["group"] == member.spec.fleet.group
        # The fleet's registry: no registry of the member's own, a private endpoint to the fleet's.
        assert not member.plan.by_type("azure-native:containerregistry:Registry")
        assert len(member.plan.by_type("azure-native:network:PrivateEndpoint")) == 1
        # Managed Prometheus: the collection endpoint and rule in the workspace's region (Microsoft's template).
        for kind in ("DataCollectionEndpoint", "DataCollectionRule"):
            prometheus = [r for r in member.plan.by_type(f"azure-native:monitor:{kind}") if "prometheus" in r.name]
            assert [r.inputs["location"] for r in prometheus] == ["eastus2"]


def test_the_shared_stack_replicates_the_registry_to_every_other_member_region(fleet_plan: FleetPlan) -> None:
    replicas = fleet_plan.shared.by_type("azure-native:containerregistry:Replication")
    assert [(r.inputs["location"], r.inputs["zoneRedundancy"]) for r in replicas] == [("westus3", "Enabled")]
    workspaces = fleet_plan.shared.by_type("azure-native:operationalinsights:Workspace")
    assert sorted(r.inputs["location"] for r in workspaces) == ["eastus2", "westus3"]
    # The strategy names members' groups, so it is in the upgrades stack, deployed after the members.
    assert not fleet_plan.shared.by_type("azure-native:containerservice:FleetUpdateStrategy")
    [strategy] = fleet_plan.upgrades.by_type("azure-native:containerservice:FleetUpdateStrategy")
    assert [[g["name"] for g in stage["groups"]] for stage in strategy.inputs["strategy"]["stages"]] == [
        ["canary"], ["eastus2", "westus3"]]
    assert strategy.inputs["fleetName"] == "gpu-training"
    profiles = fleet_plan.upgrades.by_type("azure-native:containerservice:AutoUpgradeProfile")
    assert [(p.inputs["channel"], p.options["replaceOnChanges"]) for p in profiles] == [
        ("Stable", ["updateStrategyId"]), ("NodeImage", ["updateStrategyId"])]
    assert not fleet_plan.shared.get("azure-native:containerservice:Fleet", "gpu-training-fleet").inputs.get(
        "hubProfile")


@pytest.mark.parametrize("type_", sorted(FLEET_BODIES))
def test_fleet_bodies_validate_against_azures_spec(type_: str, fleet_plan: FleetPlan) -> None:
    spec_file, operation, top_level = FLEET_BODIES[type_]
    oracle = AksOpenApi(spec_file)
    resources = [r for plan in fleet_plan.plans for r in plan.by_type(type_)]
    assert resources, f"the fleet example declares no {type_}"
    for resource in resources:
        assert oracle.validate_put(operation, resource.inputs, frozenset(top_level)) == [], resource.name


def test_a_hub_body_validates_and_a_bad_stage_is_caught(fleet_plan: FleetPlan, fleet_project: Path) -> None:
    spec_file, operation, top_level = FLEET_BODIES["azure-native:containerservice:FleetUpdateStrategy"]
    oracle = AksOpenApi(spec_file)
    [strategy] = fleet_plan.upgrades.by_type("azure-native:containerservice:FleetUpdateStrategy")
    inputs = copy.deepcopy(strategy.inputs)
    inputs["strategy"]["stages"][0]["name"] = "Canary Stage"
    inputs["strategy"]["stages"][0]["afterStageWaitSeconds"] = 5
    problems = oracle.validate_put(operation, inputs, frozenset(top_level))
    assert any("Canary Stage" in p for p in problems) and any("afterStageWaitSeconds" in p for p in problems)
    document = _environments_document(fleet_project)
    document["environments"]["training"]["fleet"]["hub"] = {"enabled": True, "vmSize": "Standard_D4s_v5"}
    _write_environments(fleet_project, document)
    # A hub is set at create only: the re-render of the rendered hubless fleet is a replacement.
    assert runner.invoke(app, ["render", "training"]).exit_code == 2
    assert runner.invoke(app, ["render", "training", "--allow-replace"]).exit_code == 0
    from aksgpu.plan.planner import plan_stack

    [fleet] = plan_stack(resolve_stack("training", cwd=fleet_project)).by_type("azure-native:containerservice:Fleet")
    assert fleet.inputs["hubProfile"] == {"agentProfile": {"vmSize": "Standard_D4s_v5"}, "dnsPrefix": "gpu-training"}
    fleet_file, fleet_operation, fleet_top = FLEET_BODIES["azure-native:containerservice:Fleet"]
    assert AksOpenApi(fleet_file).validate_put(fleet_operation, fleet.inputs, frozenset(fleet_top)) == []


def test_fleet_facts_add_up_over_the_members(fleet_plan: FleetPlan) -> None:
    facts = fleet_facts(fleet_plan)
    members = facts["members"]
    assert facts["totals"]["maxGpus"] == sum(m["maxGpus"] for m in members) == 16 + 800 + 800
    assert facts["totals"]["gpusByModel"] == {"H100 SXM": 1616}
    cores = {q["region"]: q["vcpusMax"] for q in facts["quotaByRegion"] if q["counter"] == "cores"}
    assert cores["eastus2"] > cores["westus3"] > 0  # two members in eastus2, one in westus3
    deploy = facts["deployTime"]
    # Three members, four at a time: they all run at once after the shared stack.
    assert deploy["totalSeconds"] == (deploy["sharedSeconds"] + deploy["slowestMemberSeconds"]
                                      + deploy["upgradesSeconds"])
    one_at_a_time = fleet_facts(fleet_plan, parallel=1)["deployTime"]
    assert one_at_a_time["membersSeconds"] == sum(_member_seconds(fleet_plan)) > deploy["membersSeconds"]
    assert facts["updateStages"][1]["groups"] == {"eastus2": ["eastus2"], "westus3": ["westus3"]}


def test_the_readme_shows_the_examples_fleet_section(fleet_plan: FleetPlan) -> None:
    from aksgpu.plan.fleet import fleet_lines

    from tests.docs_pages import docs_page, section as docs_section

    section = docs_section(docs_page("guides/fleets.md"), "Fleets")
    printed = "\n".join(fleet_lines(fleet_facts(fleet_plan)))
    assert f"```\n{printed}\n```" in section, "paste the fleet section of `aksgpu plan training` again"


def _member_seconds(fleet_plan: FleetPlan) -> list[int]:
    from aksgpu.plan import deploy_time

    return [deploy_time.estimate(member.plan).schedule.total for member in fleet_plan.members]


@pytest.mark.slow
def test_plan_of_a_fleet_and_of_one_member(fleet_project: Path) -> None:
    result = runner.invoke(app, ["plan", "training", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert sorted(document["members"]) == ["training-canary", "training-eastus2", "training-westus3"]
    assert document["fleet"]["cost"]["shared"]["fixed"][0]["label"].startswith("container registry, Premium")
    text = runner.invoke(app, ["plan", "training"])
    assert "Update strategy" in text.output and "stage canary: group canary (canary), then wait 24 h" in text.output
    one = runner.invoke(app, ["plan", "training-westus3"])
    assert one.exit_code == 0, one.output
    assert "FleetMember gpu-westus3-fleet-member" in one.output


def test_a_member_without_its_fleets_stack_is_one_clear_error(fleet_project: Path) -> None:
    (fleet_project / "stacks" / "Pulumi.training.yaml").unlink()
    result = runner.invoke(app, ["plan", "training-canary"])
    assert result.exit_code == 2
    assert result.output.startswith('error: aksgpu:cluster.fleet.stack = "training" (Pulumi.training-canary.yaml): '
                                    "the fleet stack whose outputs this stack reads through a stack reference")
    assert "stacks/Pulumi.training.yaml does not exist" in result.output and "Traceback" not in result.output


# --- up and CI ---------------------------------------------------------------------------------


class _FakeStack:
    def __init__(self, name: str, log: list[str], fail: set[str]) -> None:
        self.name, self.log, self.fail = name, log, fail

    def preview(self, **_: Any) -> Any:
        self.log.append(f"preview {self.name}")
        return type("Preview", (), {"change_summary": {"create": 3}})()

    def up(self, **_: Any) -> Any:
        self.log.append(f"up {self.name}")
        if self.name in self.fail:
            raise RuntimeError(f"error: {self.name} could not be created")
        return type("Up", (), {"summary": type("Summary", (), {"resource_changes": {"create": 3},
                                                              "result": "succeeded"})()})()


def _steps(project: Path) -> tuple[Any, list[Any], Any]:
    from aksgpu.cli.workflow.fleet import fleet_steps

    return fleet_steps(resolve_stack("training", cwd=project), None, backend=None, secrets_provider=None,
                       env={"PULUMI_CONFIG_PASSPHRASE": "x"})


@pytest.mark.parametrize("fail", [set(), {"training-eastus2"}])
def test_up_deploys_the_shared_stack_then_the_members(fleet_project: Path, monkeypatch: pytest.MonkeyPatch,
                                                      fail: set[str]) -> None:
    from aksgpu.cli.workflow import fleet as workflow_fleet

    log: list[str] = []
    monkeypatch.setattr(workflow_fleet, "open_stack", lambda target, create: _FakeStack(target.stack, log, fail))
    monkeypatch.setattr(workflow_fleet, "require_ready", lambda *args, **kwargs: None)
    shared, members, upgrades = _steps(fleet_project)
    questions: list[str] = []

    def confirm(question: str) -> bool:
        questions.append(question)
        return True

    def up() -> None:
        workflow_fleet.up_fleet(shared, members, upgrades, yes=False, parallel=2, diff=False, refresh=False,
                                policy_pack=None, as_json=False, confirm=confirm)

    if fail:
        with pytest.raises(typer.Exit):
            up()
    else:
        up()
    assert log[:2] == ["preview training", "up training"]
    assert sorted(log[2:5]) == [f"preview training-{m}" for m in ("canary", "eastus2", "westus3")]
    # One member failing does not stop the others; the upgrades stack waits for all of them.
    assert sorted(log[5:8]) == [f"up training-{m}" for m in ("canary", "eastus2", "westus3")]
    assert log[8:] == ([] if fail else ["preview training-upgrades", "up training-upgrades"])
    assert len(questions) == (2 if fail else 3)


def test_a_declined_fleet_changes_nothing(fleet_project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from aksgpu.cli.workflow import fleet as workflow_fleet

    log: list[str] = []
    monkeypatch.setattr(workflow_fleet, "open_stack", lambda target, create: _FakeStack(target.stack, log, set()))
    monkeypatch.setattr(workflow_fleet, "require_ready", lambda *args, **kwargs: None)
    shared, members, upgrades = _steps(fleet_project)
    with pytest.raises(typer.Exit):
        workflow_fleet.up_fleet(shared, members, upgrades, yes=False, parallel=4, diff=False, refresh=False,
                                policy_pack=None, as_json=False, confirm=lambda question: False)
    assert log == ["preview training"]


def test_up_refuses_an_unknown_member(fleet_project: Path) -> None:
    from aksgpu.errors import UserError
    from aksgpu.cli.workflow.fleet import fleet_steps

    with pytest.raises(UserError) as error:
        fleet_steps(resolve_stack("training", cwd=fleet_project), ["ghost"], backend=None, secrets_provider=None,
                    env={})
    assert '--member = "ghost": not a member of fleet training' in str(error.value)


def test_ci_previews_only_the_members_a_change_touches() -> None:
    stacks = list(load_environments(FLEET_EXAMPLE).stacks())
    fleets = {"training": [member_stack("training", m) for m in ("canary", "eastus2", "westus3", "upgrades")]}
    assert changed_environments(["stacks/Pulumi.training-westus3.yaml"], stacks, "stacks", fleets) == [
        "training-westus3"]
    assert changed_environments(["stacks/Pulumi.training-upgrades.yaml"], stacks, "stacks", fleets) == [
        "training-upgrades"]
    assert changed_environments(["stacks/Pulumi.training.yaml"], stacks, "stacks", fleets) == stacks
    assert changed_environments(["__main__.py"], stacks, "stacks", fleets) == stacks
    assert changed_environments(["README.md"], stacks, "stacks", fleets) == []


def test_ci_has_a_job_per_fleet_stack_with_the_fleets_identity(fleet_project: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    from aksgpu.ci.pipelines import ci_settings, render_azure_devops, render_github

    path = fleet_project / "stacks" / "environments.yaml"
    path.write_text(path.read_text().replace("defaults:\n", (
        "defaults:\n  backend: azblob://pulumi-state?storage_account=stpulumistate01\n"
        "  secretsProvider: azurekeyvault://kv-pulumi-state.vault.azure.net/keys/pulumi-secrets\n"), 1))
    settings = ci_settings(fleet_project)
    assert [env.name for env in settings.environments] == ["training", "training-canary", "training-eastus2",
                                                           "training-westus3", "training-upgrades"]
    files = render_github(settings)
    jobs = yaml.safe_load(files[".github/workflows/aksgpu-deploy.yml"])["jobs"]
    # The shared stack deploys alone and first; each member after it, as the fleet environment.
    assert "aksgpu up training --yes --no-members" in jobs["deploy-training"]["steps"][-1]["run"]
    assert "aksgpu up training-westus3 --yes\n" in jobs["deploy-training-westus3"]["steps"][-1]["run"] + "\n"
    assert {job["environment"] for name, job in jobs.items() if name.startswith("deploy-")} == {"training"}
    assert jobs["deploy-training-canary"]["needs"] == ["changes", "deploy-training"]
    assert jobs["deploy-training-upgrades"]["needs"] == ["changes", "deploy-training-westus3"]
    preview = yaml.safe_load(files[".github/workflows/aksgpu-preview.yml"])["jobs"]
    assert "AZURE_CLIENT_ID_PLAN_TRAINING" in json.dumps(preview["preview-training-westus3"])
    out = tmp_path / "out"
    written = []
    for relative, text in files.items():
        target = out / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        written.append(str(target))
    tool = Path(sys.executable).with_name("check-jsonschema")
    result = subprocess.run([str(tool), "--builtin-schema", "vendor.github-workflows", *written],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    pipeline = render_azure_devops(settings)[".azure-pipelines/aksgpu.yml"]
    assert "aksgpu-training-plan" in pipeline and "aksgpu-training-westus3-plan" not in pipeline


def test_ci_oidc_gives_a_fleet_environment_one_pair_of_identities_on_the_subscription(fleet_project: Path) -> None:
    from aksgpu.ci.oidc import notes
    from aksgpu.ci.oidc_settings import oidc_settings

    path = fleet_project / "stacks" / "environments.yaml"
    path.write_text(path.read_text().replace("defaults:\n", (
        "defaults:\n  backend: azblob://pulumi-state?storage_account=stpulumistate01\n"
        "  secretsProvider: azurekeyvault://kv-pulumi-state.vault.azure.net/keys/pulumi-secrets\n"), 1))
    settings = oidc_settings("training", "octo/infra", "main", None, fleet_project)
    assert settings.azure_scope == "/subscriptions/${SUBSCRIPTION_ID}"
    assert settings.fleet_groups == ("rg-gpu-training-fleet", "rg-gpu-canary", "rg-gpu-eastus2", "rg-gpu-westus3")
    assert settings.kubernetes_authorization == "azure-rbac"
    assert any("fleet training's stacks" in note for note in notes(settings))


@pytest.mark.slow
def test_no_generated_fleet_input_escapes_the_error_handling(fleet_project: Path) -> None:
    """Seeded hostile fleet environments and shared stacks (tests/fuzz.py's mutations): each ends
    in a message and a documented exit code."""
    from tests.fuzz import Generator, handled_outcome

    seed, cases = 20261126, 120
    generator = Generator(seed)
    environments = (fleet_project / "stacks" / "environments.yaml").read_bytes()
    shared = yaml.safe_load((fleet_project / "stacks" / "Pulumi.training.yaml").read_text())["config"]["aksgpu:fleet"]
    generator.environments = yaml.safe_load(environments)
    generator.clusters = [shared]
    exit_codes: dict[int, int] = {}
    for number, case in enumerate(generator.cases(cases)):
        (fleet_project / "stacks" / "environments.yaml").write_bytes(environments)
        if case.kind == "stack":  # the generator's stack cases hold the shared spec under aksgpu:cluster
            data = case.data.replace(b"aksgpu:cluster", b"aksgpu:fleet", 1)
            (fleet_project / "stacks" / "Pulumi.fuzz.yaml").write_bytes(data)
            commands = [["validate", "stacks/Pulumi.fuzz.yaml"]]
        else:
            (fleet_project / "stacks" / "environments.yaml").write_bytes(case.data)
            commands = [["validate", "training"], ["render", "--check"], ["cost", "training"]]
        for command in commands:
            code = handled_outcome(runner.invoke(app, command),
                                   f"seed {seed} case {number} ({case.kind}: {case.how}), aksgpu {' '.join(command)}")
            exit_codes[code] = exit_codes.get(code, 0) + 1
        (fleet_project / "stacks" / "Pulumi.fuzz.yaml").unlink(missing_ok=True)
    assert set(exit_codes) == {0, 1, 2}, exit_codes


def test_the_fleet_examples_schema_is_current_and_accepts_its_environments() -> None:
    import subprocess
    import sys

    from aksgpu.environments.schema import environments_schema

    schema = FLEET_EXAMPLE / "stacks" / "environments.schema.json"
    assert json.loads(schema.read_text()) == environments_schema(), "aksgpu schema environments -o ..."
    tool = Path(sys.executable).with_name("check-jsonschema")
    result = subprocess.run([str(tool), "--schemafile", str(schema),
                             str(FLEET_EXAMPLE / "stacks" / "environments.yaml")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(("args", "expected"), [
    (["destroy", "training", "--yes"], "destroy them first, training-upgrades then the members"),
    (["up", "training", "--yes", "--no-members", "--member", "canary"], "--no-members deploys the shared stack alone"),
    (["kubeconfig", "training"], "a fleet's shared stack, which has no cluster"),
    (["kubeconfig", "training-upgrades"], "a fleet's upgrades stack, which has no cluster"),
    (["cost", "training-upgrades"], "which Fleet Manager does not charge for"),
])
def test_commands_that_a_fleet_stack_cannot_take_say_why(fleet_project: Path, args: list[str], expected: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert expected in result.output and "Fix:" in result.output


@pytest.mark.parametrize("validate", VALIDATE_COMMANDS)
def test_a_member_the_fleet_no_longer_lists_is_named_with_the_way_out(fleet_project: Path,
                                                                      validate: list[str]) -> None:
    document = _environments_document(fleet_project)
    fleet = document["environments"]["training"]["fleet"]
    fleet["members"] = fleet["members"][:2]
    fleet["updateStages"][1]["groups"] = ["eastus2"]
    _write_environments(fleet_project, document)
    assert runner.invoke(app, ["render", "training"]).exit_code == 0
    for args in (validate, ["plan", "training-westus3"]):
        result = runner.invoke(app, args)
        assert result.exit_code in (1, 2), result.output
        assert "was rendered as member westus3 of fleet training, which stacks/environments.yaml no longer lists" \
            in result.output
        assert "aksgpu destroy training-westus3" in result.output


def test_validate_renders_each_stack_file_of_a_fleet_once(fleet_project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fleet environment renders every member; each member's own stack file then needs no second
    render to know its fleet still lists it (about half of a 20-member fleet's validation, issue 28)."""
    from collections import Counter

    from aksgpu.environments import render

    rendered: Counter[str] = Counter()
    real = render._compare
    monkeypatch.setattr(render, "_compare", lambda environments, name, text: rendered.update([name]) or real(
        environments, name, text))
    monkeypatch.chdir(fleet_project)
    result = runner.invoke(app, ["validate", "--spec-only"])
    assert result.exit_code == 0, result.output
    assert "training-westus3" in rendered and set(rendered.values()) == {1}, rendered


def test_members_send_no_version_that_a_fleet_upgrade_would_make_stale(fleet_plan: FleetPlan) -> None:
    """Fleet Manager moves the members' versions; a version in the stored inputs would make the
    next `up` ask AKS to go back (a second up must change nothing, tests/test_second_up.py)."""
    for member in fleet_plan.members:
        [cluster] = member.plan.by_type("azure-native:containerservice:ManagedCluster")
        assert "kubernetesVersion" not in cluster.inputs
        assert cluster.inputs["autoUpgradeProfile"] == {"nodeOSUpgradeChannel": "None", "upgradeChannel": "none"}
        pools = member.plan.by_type("azure-native:containerservice:AgentPool")
        assert pools and all("orchestratorVersion" not in pool.inputs for pool in pools)
        assert all("orchestratorVersion" not in pool for pool in cluster.inputs["agentPoolProfiles"])
