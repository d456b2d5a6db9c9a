"""Rendering stacks/Pulumi.<env>.yaml from stacks/environments.yaml through templates/.

The rendered file holds the full, effective cluster spec (every field, preset defaults resolved,
overrides applied) under `aksgpu:cluster`, and two digests that tell a stale file (environments.yaml
changed: render replaces it) from a file edited by hand (render refuses unless forced):
- `aksgpu:renderDigest`, a config key: the digest of the `aksgpu:cluster` value as rendered. It
  survives Pulumi rewriting the file (Pulumi re-serialises stack files and drops comments when it
  adds `encryptionsalt` or `pulumi config set` runs).
- a header comment with the digest of the whole text: any edit, comments included, changes it.
Keys aksgpu does not own (Pulumi's `secretsprovider`, `encryptedkey`, `encryptionsalt`, other
config keys) are kept from the existing file.
"""

from __future__ import annotations

import difflib
import functools
import re
import textwrap
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from aksgpu.cli.environments.file import UPGRADES, Environment, EnvironmentsFile
from aksgpu.cli.environments.overrides import (
    check_override_items,
    check_override_keys,
    describe_overrides,
    merge,
    user_path,
)
from aksgpu.cli.environments.presets import Preset, load_preset
from aksgpu.cli.environments.stack_text import (
    CLUSTER_KEY,
    DIGEST_KEY,
    SPEC_KEYS,
    aksgpu_text,
    to_yaml,
    value_digest,
)
from aksgpu.cli.errors import UserError
from aksgpu.cli.project.files import read_text_if_exists, write_text_atomically
from aksgpu.cli.project.generated import free_backup_path, stamp, stamp_placeholder, stamp_state
from aksgpu.cli.project.stackfile import load_yaml
from aksgpu.components.spec.base import Issue

if TYPE_CHECKING:
    import jinja2

    from aksgpu.cli.project.stackfile import StackFile
    from aksgpu.components.spec import ClusterSpec

TEMPLATES_DIR = Path(__file__).resolve().parents[2] / "templates"
HEADER_WIDTH = 96
# A pool reads best with what it is first; the other fields follow in the model's order.
POOL_KEYS_FIRST = ("name", "kind", "vmSize", "priority", "spot", "zones", "perZone", "count", "minCount",
                   "maxCount", "team", "taints", "labels", "gpu")

State = Literal["new", "current", "stale", "hand-edited"]


@dataclass(frozen=True)
class EffectiveEnvironment:
    """An environment resolved to its validated cluster spec."""

    environment: Environment
    preset: Preset
    spec: ClusterSpec
    warnings: list[Issue]


@dataclass(frozen=True)
class RenderedStack:
    """What `render` would write for one environment, next to what is there now."""

    environment: str
    path: Path
    text: str
    existing: str | None
    state: State
    reason: str = ""
    warnings: tuple[Issue, ...] = ()
    spec: ClusterSpec | None = None  # the environment's validated spec, rendered into `text`

    def diff(self, project_dir: Path) -> str:
        name = str(self.path.relative_to(project_dir))
        before = (self.existing or "").splitlines(keepends=True)
        return "".join(difflib.unified_diff(before, self.text.splitlines(keepends=True),
                                            f"{name} (on disk)", f"{name} (rendered)"))


def effective_environment(environments: EnvironmentsFile, name: str) -> EffectiveEnvironment:
    """Preset + shared overrides + the environment's overrides, validated as a ClusterSpec; for a
    fleet member's stack, the member's spec.

    Raises UserError for an unknown environment or preset or a fleet (it has no one cluster spec),
    SpecError for a bad spec (override paths that name no field are reported where the user wrote them).
    """
    from aksgpu.cli.environments.fleet import effective_fleet, fleet_has_no_cluster_spec

    fleet_environment, member = environments.stacks().get(name, (name, None))
    if member == UPGRADES:
        raise fleet_has_no_cluster_spec(environments, fleet_environment)
    if member is not None:
        return effective_fleet(environments, fleet_environment).member(member)
    environment = environments.get(name)
    if environment.fleet is not None:
        raise fleet_has_no_cluster_spec(environments, name)
    layers = [("defaults.overrides", environment.shared_overrides), (f"environments.{name}.overrides",
                                                                     environment.overrides)]
    return effective_layers(environment, layers, f"environment {name}", environments.relative_path)


