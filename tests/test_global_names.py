"""Registry and Key Vault names are unique across all of Azure: two environments (or teams) with a
cluster called gpu-prod must not both ask for gpuprodacr, and no aksgpu upgrade may rename the
registry or vault of an environment that exists (aksgpu issue 26)."""

from __future__ import annotations

import random
import string
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from aksgpu.cli.app import app
from aksgpu.environments.file import load_environments
from aksgpu.environments.render import plan_render, write_rendered
from aksgpu.environments.stack_text import value_digest
from aksgpu.errors import UserError
from aksgpu.plan.report import render_text
from aksgpu.spec import names
from aksgpu.stack_config import CLUSTER_KEY, DIGEST_KEY
from tests.helpers import VALIDATE_COMMANDS, base_spec, edit, plan_spec

runner = CliRunner()
REGISTRY = "Microsoft.ContainerRegistry/registries"
VAULT = "Microsoft.KeyVault/vaults"


def _add_environments(project: Path, added: dict[str, dict[str, Any]]) -> None:
    path = project / "stacks" / "environments.yaml"
    document = yaml.safe_load(path.read_text())
    document["environments"].update(added)
    path.write_text(yaml.safe_dump(document, sort_keys=False))


def _team(group: str, **overrides: Any) -> dict[str, Any]:
    """An environment like the example's dev, for a cluster called gpu-prod in `group`, with a KMS vault."""
    return {"preset": "dev", "overrides": {
        "name": "gpu-prod", "resourceGroup": {"name": group},
        "security": {"kms": {"mode": "create", "networkAccess": "Public"}}, **overrides}}


def _global_names(project: Path, environment: str) -> tuple[str, str]:
    spec = plan_render(load_environments(project), environment).spec
    assert spec is not None and spec.registry.name and spec.security.kms.key_vault_name
    return spec.registry.name, spec.security.kms.key_vault_name


def test_the_same_cluster_name_in_two_resource_groups_gets_two_registries_and_vaults(project: Path) -> None:
    _add_environments(project, {"team-a": _team("rg-team-a"), "team-b": _team("rg-team-b")})
    registry_a, vault_a = _global_names(project, "team-a")
    registry_b, vault_b = _global_names(project, "team-b")
    assert registry_a != registry_b and vault_a != vault_b
    assert registry_a.startswith("gpuprodacr") and vault_a.startswith("gpu-prod-kms-")
    assert all(names.obeys(REGISTRY, name) for name in (registry_a, registry_b))
    assert all(names.obeys(VAULT, name) for name in (vault_a, vault_b))


def test_the_suffix_is_the_same_on_every_machine_and_every_plan(project: Path) -> None:
    # Pinned: a new derivation would rename the resources of an environment whose stack file is lost.
    assert names.global_suffix("rg-gpu-prod", "eastus2", "gpu-prod") == "7m73ow"
    assert names.global_suffix("RG-GPU-PROD", "EastUS2", "gpu-prod") == "7m73ow"
    _add_environments(project, {"team-a": _team("rg-team-a")})
    first = plan_render(load_environments(project), "team-a")
    assert plan_render(load_environments(project), "team-a").text == first.text
    write_rendered(first)
    again = plan_render(load_environments(project), "team-a")
    assert again.state == "current"
    registry = plan_spec(yaml.safe_load(again.text)["config"][CLUSTER_KEY]).by_type(
        "azure-native:containerregistry:Registry")
    assert [r.inputs["registryName"] for r in registry] == [again.spec.registry.name]  # type: ignore[union-attr]


def test_a_recorded_name_stays_when_the_resource_group_changes(project: Path) -> None:
    _add_environments(project, {"team-a": _team("rg-team-a")})
    write_rendered(plan_render(load_environments(project), "team-a"))
    before = _global_names(project, "team-a")
    _add_environments(project, {"team-a": _team("rg-team-a-renamed")})
    assert _global_names(project, "team-a") == before


def _as_rendered_before(path: Path, *fields: tuple[str, ...]) -> None:
    """The stack file as an aksgpu before issue 26 left it: these names null (Pulumi's rewrite, no stamp)."""
    document = yaml.safe_load(path.read_text())
    cluster = document["config"][CLUSTER_KEY]
    for field in fields:
        node = cluster
        for key in field[:-1]:
            node = node[key]
        node[field[-1]] = None
    document["config"][DIGEST_KEY] = value_digest(cluster)
    path.write_text(yaml.safe_dump(document, sort_keys=False))


def test_an_environment_rendered_before_keeps_its_registry_and_vault(project: Path) -> None:
    stacks = project / "stacks"
    _as_rendered_before(stacks / "Pulumi.dev.yaml", ("registry", "name"))
    _as_rendered_before(stacks / "Pulumi.prod.yaml", ("security", "kms", "keyVaultName"))
    environments = load_environments(project)
    dev, prod = plan_render(environments, "dev"), plan_render(environments, "prod")
    assert dev.state == prod.state == "stale"
    assert dev.spec is not None and dev.spec.registry.name == "gpudevacr"
    assert prod.spec is not None and prod.spec.security.kms.key_vault_name == "gpu-prod-kms"
    assert dev.refusal() == prod.refusal() == ""  # null on disk and the recorded name are one name
    result = runner.invoke(app, ["render"])
    assert result.exit_code == 0, result.output
    assert "keyVaultName: gpu-prod-kms\n" in (stacks / "Pulumi.prod.yaml").read_text()
    assert "name: gpudevacr\n" in (stacks / "Pulumi.dev.yaml").read_text()


