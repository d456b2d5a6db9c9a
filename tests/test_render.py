"""Rendering stack files: deterministic, a faithful round trip of the spec, hand edits refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from aksgpu.environments.file import load_environments
from aksgpu.environments.presets import preset_names
from aksgpu.environments.effective import spec_config
from aksgpu.environments.render import plan_render, write_rendered
from aksgpu.errors import UserError
from aksgpu.spec import parse_cluster_spec
from tests.helpers import EXAMPLE


def _environments_with_every_preset(project: Path) -> None:
    lines = ["environments:"]
    for name in preset_names():
        lines += [f"  p{name}:", f"    preset: {name}", "    overrides:", f"      name: gpu-{name}",
                  "      location: eastus2", f"      resourceGroup: {{name: rg-{name}}}"]
    (project / "stacks" / "environments.yaml").write_text("\n".join(lines) + "\n")


def test_the_committed_example_stacks_are_what_render_writes() -> None:
    environments = load_environments(EXAMPLE)
    assert environments.names == ["dev", "prod"]
    for name in environments.names:
        rendered = plan_render(environments, name)
        assert rendered.state == "current", rendered.diff(EXAMPLE)


def test_every_preset_renders_deterministically_and_round_trips(project: Path) -> None:
    _environments_with_every_preset(project)
    environments = load_environments(project)
    for name in environments.names:
        first = plan_render(environments, name)
        assert first.state == "new"
        assert plan_render(environments, name).text == first.text, "same input, same bytes"
        write_rendered(first)
        again = plan_render(environments, name)
        assert again.state == "current" and again.text == first.text
        # The rendered spec parses back to the same spec, field for field.
        cluster = yaml.safe_load(first.text)["config"]["aksgpu:cluster"]
        reparsed, _ = parse_cluster_spec(cluster)
        assert spec_config(reparsed) == cluster


def test_an_autoscaled_system_pool_keeps_starting_at_min_count(project: Path) -> None:
    environments = load_environments(project)
    cluster = yaml.safe_load(plan_render(environments, "prod").text)["config"]["aksgpu:cluster"]
    assert cluster["systemPool"]["count"] is None and cluster["systemPool"]["minCount"] == 3
    spec, _ = parse_cluster_spec(cluster)
    assert spec.system_pool.initial_count == 3


def test_a_changed_environment_makes_the_stack_stale_and_render_updates_it(project: Path) -> None:
    path = project / "stacks" / "environments.yaml"
    path.write_text(path.read_text().replace("tags: {env: dev}", "tags: {env: dev2}"))
    environments = load_environments(project)
    rendered = plan_render(environments, "dev")
    assert rendered.state == "stale"
    assert "-      env: dev\n+      env: dev2" in rendered.diff(project)
    assert write_rendered(rendered) is None
    assert "env: dev2" in (project / "stacks" / "Pulumi.dev.yaml").read_text()


@pytest.mark.parametrize(("edit", "reason"), [
    (lambda text: text.replace("maxCount: 2", "maxCount: 9"), "aksgpu:cluster values were changed"),
    (lambda text: text.replace("config:\n", "# my note\nconfig:\n"), "text (comments or layout) was changed"),
    (lambda text: text.replace("aksgpu:renderDigest", "aksgpu:digest"), "not written by `aksgpu render`"),
    (lambda text: text + "  [broken", "not valid YAML"),
])
def test_hand_edits_are_refused_and_forced_ones_are_backed_up(project: Path, edit, reason: str) -> None:
    stack = project / "stacks" / "Pulumi.dev.yaml"
    edited = edit(stack.read_text())
    stack.write_text(edited)
    rendered = plan_render(load_environments(project), "dev")
    assert rendered.state == "hand-edited" and reason in rendered.reason
    with pytest.raises(UserError, match="edited by hand") as caught:
        write_rendered(rendered)
    assert "--force" in str(caught.value)
    assert stack.read_text() == edited, "nothing is overwritten without --force"
    backup = write_rendered(rendered, force=True)
    assert backup == stack.with_name("Pulumi.dev.yaml.bak") and backup.read_text() == edited
    assert stack.read_text() == rendered.text


def test_a_file_pulumi_rewrote_is_not_a_hand_edit_and_its_keys_are_kept(project: Path) -> None:
    """Pulumi re-serialises the stack file (dropping comments) when it adds encryptionsalt or
    sets config; render must accept that and keep what Pulumi added."""
    stack = project / "stacks" / "Pulumi.dev.yaml"
    document = yaml.safe_load(stack.read_text())
    document["encryptionsalt"] = "v1:abc:def"
    document["config"]["azure-native:location"] = "eastus2"
    stack.write_text(yaml.safe_dump(document))
    rendered = plan_render(load_environments(project), "dev")
    assert rendered.state == "stale"
    write_rendered(rendered)
    written = yaml.safe_load(stack.read_text())
    assert written["encryptionsalt"] == "v1:abc:def"
    assert written["config"]["azure-native:location"] == "eastus2"
    assert plan_render(load_environments(project), "dev").state == "current"


def test_pool_comments_say_what_each_pool_becomes() -> None:
    lines = (EXAMPLE / "stacks" / "Pulumi.prod.yaml").read_text().splitlines()
    text = " ".join(line.strip()[2:] for line in lines if line.strip().startswith("# "))  # comments, unwrapped
    assert ("a100: Standard_NC24ads_A100_v4, 1 x A100 80GB PCIe each; 3 AgentPools, one per zone 1, 2, 3; "
            "0-20 nodes each; on-demand.") in text
    assert "h100: Standard_ND96isr_H100_v5, 8 x H100 SXM each; zones 1; 0-16 nodes; on-demand, team research." \
        in text


@pytest.mark.parametrize("description", ["Dev cluster.\nOwned by team ML.\n", "line1\nconfig:\n  evil: 1",
                                         "a\rb", "\x1b[31mred", "x\x85y\u2028z\u2029w"])
def test_a_description_cannot_break_or_inject_into_the_stack_file(project: Path, description: str) -> None:
    path = project / "stacks" / "environments.yaml"
    document = yaml.safe_load(path.read_text())
    document["environments"]["dev"]["description"] = description
    path.write_text(yaml.safe_dump(document, allow_unicode=True))
    environments = load_environments(project)
    write_rendered(plan_render(environments, "dev"))
    text = (project / "stacks" / "Pulumi.dev.yaml").read_text()
    assert list(yaml.safe_load(text)) == ["config"], "one top-level key: nothing leaked out of a comment"
    assert plan_render(load_environments(project), "dev").state == "current"


def test_keys_pulumi_adds_do_not_make_a_stack_file_hand_edited(project: Path) -> None:
    stack = project / "stacks" / "Pulumi.dev.yaml"
    text = stack.read_text()
    # What `pulumi stack init` and `pulumi config set --secret` add, comments kept (yaml.v3 keeps them).
    text = "secretsprovider: passphrase\nencryptionsalt: v1:abc:def\n" + text.replace(
        "config:\n", "config:\n  azure-native:location: westus2\n  aksgpu:token:\n    secure: v1:xyz\n", 1)
    stack.write_text(text)
    environments = load_environments(project)
    assert plan_render(environments, "dev").state in ("current", "stale")  # not "hand-edited"
    path = project / "stacks" / "environments.yaml"
    path.write_text(path.read_text().replace("tags: {env: dev}", "tags: {env: dev2}"))
    rendered = plan_render(load_environments(project), "dev")
    assert rendered.state == "stale"
    write_rendered(rendered)
    after = yaml.safe_load(stack.read_text())
    assert after["encryptionsalt"] == "v1:abc:def" and after["config"]["aksgpu:token"] == {"secure": "v1:xyz"}
    assert after["config"]["azure-native:location"] == "westus2"
    # A comment the user changes is still a hand edit.
    stack.write_text(stack.read_text().replace("# Pulumi stack", "# My stack", 1))
    assert plan_render(load_environments(project), "dev").state == "hand-edited"


def test_rendering_an_environment_parses_its_stack_file_once_while_it_stays_the_same(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its names and its state both read the stack file: one parse (issue 28), and a file that
    changed in between is parsed again."""
    from aksgpu.environments import render as render_module

    parsed: list[Path] = []
    real = render_module.load_yaml
    monkeypatch.setattr(render_module, "load_yaml", lambda path: parsed.append(path) or real(path))
    environments = load_environments(project)
    first = plan_render(environments, "dev")
    assert parsed == [first.path] and first.state == "current"
    first.path.write_text(first.text.replace("# ", "#  ", 1), encoding="utf-8")
    again = plan_render(environments, "dev")
    assert parsed == [first.path, first.path] and again.state == "hand-edited"