def effective_layers(environment: Environment, layers: list[tuple[str, Any]], what: str,
                     environments_file: str) -> EffectiveEnvironment:
    """The environment's preset with `layers` (where each was written, its overrides; base first)
    merged on top, validated as a ClusterSpec; issues name the layer that set the value."""
    from aksgpu.components.spec import SpecError, parse_cluster_spec

    preset = load_preset(environment.preset)
    issues: list[Issue] = []
    merged: dict[str, Any] = preset.spec
    for where, overrides in layers:
        issues += check_override_keys(overrides, where)
        issues += check_override_items(merged, overrides, where)
        merged = merge(merged, overrides)
    source = f"{what} ({environments_file})"
    if issues:
        raise SpecError(issues, source=source)
    source = f"{what} (preset {preset.name} + overrides in {environments_file})"
    most_specific_first = list(reversed(layers))
    try:
        spec, warnings = parse_cluster_spec(merged, source=source)
    except SpecError as error:
        raise SpecError([_where_written(issue, merged, most_specific_first) for issue in error.issues],
                        source=source) from None
    return EffectiveEnvironment(environment, preset, spec,
                                [_where_written(w, merged, most_specific_first) for w in warnings])


def _where_written(issue: Issue, raw: dict[str, Any], layers: list[tuple[str, Any]]) -> Issue:
    """The issue, at the path where the user wrote the value (see environments.user_path)."""
    from aksgpu.components.spec.base import is_missing

    return replace(issue, path=user_path(issue.path, raw, layers, missing=is_missing(issue.value)))


def spec_config(spec: ClusterSpec) -> dict[str, Any]:
    """The spec as stack config: every field, camelCase, parsing back to the same spec."""
    config = spec.model_dump(mode="json", by_alias=True)
    config["nodePools"] = [_reordered(pool, POOL_KEYS_FIRST) for pool in config["nodePools"]]
    system = spec.system_pool
    if system.autoscale and not system.count_is_explicit:
        # The default count only applies without autoscaling; written out it would read as an
        # explicit initial count. null keeps the meaning: start at minCount.
        config["systemPool"]["count"] = None
    return config


def _reordered(mapping: dict[str, Any], first: tuple[str, ...]) -> dict[str, Any]:
    return {**{key: mapping[key] for key in first if key in mapping}, **mapping}


# --- rendering -------------------------------------------------------------------------------


def _sections(spec: ClusterSpec, config: dict[str, Any]) -> list[dict[str, Any]]:
    from aksgpu.components.spec import ClusterSpec
    from aksgpu.components.spec.descriptions import field_descriptions

    described = field_descriptions(ClusterSpec)
    descriptions = {(info.alias or name): described.get(name) for name, info in ClusterSpec.model_fields.items()}
    sections = []
    for key, value in config.items():
        comments = _wrap(_first_sentence(descriptions.get(key)), HEADER_WIDTH - 6)
        if key == "nodePools" and value:
            lines = ["nodePools:"]
            for pool, item in zip(spec.node_pools, value, strict=True):
                lines += [f"  # {line}" for line in _wrap(_pool_summary(pool), HEADER_WIDTH - 8)]
                lines += textwrap.indent(to_yaml([item]), "  ").splitlines()
            text = "\n".join(lines)
        else:
            text = to_yaml({key: value})
        sections.append({"comments": comments, "yaml": text})
    return sections


def _first_sentence(text: str | None) -> str:
    """The first sentence of a field description ("e.g." and the like do not end one)."""
    if not text:
        return ""
    return " ".join(re.split(r"(?<=[.!?])\s+(?=[A-Z`])", text.strip(), maxsplit=1)[0].split())


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width) if text else []


def _pool_summary(pool: Any) -> str:
    """One line a reviewer reads before the pool's fields: what it becomes in Azure."""
    size = pool.size
    gpus = f", {size['gpus']} x {size['gpuModel']} each" if size and size.get("gpus") else ""
    agent_pools = pool.agent_pools()
    where = (f"{len(agent_pools)} AgentPools, one per zone {', '.join(pool.zones)}" if len(agent_pools) > 1
             else f"zones {', '.join(pool.zones) or 'none'}")
    scale = (f"{pool.min_count}-{pool.max_count} nodes" if pool.autoscale else f"{pool.count or 0} nodes")
    if len(agent_pools) > 1:
        scale += " each"
    priority = "spot" if pool.priority == "spot" else "on-demand"
    team = f", team {pool.team}" if pool.team else ""
    return f"{pool.name}: {pool.vm_size}{gpus}; {where}; {scale}; {priority}{team}."


@functools.cache
def template(name: str = "stack.yaml.j2") -> jinja2.Template:
    # Compiled once per process: `validate` and `render` of every environment reuse it.
    import jinja2

    jinja = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES_DIR), undefined=jinja2.StrictUndefined,
                               keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
                               autoescape=False)
    return jinja.get_template(name)