def test_an_unreadable_stack_file_keeps_the_suffix_less_names(project: Path) -> None:
    (project / "stacks" / "Pulumi.dev.yaml").write_text("config: [not: a, spec\n")
    spec = plan_render(load_environments(project), "dev").spec
    assert spec is not None and spec.registry.name == "gpudevacr"


def test_a_registry_added_to_an_environment_rendered_before_gets_a_suffixed_name(project: Path) -> None:
    stacks = project / "stacks"
    path = stacks / "Pulumi.dev.yaml"
    document = yaml.safe_load(path.read_text())
    document["config"][CLUSTER_KEY]["registry"] = {"mode": "none"}  # dev had no registry before
    document["config"][DIGEST_KEY] = value_digest(document["config"][CLUSTER_KEY])
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    spec = plan_render(load_environments(project), "dev").spec
    assert spec is not None and spec.registry.name == names.suffixed_registry(
        "gpu-dev", names.global_suffix("rg-gpu-dev", "eastus2", "gpu-dev"))


def test_renaming_a_recorded_registry_is_refused_as_a_replacement(project: Path) -> None:
    environments = load_environments(project)
    assert plan_render(environments, "dev").state == "current"  # its registry name is recorded
    path = project / "stacks" / "environments.yaml"
    document = yaml.safe_load(path.read_text())
    document["environments"]["dev"]["overrides"]["registry"] = {"name": "someotheracr"}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    rendered = plan_render(load_environments(project), "dev")
    assert "Registry registryName: registry.name: gpudevacr -> someotheracr" in rendered.refusal()
    # The message says what a new registry loses, not "nodes and workloads".
    assert "a new registry holds none of the images" in rendered.refusal()
    assert "nodes and workloads" not in rendered.refusal()
    with pytest.raises(UserError):
        write_rendered(rendered)


@pytest.mark.parametrize("command", VALIDATE_COMMANDS)
def test_validate_warns_when_two_environments_ask_for_one_global_name(project: Path, command: list[str]) -> None:
    _add_environments(project, {
        "team-a": _team("rg-team-a", registry={"name": "gpuprodacr"}),
        "team-b": _team("rg-team-b", security={"kms": {"mode": "create", "networkAccess": "Public",
                                                       "keyVaultName": "team-a-kms"}}),
        "team-c": _team("rg-team-c", security={"kms": {"mode": "create", "networkAccess": "Public",
                                                       "keyVaultName": "Team-A-kms"}}),
    })
    result = runner.invoke(app, command)
    assert "environment team-a asks Azure for the registry name gpuprodacr, as environment prod does" \
        in result.output, result.output
    assert "asks Azure for the key vault name team-a-kms" in result.output
    assert "set security.kms.keyVaultName in one of them" in result.output
    # Two environments with different resource groups derive different names: no warning.
    _add_environments(project, {"team-a": _team("rg-team-a"), "team-b": _team("rg-team-b"),
                                "team-c": _team("rg-team-c")})
    assert "asks Azure for the" not in runner.invoke(app, command).output


def test_plan_lists_the_global_names() -> None:
    spec = edit(base_spec(), "registry.name", "gpuprodacr7m73ow")
    spec = edit(spec, "security.kms", {"mode": "create", "networkAccess": "Public", "keyVaultName": "gpu-prod-kms-x"})
    text = render_text(plan_spec(spec), [])
    assert "Global names (unique across Azure): registry gpuprodacr7m73ow, key vault gpu-prod-kms-x." in text


def _cluster_name(rng: random.Random) -> str:
    """A name AKS accepts for a cluster: 1-63 letters, digits, '-' or '_', alphanumeric at both ends."""
    alnum, inner = string.ascii_letters + string.digits, string.ascii_letters + string.digits + "-_"
    length = rng.randint(1, 63)
    if length == 1:
        return rng.choice(alnum)
    return rng.choice(alnum) + "".join(rng.choice(inner) for _ in range(length - 2)) + rng.choice(alnum)


def test_every_suffixed_name_keeps_azures_rules_for_many_cluster_names() -> None:
    rng = random.Random(26)
    for _ in range(3000):
        cluster = _cluster_name(rng)
        suffix = names.global_suffix(f"rg-{rng.randint(0, 10**6)}", rng.choice(["eastus2", "westeurope"]), cluster)
        assert len(suffix) == names.SUFFIX_LENGTH
        registry, vault = names.suffixed_registry(cluster, suffix), names.suffixed_key_vault(cluster, suffix)
        assert names.obeys(REGISTRY, registry), (cluster, registry)
        assert names.obeys(VAULT, vault), (cluster, vault)
    for cluster in ("a", "1", "9-x", "a" * 63, "a-" * 31 + "b", "___a", "a_-_-b"):
        suffix = names.global_suffix("rg", "eastus2", cluster)
        assert names.obeys(REGISTRY, names.suffixed_registry(cluster, suffix)), cluster
        assert names.obeys(VAULT, names.suffixed_key_vault(cluster, suffix)), cluster

