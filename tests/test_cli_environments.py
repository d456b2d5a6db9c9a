"""The environment commands through Typer's runner, on temporary copies of the project:
presets, init, render (--check, --force), validate, diff and schema."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from aksgpu.cli.app import app
from aksgpu.environments.file import load_environments
from aksgpu.environments.presets import preset_names
from aksgpu.environments.schema import environments_schema
from tests.helpers import EXAMPLE, VALIDATE_COMMANDS

runner = CliRunner()
ADMIN = "11111111-1111-1111-1111-111111111111"


def _ok(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    return result.output


def test_presets_list_names_every_preset() -> None:
    listed = json.loads(_ok(["presets", "list", "--json"]))
    assert [p["name"] for p in listed] == ["dev", "fleet", "inference", "training"] == preset_names()
    assert all(p["description"] for p in listed)
    assert "fleet" in _ok(["presets", "list"])


def test_presets_show_gives_every_field_its_value_source_and_meaning() -> None:
    rows = {row["path"]: row for row in json.loads(_ok(["presets", "show", "inference", "--json"]))}
    assert rows["nodePools[a100].perZone"] == {**rows["nodePools[a100].perZone"], "value": True, "source": "preset"}
    assert rows["name"]["source"] == "init"
    assert rows["access.localAccounts"]["source"] == "default"
    assert all(row["description"] for row in rows.values()), "every field says what it does"
    assert "nodePools[a100].vmSize" in _ok(["presets", "show", "inference"]), "keys are printed, not markup"


def test_unknown_preset_is_one_clear_message() -> None:
    result = runner.invoke(app, ["presets", "show", "traning"])
    assert result.exit_code == 2 and 'did you mean "training"' in result.output


# Each preset's run plans it twice (a second or so); its plan is checked in the default run elsewhere
# (tests/test_kubernetes_objects.py and others plan every preset), and the whole path with dev here.
@pytest.mark.parametrize("preset", [name if name == "dev" else pytest.param(name, marks=pytest.mark.slow)
                                    for name in preset_names()])
def test_init_renders_a_stack_that_validates_and_plans(empty_project: Path, preset: str) -> None:
    output = _ok(["init", "stage", "--preset", preset, "--location", "westeurope", "--admin-group", ADMIN])
    assert "stacks/Pulumi.stage.yaml: rendered" in output
    environments = (empty_project / "stacks" / "environments.yaml").read_text()
    assert environments.startswith("# yaml-language-server: $schema=./environments.schema.json")
    assert yaml.safe_load(environments)["environments"]["stage"]["preset"] == preset
    assert (empty_project / "stacks" / "environments.schema.json").is_file()
    assert "environment stage: valid" in _ok(["validate", "stage"])
    assert "up to date" in _ok(["render", "--check"])
    plan = json.loads(_ok(["plan", "stage", "--json"]))
    cluster = next(r for r in plan["resources"] if r["type"] == "azure-native:containerservice:ManagedCluster")
    assert cluster["inputs"]["location"] == "westeurope" and cluster["inputs"]["resourceName"] == "gpu-stage"


def test_init_appends_and_keeps_every_comment_of_the_authored_file(project: Path) -> None:
    path = project / "stacks" / "environments.yaml"
    before = path.read_text()
    _ok(["init", "staging", "--preset", "inference", "--set", "controlPlane.tier=Premium",
         "--set", "nodePools.a100.maxCount=8", "--description", "Pre-production."])
    after = path.read_text()
    assert after.startswith(before.rstrip("\n")), "the existing text is untouched"
    staging = yaml.safe_load(after)["environments"]["staging"]
    assert staging["overrides"]["nodePools"] == [{"name": "a100", "maxCount": 8}]
    assert staging["overrides"]["resourceGroup"] == {"name": "rg-gpu-staging"}
    stack = yaml.safe_load((project / "stacks" / "Pulumi.staging.yaml").read_text())["config"]["aksgpu:cluster"]
    assert stack["controlPlane"]["tier"] == "Premium"
    assert [p["maxCount"] for p in stack["nodePools"] if p["name"] == "a100"] == [8]


@pytest.mark.parametrize(("args", "code", "message"), [
    (["init", "dev", "--preset", "dev"], 2, 'ENVIRONMENT argument = "dev": already exists'),
    (["init", "x", "--preset", "nope"], 2, '--preset = "nope": no preset of that name'),
    (["init", "x", "--preset", "dev", "--set", "controlPlane.teir=Free"], 2, 'did you mean "tier"'),
    (["init", "x", "--preset", "dev", "--set", "controlPlane.tier=Gold"], 1, 'controlPlane.tier = "Gold"'),
    (["init", "bad name", "--preset", "dev"], 2, "Pulumi stack name"),
])
def test_init_refuses_bad_input_and_writes_nothing(project: Path, args: list[str], code: int, message: str) -> None:
    before = {path.name: path.read_text() for path in (project / "stacks").iterdir()}
    result = runner.invoke(app, args)
    assert result.exit_code == code, result.output
    assert message in result.output and "Traceback" not in result.output
    assert {path.name: path.read_text() for path in (project / "stacks").iterdir()} == before


def test_init_needs_a_location_when_nothing_sets_one(empty_project: Path) -> None:
    result = runner.invoke(app, ["init", "dev", "--preset", "dev"])
    assert result.exit_code == 2 and "--location = (not set): required" in result.output
    assert not (empty_project / "stacks" / "environments.yaml").exists()


def test_render_check_passes_on_the_examples_and_catches_drift(project: Path) -> None:
    assert _ok(["render", "--check"]).count("up to date") == 2
    path = project / "stacks" / "environments.yaml"
    path.write_text(path.read_text().replace("maxCount: 16", "maxCount: 24"))
    result = runner.invoke(app, ["render", "--check"])
    assert result.exit_code == 1
    assert "stacks/Pulumi.prod.yaml: out of date" in result.output
    assert "-        maxCount: 16\n+        maxCount: 24" in result.output
    assert "aksgpu render prod" in result.output
    assert "stacks/Pulumi.prod.yaml: updated" in _ok(["render"])
    assert "stacks/Pulumi.dev.yaml: unchanged" in _ok(["render"])


def test_render_refuses_a_hand_edited_stack_until_forced(project: Path) -> None:
    stack = project / "stacks" / "Pulumi.dev.yaml"
    edited = stack.read_text().replace("maxCount: 2", "maxCount: 5")
    stack.write_text(edited)
    check = runner.invoke(app, ["render", "--check", "dev"])
    assert check.exit_code == 1 and "edited by hand" in check.output
    refused = runner.invoke(app, ["render", "dev"])
    assert refused.exit_code == 2 and "was edited by hand" in refused.output and "--force" in refused.output
    assert stack.read_text() == edited
    forced = _ok(["render", "dev", "--force"])
    assert "kept as stacks/Pulumi.dev.yaml.bak" in forced
    assert (project / "stacks" / "Pulumi.dev.yaml.bak").read_text() == edited


def test_render_reports_spec_errors_of_every_environment(project: Path) -> None:
    path = project / "stacks" / "environments.yaml"
    text = path.read_text().replace("name: gpu-dev", "name: gpu_dev!").replace("maxCount: 16", "maxCount: 2000")
    path.write_text(text)
    result = runner.invoke(app, ["render"])
    assert result.exit_code == 1
    assert "environment dev" in result.output and "environment prod" in result.output


def test_validate_prints_every_problem_of_every_environment_at_once(project: Path) -> None:
    path = project / "stacks" / "environments.yaml"
    text = path.read_text().replace("name: gpu-dev", "name: gpu_dev!")
    text = text.replace("      registry:\n        name: gpuprodacr", "      registry:\n        nmae: gpuprodacr")
    path.write_text(text)
    result = runner.invoke(app, ["validate"])
    assert result.exit_code == 1
    assert 'name = "gpu_dev!"' in result.output
    assert "environments.prod.overrides.registry.nmae" in result.output and 'did you mean "name"' in result.output
    assert "environment dev: invalid" in result.output and "environment prod: invalid" in result.output
    document = json.loads(runner.invoke(app, ["validate", "--json"]).output)
    assert [report["valid"] for report in document] == [False, False]


def test_validate_notes_a_stale_stack_and_plan_says_so_too(project: Path) -> None:
    path = project / "stacks" / "environments.yaml"
    path.write_text(path.read_text().replace("name: gpu-dev", "name: gpu-dev2"))
    assert "stacks/Pulumi.dev.yaml is out of date" in _ok(["validate", "dev"])
    result = runner.invoke(app, ["plan", "dev"])
    assert result.exit_code == 0
    assert "note: Pulumi.dev.yaml is not what `aksgpu render dev` would write" in result.output


def test_validate_unknown_target_is_bad_input(project: Path) -> None:
    result = runner.invoke(app, ["validate", "qa"])
    assert result.exit_code == 2 and 'STACK argument = "qa": no stack of that name' in result.output


def test_diff_lists_fields_that_differ_and_pools_only_one_side_has(project: Path) -> None:
    document = json.loads(_ok(["diff", "dev", "prod", "--json"]))
    rows = {row["path"]: row for row in document["differences"]}
    assert rows["controlPlane.tier"] == {"path": "controlPlane.tier", "dev": "Free", "prod": "Premium"}
    assert rows["nodePools[h100]"] == {"path": "nodePools[h100]", "dev": "(absent)", "prod": "(defined)"}
    assert "location" not in rows, "equal fields are not listed"
    text = _ok(["diff", "dev", "prod"])
    assert "nodePools[t4spot]" in text and "controlPlane.tier" in text
    assert "the same effective spec" in _ok(["diff", "dev", "dev"])
    unknown = runner.invoke(app, ["diff", "dev", "qa"])
    assert unknown.exit_code == 2 and 'ENVIRONMENT argument = "qa": no environment of that name' in unknown.output


def test_schemas_are_valid_and_check_the_authored_and_rendered_files(project: Path) -> None:
    environments = json.loads(_ok(["schema", "environments"]))
    cluster = json.loads(_ok(["schema", "cluster"]))
    for schema in (environments, cluster):
        jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(yaml.safe_load((project / "stacks" / "environments.yaml").read_text()), environments)
    for name in ("dev", "prod"):
        stack = yaml.safe_load((project / "stacks" / f"Pulumi.{name}.yaml").read_text())
        jsonschema.validate(stack["config"]["aksgpu:cluster"], cluster)
    bad = {"environments": {"x": {"preset": "dev", "overrides": {"nodePools": [{"name": "a", "maxCont": 1}]}}}}
    with pytest.raises(jsonschema.ValidationError, match="maxCont"):
        jsonschema.validate(bad, environments)
    assert runner.invoke(app, ["schema", "nope"]).exit_code == 2


def test_the_committed_environments_schema_is_current() -> None:
    committed = json.loads((EXAMPLE / "stacks" / "environments.schema.json").read_text())
    assert committed == environments_schema(), "run: aksgpu schema environments -o stacks/environments.schema.json"


def test_check_jsonschema_accepts_the_authored_file_with_the_committed_schema() -> None:
    """An external validator (check-jsonschema), as an editor or CI job would use the schema."""
    tool = Path(sys.executable).with_name("check-jsonschema")
    result = subprocess.run([str(tool), "--schemafile", str(EXAMPLE / "stacks" / "environments.schema.json"),
                             str(EXAMPLE / "stacks" / "environments.yaml")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def _set_prod_pools(project: Path, pools: str) -> None:
    path = project / "stacks" / "environments.yaml"
    text = path.read_text()
    start = text.index("      nodePools:\n        # Serving pools")
    end = text.index("      network:\n", start)
    path.write_text(text[:start] + "      nodePools:\n" + pools + text[end:])


@pytest.mark.parametrize(("pools", "path", "message"), [
    ("        - {name: a10, _remove: true}\n", "environments.prod.overrides.nodePools[name=a10]._remove",
     'there is no item named "a10" to remove. Fix: did you mean "a100"?'),
    ("        - {name: a100, minCount: 0}\n        - {name: a100, maxCount: 4}\n",
     "environments.prod.overrides.nodePools[name=a100]", 'this list names "a100" twice (items 0 and 1)'),
    ("        - {name: a100, _remove: yes please}\n", "environments.prod.overrides.nodePools[name=a100]._remove",
     "_remove is true or absent"),
    ("        - {name: a100, maxCount: 2000}\n", "environments.prod.overrides.nodePools[name=a100].maxCount",
     "= 2000"),
    ("        - {name: 1, _remove: true}\n", "environments.prod.overrides.nodePools[0].name",
     "would replace the preset's whole list"),
    ("        - {_remove: true}\n", "environments.prod.overrides.nodePools[0].name", "needs a name (text)"),
    ("        - {name: a100, _remove: 1}\n", "environments.prod.overrides.nodePools[name=a100]._remove",
     "_remove is true or absent"),
])
def test_overrides_that_name_nothing_or_break_a_rule_are_reported_where_written(
        project: Path, pools: str, path: str, message: str) -> None:
    _set_prod_pools(project, pools)
    result = runner.invoke(app, ["validate", "prod"])
    assert result.exit_code == 1, result.output
    assert f"  - {path}" in result.output and message in result.output


def test_remove_outside_a_list_item_is_an_error(project: Path) -> None:
    path = project / "stacks" / "environments.yaml"
    path.write_text(path.read_text().replace("      protect: true\n",
                                             "      protect: true\n      monitoring: {_remove: true}\n"))
    result = runner.invoke(app, ["validate", "prod"])
    assert result.exit_code == 1 and "environments.prod.overrides.monitoring._remove = true" in result.output


def test_a_merged_value_is_named_by_pool_name_not_merged_index(project: Path) -> None:
    path = project / "stacks" / "environments.yaml"
    path.write_text(path.read_text().replace("        - {name: a100spot, subnet: gpu}\n",
                                             "        - {name: a100spot, subnet: gpu, zones: ['1', '4']}\n"))
    result = runner.invoke(app, ["validate", "prod"])
    assert "environments.prod.overrides.nodePools[name=a100spot].zones[1]" in result.output, result.output


def test_set_on_a_pool_the_preset_does_not_have_is_refused(project: Path) -> None:
    before = (project / "stacks" / "environments.yaml").read_text()
    result = runner.invoke(app, ["init", "x", "--preset", "inference", "--set", "nodePools.a10.maxCount=8"])
    assert result.exit_code == 2
    assert 'there is no nodePools item named "a10" to change. Fix: did you mean "a100"?' in result.output
    assert (project / "stacks" / "environments.yaml").read_text() == before


@pytest.mark.parametrize("content", ["", "# nothing yet\n", "environments: {}\n"])
@pytest.mark.parametrize("command", [["render"], ["validate"], ["ci", "summary"]])
def test_an_environments_file_without_environments_is_reported(project: Path, content: str,
                                                                 command: list[str]) -> None:
    (project / "stacks" / "environments.yaml").write_text(content)
    result = runner.invoke(app, command)
    assert result.exit_code == 2, result.output
    assert "defines no environments" in result.output and "Fix:" in result.output


def test_plan_refuses_a_stack_whose_environment_no_longer_renders(project: Path) -> None:
    path = project / "stacks" / "environments.yaml"
    path.write_text(path.read_text().replace("tier: Premium", "tier: Gold"))
    result = runner.invoke(app, ["plan", "prod"])
    assert result.exit_code == 1, result.output
    assert "environments.yaml has errors for environment prod" in result.output
    assert 'environments.prod.overrides.controlPlane.tier = "Gold"' in result.output
    assert "Pulumi.prod.yaml may not be what the environment says" in result.output
    assert "Resources" not in result.output  # nothing was planned
    assert runner.invoke(app, ["plan", "dev", "--json"]).exit_code == 0  # dev still renders
    path.write_text("environments: [unclosed\n")
    assert runner.invoke(app, ["plan", "dev"]).exit_code == 2


def test_render_writes_the_good_environments_and_names_the_bad_one(project: Path) -> None:
    path = project / "stacks" / "environments.yaml"
    text = path.read_text().replace("tags: {env: dev}", "tags: {env: dev2}").replace("tier: Premium", "tier: Gold")
    path.write_text(text)
    result = runner.invoke(app, ["render"])
    assert result.exit_code == 1
    assert "stacks/Pulumi.dev.yaml: updated" in result.output
    assert "environment prod" in result.output and "not rendered: prod" in result.output
    assert "env: dev2" in (project / "stacks" / "Pulumi.dev.yaml").read_text()


def test_render_check_advises_force_only_for_hand_edited_files(project: Path) -> None:
    stack = project / "stacks" / "Pulumi.dev.yaml"
    stack.write_text(stack.read_text().replace("maxCount: 2", "maxCount: 5"))
    path = project / "stacks" / "environments.yaml"
    path.write_text(path.read_text().replace("maxCount: 16", "maxCount: 24"))
    result = runner.invoke(app, ["render", "--check"])
    assert result.exit_code == 1
    assert "Fix: run `aksgpu render prod` and commit" in result.output
    assert "`aksgpu render dev --force`" in result.output and "aksgpu render dev prod" not in result.output


def test_ci_summary_of_an_unknown_environment_is_bad_input(project: Path) -> None:
    result = runner.invoke(app, ["ci", "summary", "qa"])
    assert result.exit_code == 2 and 'ENVIRONMENT argument = "qa": no environment of that name' in result.output


def test_remove_false_keeps_the_item_and_is_not_a_field(project: Path) -> None:
    _set_prod_pools(project, "        - {name: a100, minCount: 0, _remove: false}\n")
    assert "environment prod: valid" in _ok(["validate", "prod"])
    _ok(["render", "prod", "--allow-replace"])  # the pools lose prod's subnet and disk overrides
    stack = yaml.safe_load((project / "stacks" / "Pulumi.prod.yaml").read_text())
    assert [p["minCount"] for p in stack["config"]["aksgpu:cluster"]["nodePools"] if p["name"] == "a100"] == [0]


@pytest.mark.parametrize("content", ["environments: {}\n", "environments:\n  prod: {preset: inference}\n"])
def test_plan_refuses_a_stack_rendered_from_an_environment_that_is_gone(project: Path, content: str) -> None:
    (project / "stacks" / "environments.yaml").write_text(content)
    result = runner.invoke(app, ["plan", "dev"])
    assert result.exit_code == 2
    assert "Pulumi.dev.yaml was rendered from environment dev, which stacks/environments.yaml no longer defines" \
        in result.output


def test_a_field_missing_from_a_pool_the_user_added_is_reported_at_that_pool(project: Path) -> None:
    _set_prod_pools(project, "        - {name: h200, kind: gpu, minCount: 0, maxCount: 2}\n")
    result = runner.invoke(app, ["validate", "prod"])
    assert result.exit_code == 1
    assert "  - environments.prod.overrides.nodePools[name=h200].vmSize = (not set): is required" in result.output


def test_a_tag_key_with_dots_keeps_its_place(project: Path) -> None:
    path = project / "stacks" / "environments.yaml"
    path.write_text(path.read_text().replace("tags: {env: prod, cost-center: ml-platform}",
                                             "tags: {env: prod, example.com/owner: " + "x" * 300 + "}"))
    result = runner.invoke(app, ["validate", "prod"])
    assert result.exit_code == 1
    assert "  - environments.prod.overrides.tags.example.com/owner = " in result.output, result.output


@pytest.mark.parametrize(("name", "message"), [("DEV", 'differs only in case from "dev"'),
                                               ("dev.yaml", "not ending in"), ("x.", "not ending in")])
def test_init_refuses_names_that_would_collide_or_read_as_paths(project: Path, name: str, message: str) -> None:
    result = runner.invoke(app, ["init", name, "--preset", "dev"])
    assert result.exit_code == 2 and message in result.output, result.output


def test_environments_that_differ_only_in_case_are_refused(project: Path) -> None:
    path = project / "stacks" / "environments.yaml"
    path.write_text(path.read_text() + "  DEV:\n    preset: dev\n")
    result = runner.invoke(app, ["validate"])
    assert result.exit_code == 2
    assert 'environments.DEV = "DEV" (environments.yaml): differs only in case from environment "dev"' in result.output


def test_small_input_mistakes_get_a_message_that_fits(project: Path) -> None:
    assert runner.invoke(app, ["render", "--check", "--force"]).exit_code == 2
    for target in ("", "."):
        result = runner.invoke(app, ["plan", target])
        assert result.exit_code == 2 and "names no stack" in result.output
    result = runner.invoke(app, ["validate", "stacks/environments.yaml"])
    assert result.exit_code == 2
    assert 'STACK argument = "stacks/environments.yaml": the environments file, not a stack file' in result.output
    (project / "stacks" / "Pulumi.broken.yaml").write_bytes(b"config:\n  aksgpu:cluster: {name: caf\xe9}\n")
    result = runner.invoke(app, ["validate", "stacks/Pulumi.broken.yaml"])
    assert result.exit_code == 2 and "not UTF-8" in result.output  # as unreadable as it is for plan


def test_init_derives_a_valid_cluster_name_from_any_environment_name(project: Path) -> None:
    _ok(["init", "qa.eu", "--preset", "dev"])
    stack = yaml.safe_load((project / "stacks" / "Pulumi.qa.eu.yaml").read_text())
    assert stack["config"]["aksgpu:cluster"]["name"] == "gpu-qa-eu"


def test_init_keeps_the_file_readable_and_its_line_endings(project: Path) -> None:
    path = project / "stacks" / "environments.yaml"
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    _ok(["init", "qa", "--preset", "dev", "--description", "Équipe données"])
    data = path.read_bytes()
    assert b"\r\n" in data and b"\n" not in data.replace(b"\r\n", b"")
    assert "Équipe données" in data.decode("utf-8")


def test_init_extends_an_empty_inline_environments_mapping(project: Path) -> None:
    path = project / "stacks" / "environments.yaml"
    text = path.read_text()
    path.write_text(text[:text.index("environments:")] + "environments: {}\n")
    _ok(["init", "qa", "--preset", "dev"])
    assert load_environments(project).names == ["qa"]


def test_override_shapes_get_the_real_problem(project: Path) -> None:
    path = project / "stacks" / "environments.yaml"
    original = path.read_text()
    start = original.index("      nodePools:\n        # An on-demand T4")
    end = original.index("\n\n", start)
    path.write_text(original[:start] + "      nodePools: {t4: {maxCount: 3}}" + original[end:])
    result = runner.invoke(app, ["validate", "dev"])
    assert result.exit_code == 1 and "nodePools is a list, each item a mapping with its name" in result.output
    path.write_text(original.replace("tags: {env: dev}", 'tags: {"": x}'))
    result = runner.invoke(app, ["validate", "dev"])
    assert result.exit_code == 1 and "tag names are 1-512 characters" in result.output, result.output


@pytest.mark.parametrize("command", VALIDATE_COMMANDS)
def test_two_environments_declaring_one_cluster_are_warned_about(project: Path, command: list[str]) -> None:
    path = project / "stacks" / "environments.yaml"
    path.write_text(path.read_text() + "  dev2:\n    preset: dev\n    overrides:\n      name: gpu-dev\n"
                    "      resourceGroup: {name: rg-gpu-dev}\n")
    output = _ok(command)
    assert "environment dev2 declares cluster gpu-dev in resource group rg-gpu-dev, as dev does" in output