def render_text(effective: EffectiveEnvironment, environments_file: str,
                kept_top_level: dict[str, Any], kept_config: dict[str, Any]) -> str:
    """The stack file text for an environment: deterministic, same input same bytes. User text in
    the header's comment lines is kept to one line each (a line break would end the comment)."""
    from aksgpu.components.spec.base import one_line

    config = spec_config(effective.spec)
    env = effective.environment
    preset_spec = effective.preset.spec
    overrides = (describe_overrides(env.shared_overrides, preset_spec)
                 + describe_overrides(env.overrides, merge(preset_spec, env.shared_overrides)))
    override_text = "Overrides: " + (", ".join(dict.fromkeys(overrides)) if overrides else "none")
    text = template().render(
        environment=env.name,
        member_of=env.member_of,
        environments_file=environments_file,
        description_lines=[line for paragraph in (env.description or "").splitlines()
                           for line in textwrap.wrap(one_line(paragraph), HEADER_WIDTH - 2) or [""]],
        preset=effective.preset.name,
        preset_lines=textwrap.wrap(f"Preset: {effective.preset.name} ({effective.preset.description})",
                                   HEADER_WIDTH - 2, subsequent_indent="  "),
        override_lines=textwrap.wrap(one_line(override_text), HEADER_WIDTH - 2, subsequent_indent="  ",
                                     break_on_hyphens=False),
        warnings=effective.warnings,
        warning_lines=[line for warning in effective.warnings
                       for line in textwrap.wrap(one_line(f"- {warning}"), HEADER_WIDTH - 4,
                                                 subsequent_indent="  ", break_on_hyphens=False)],
        stamp_line=stamp_placeholder(),
        kept_top_level=[to_yaml({key: value}) for key, value in kept_top_level.items()],
        sections=_sections(effective.spec, config),
        value_digest=value_digest(config),
        kept_config=to_yaml(kept_config) if kept_config else "",
    )
    return stamp(text, owned=aksgpu_text)


# --- comparing with what is on disk ----------------------------------------------------------


def stack_path(environments: EnvironmentsFile, name: str) -> Path:
    return environments.path.parent / f"Pulumi.{name}.yaml"


def plan_renders(environments: EnvironmentsFile, name: str) -> list[RenderedStack]:
    """Every stack file `name` renders: an environment's own, a fleet environment's shared stack and
    one per member, or a fleet member's (name: its stack)."""
    from aksgpu.cli.environments.fleet import effective_fleet, is_fleet, member_stack, render_fleet_text

    if not is_fleet(environments, name):
        return [plan_render(environments, name)]
    fleet = effective_fleet(environments, name)
    shared = _compare(environments, name, lambda top, config: render_fleet_text(
        fleet, environments.relative_path, top, config))
    upgrades = _compare(environments, member_stack(name, UPGRADES), lambda top, config: render_fleet_text(
        fleet, environments.relative_path, top, config, upgrades=True))
    return [replace(shared, warnings=tuple(fleet.warnings)),
            *(_render_environment(environments, member) for member in fleet.members), upgrades]


def plan_render(environments: EnvironmentsFile, name: str) -> RenderedStack:
    """What rendering stack `name` would write (an environment's, or a fleet member's), and the
    state of the file there now. A fleet environment's own stack: plan_renders."""
    from aksgpu.cli.environments.fleet import effective_fleet, is_fleet

    environment, member = environments.stacks().get(name, (name, None))
    if member == UPGRADES:
        return plan_renders(environments, environment)[-1]
    if member is not None:
        return _render_environment(environments, effective_fleet(environments, environment).member(member))
    if is_fleet(environments, name):
        return plan_renders(environments, name)[0]
    return _render_environment(environments, effective_environment(environments, name))


def _render_environment(environments: EnvironmentsFile, effective: EffectiveEnvironment) -> RenderedStack:
    rendered = _compare(environments, effective.environment.name, lambda top, config: render_text(
        effective, environments.relative_path, top, config))
    return replace(rendered, warnings=tuple(effective.warnings), spec=effective.spec)


def _compare(environments: EnvironmentsFile, name: str, render: Any) -> RenderedStack:
    """`render(kept top-level keys, kept config)`'s text for stack `name`, and the file's state now."""
    path = stack_path(environments, name)
    existing = read_text_if_exists(path)
    kept_top: dict[str, Any] = {}
    kept_config: dict[str, Any] = {}
    state: State = "new"
    reason = ""
    if existing is not None:
        document, problem = _parse_existing(path)
        if isinstance(document, dict):
            kept_top = {key: value for key, value in document.items() if key != "config"}
            config = document.get("config") if isinstance(document.get("config"), dict) else {}
            kept_config = {key: value for key, value in config.items() if key not in (*SPEC_KEYS, DIGEST_KEY)}
        state, reason = _existing_state(existing, document, problem)
    text = render(kept_top, kept_config)
    if state == "stale" and text == existing:
        state = "current"
    return RenderedStack(name, path, text, existing, state, reason)


def _parse_existing(path: Path) -> tuple[Any, str]:
    try:
        return load_yaml(path), ""
    except UserError as error:
        return None, str(error)


def _existing_state(text: str, document: Any, problem: str) -> tuple[State, str]:
    if problem:
        return "hand-edited", f"it is not valid YAML ({problem})"
    config = document.get("config") if isinstance(document, dict) else None
    if not isinstance(config, dict) or DIGEST_KEY not in config:
        return "hand-edited", "it was not written by `aksgpu render` (it has no aksgpu:renderDigest)"
    key = next((key for key in SPEC_KEYS if key in config), CLUSTER_KEY)
    if value_digest(config.get(key)) != config[DIGEST_KEY]:
        return "hand-edited", f"its {key} values were changed after it was rendered"
    # No stamp: Pulumi rewrote the file (it drops comments); the values are as rendered.
    if stamp_state(text, owned=aksgpu_text) == "edited":
        return "hand-edited", "its text (comments or layout) was changed after it was rendered"
    return "stale", ""


def write_rendered(rendered: RenderedStack, force: bool = False) -> Path | None:
    """Write a rendered stack file; a hand-edited one only with `force`, after a backup.

    Returns the backup path when one was made.
    """
    if rendered.state == "current":
        return None
    if rendered.state == "hand-edited" and not force:
        raise UserError(f"{rendered.path.name} was edited by hand: {rendered.reason}. render will not overwrite it. "
                        f"Fix: move the change into stacks/environments.yaml (environment {rendered.environment}), "
                        f"then run `aksgpu render {rendered.environment} --force` (the edited file is kept as a "
                        "backup beside it).")
    backup = None
    if rendered.state == "hand-edited" and rendered.existing is not None:
        backup = free_backup_path(rendered.path)
        write_text_atomically(backup, rendered.existing)
    write_text_atomically(rendered.path, rendered.text)
    return backup


class EnvironmentNotRendered(UserError):
    """environments.yaml cannot render the environment a stack file belongs to: the stack file
    may be out of date with what the user meant. `exit_code`: 1 spec errors, 2 unreadable file."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def render_state(stack_file: StackFile) -> RenderedStack | None:
    """How a stack file compares with what its environment renders; None when it belongs to no
    environment of the project's environments.yaml. Raises EnvironmentNotRendered when
    environments.yaml is unreadable, the environment has errors, or the stack file was rendered
    from an environment environments.yaml no longer defines."""
    from aksgpu.cli.environments.file import load_environments
    from aksgpu.components.spec import SpecError

    name = stack_file.stack
    fix = (f"Fix: correct it (`aksgpu validate {name}` lists every problem), then `aksgpu render {name}`; "
           f"until then {stack_file.path.name} may not be what the environment says.")
    try:
        environments = load_environments(stack_file.project_dir)
        if stack_file.path.parent != environments.path.parent:
            return None
        if name not in environments.stacks():
            cluster = stack_file.cluster if isinstance(stack_file.cluster, dict) else {}
            fleet = cluster.get("fleet") if isinstance(cluster.get("fleet"), dict) else None
            if environments.exists and DIGEST_KEY in stack_file.config and fleet is not None:
                raise EnvironmentNotRendered(
                    f"{stack_file.path.name} was rendered as member {fleet.get('member')} of fleet "
                    f"{fleet.get('stack')}, which {environments.relative_path} no longer lists. Fix: put it back "
                    f"under environments.{fleet.get('stack')}.fleet.members; or, if it is gone for good, run "
                    f"`aksgpu destroy {name}` before the fleet's next `aksgpu up` (which drops the registry replica "
                    "and workspace the member uses) and delete the stack file.", 2)
            if environments.exists and DIGEST_KEY in stack_file.config:
                raise EnvironmentNotRendered(
                    f"{stack_file.path.name} was rendered from environment {name}, which "
                    f"{environments.relative_path} no longer defines. Fix: add the environment back (`aksgpu "
                    f"init {name} --preset NAME`), or, if it is gone for good, `aksgpu destroy {name}` and delete "
                    "the stack file.", 2)
            return None
        return plan_render(environments, name)
    except SpecError as error:
        raise EnvironmentNotRendered(f"environments.yaml has errors for environment {name}:\n{error}\n{fix}", 1) \
            from None
    except EnvironmentNotRendered:
        raise
    except UserError as error:
        raise EnvironmentNotRendered(f"{error}\n{fix}", 2) from None
