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
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml

from aksgpu.environments.effective import EffectiveEnvironment, effective_layers, render_text
from aksgpu.environments.file import UPGRADES, EnvironmentsFile
from aksgpu.environments.fleet import (
    effective_fleet,
    fleet_has_no_cluster_spec,
    is_fleet,
    member_stack,
    render_fleet_text,
)
from aksgpu.environments.global_names import (
    UNREADABLE,
    as_fleet_named_on_disk,
    as_named_on_disk,
    with_fleet_global_names,
    with_global_names,
)
from aksgpu.environments.replacement import RenderImpact, cluster_of, config_value, refusal, render_impact
from aksgpu.environments.stack_text import aksgpu_text, value_digest
from aksgpu.errors import Problem, UserError
from aksgpu.project.files import read_text_if_exists, write_text_atomically
from aksgpu.project.generated import free_backup_path, stamp_state
from aksgpu.project.stackfile import MAX_YAML_BYTES, load_yaml
from aksgpu.spec.base import Issue
from aksgpu.stack_config import CLUSTER_KEY, DIGEST_KEY, FLEET_KEY, SPEC_KEYS

if TYPE_CHECKING:

    from aksgpu.project.stackfile import StackFile
    from aksgpu.spec import ClusterSpec


State = Literal["new", "current", "stale", "hand-edited"]


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
    # Fields the re-render moves that Azure cannot change in place (or, system pool, never applies).
    impact: RenderImpact = RenderImpact()

    def refusal(self) -> str:
        """Why writing this file needs --allow-replace; "" when it does not."""
        if self.state == "current" or not self.impact.replaced:
            return ""
        return refusal(self.environment, self.path.name, self.impact.replaced)

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


# --- rendering -------------------------------------------------------------------------------


# --- comparing with what is on disk ----------------------------------------------------------


def stack_path(environments: EnvironmentsFile, name: str) -> Path:
    return environments.path.parent / f"Pulumi.{name}.yaml"


def plan_renders(environments: EnvironmentsFile, name: str) -> list[RenderedStack]:
    """Every stack file `name` renders: an environment's own, a fleet environment's shared stack and
    one per member, or a fleet member's (name: its stack)."""
    if not is_fleet(environments, name):
        return [plan_render(environments, name)]
    fleet = effective_fleet(environments, name)
    # The shared registry's name is global too: recorded at render and kept, as a cluster's (global_names.py).
    fleet = replace(fleet, spec=with_fleet_global_names(fleet.spec, _spec_on_disk(stack_path(environments, name),
                                                                                    FLEET_KEY)))
    shared = _compare(environments, name, lambda top, config: render_fleet_text(
        fleet, environments.relative_path, top, config))
    upgrades = _compare(environments, member_stack(name, UPGRADES), lambda top, config: render_fleet_text(
        fleet, environments.relative_path, top, config, upgrades=True))
    return [replace(shared, warnings=tuple(fleet.warnings)),
            *(_render_environment(environments, member) for member in fleet.members), upgrades]


def plan_render(environments: EnvironmentsFile, name: str) -> RenderedStack:
    """What rendering stack `name` would write (an environment's, or a fleet member's), and the
    state of the file there now. A fleet environment's own stack: plan_renders."""
    environment, member = environments.stacks().get(name, (name, None))
    if member == UPGRADES:
        return plan_renders(environments, environment)[-1]
    if member is not None:
        return _render_environment(environments, effective_fleet(environments, environment).member(member))
    if is_fleet(environments, name):
        return plan_renders(environments, name)[0]
    return _render_environment(environments, effective_environment(environments, name))


def _render_environment(environments: EnvironmentsFile, effective: EffectiveEnvironment) -> RenderedStack:
    # Names unique across Azure are written into the stack file, kept from the file on disk
    # (environments/global_names.py): no re-render or aksgpu upgrade renames a registry or vault.
    on_disk = _spec_on_disk(stack_path(environments, effective.environment.name), CLUSTER_KEY)
    effective = replace(effective, spec=with_global_names(effective.spec, on_disk))
    rendered = _compare(environments, effective.environment.name, lambda top, config: render_text(
        effective, environments.relative_path, top, config))
    return replace(rendered, warnings=tuple(effective.warnings), spec=effective.spec)


def _spec_on_disk(path: Path, key: str) -> Any:
    """The `key` value of the stack file at `path`: None when there is no file, UNREADABLE when it
    cannot be read (it may belong to resources that exist, so their names must not move)."""
    if not path.exists():
        return None
    document = _parse_existing(path)[0]
    config = document.get("config") if isinstance(document, dict) else None
    value = config.get(key) if isinstance(config, dict) else None
    return value if isinstance(value, dict) else UNREADABLE


def _compare(environments: EnvironmentsFile, name: str, render: Any) -> RenderedStack:
    """`render(kept top-level keys, kept config)`'s text for stack `name`, and the file's state now."""
    path = stack_path(environments, name)
    existing = read_text_if_exists(path)
    kept_top: dict[str, Any] = {}
    kept_config: dict[str, Any] = {}
    state: State = "new"
    reason = ""
    document: Any = None
    if existing is not None:
        document, problem = _parse_existing(path)
        if isinstance(document, dict):
            kept_top = {key: value for key, value in document.items() if key != "config"}
            config: dict[str, Any] = document["config"] if isinstance(document.get("config"), dict) else {}
            kept_config = {key: value for key, value in config.items() if key not in (*SPEC_KEYS, DIGEST_KEY)}
        state, reason = _existing_state(existing, document, problem)
    text = render(kept_top, kept_config)
    if state == "stale" and text == existing:
        state = "current"
    impact = RenderImpact()
    if document is not None and state != "current":
        impact = render_impact(with_named_cluster(document), yaml.safe_load(text))
    return RenderedStack(name, path, text, existing, state, reason, impact=impact)


def with_named_cluster(document: Any) -> Any:
    """The stack document with the names its spec (a cluster's, or a fleet's shared stack's) left to
    the suffix-less derivation written in."""
    cluster = cluster_of(document)
    if isinstance(cluster, dict):
        return {**document, "config": {**document["config"], CLUSTER_KEY: as_named_on_disk(cluster)}}
    fleet = config_value(document, FLEET_KEY)
    if isinstance(fleet, dict):
        return {**document, "config": {**document["config"], FLEET_KEY: as_fleet_named_on_disk(fleet)}}
    return document


# The last stack file parsed, by its bytes: rendering an environment reads it twice, one read right
# after the other (_spec_on_disk for its names, _compare for its state), and parsing it (PyYAML in
# Python) is about 4 ms of the example's `validate --spec-only` per file (issue 28).
_last_parsed: list[tuple[Path, bytes, tuple[Any, str]]] = []


def _parse_existing(path: Path) -> tuple[Any, str]:
    """The stack file's document and "", or None and why it cannot be read; the same bytes of the
    same file are parsed once (the document is shared: neither reader changes it)."""
    try:
        with path.open("rb") as stream:
            data: bytes | None = stream.read(MAX_YAML_BYTES + 1)
    except OSError:
        data = None
    if data is not None and _last_parsed and _last_parsed[0][:2] == (path, data):
        return _last_parsed[0][2]
    try:
        parsed: tuple[Any, str] = (load_yaml(path), "")
    except UserError as error:
        parsed = (None, str(error))
    _last_parsed[:] = [(path, data, parsed)] if data is not None else []
    return parsed


def _existing_state(text: str, document: Any, problem: str) -> tuple[State, str]:
    if problem:
        return "hand-edited", f"it is not valid YAML ({problem})"
    config = document.get("config") if isinstance(document, dict) else None
    if not isinstance(config, dict) or DIGEST_KEY not in config:
        return "hand-edited", f"it was not written by `aksgpu render` (it has no {DIGEST_KEY})"
    key = next((key for key in SPEC_KEYS if key in config), CLUSTER_KEY)
    if value_digest(config.get(key)) != config[DIGEST_KEY]:
        return "hand-edited", f"its {key} values were changed after it was rendered"
    # No stamp: Pulumi rewrote the file (it drops comments); the values are as rendered.
    if stamp_state(text, owned=aksgpu_text) == "edited":
        return "hand-edited", "its text (comments or layout) was changed after it was rendered"
    return "stale", ""


def write_rendered(rendered: RenderedStack, force: bool = False, allow_replace: bool = False) -> Path | None:
    """Write a rendered stack file; a hand-edited one only with `force`, after a backup; one that
    moves a field Azure cannot change in place only with `allow_replace`.

    Returns the backup path when one was made.
    """
    if rendered.state == "current":
        return None
    if rendered.refusal() and not allow_replace:
        raise UserError(rendered.refusal())
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

    def __init__(self, message: str, exit_code: int, problems: Sequence[Problem] = (),
                 source: str | None = None) -> None:
        super().__init__(message, problems, source)
        self.exit_code = exit_code


def render_state(stack_file: StackFile, environments: EnvironmentsFile | None = None) -> RenderedStack | None:
    """How a stack file compares with what its environment renders; None when it belongs to no
    environment of the project's environments.yaml. Raises EnvironmentNotRendered when
    environments.yaml is unreadable, the environment has errors, or the stack file was rendered
    from an environment environments.yaml no longer defines. `environments`: the project's, where the
    caller has read it already (its fleets are then resolved once for all their members)."""
    from aksgpu.environments.file import load_environments
    from aksgpu.spec import SpecError

    name = stack_file.stack
    fix = (f"Fix: correct it (`aksgpu validate {name}` lists every problem), then `aksgpu render {name}`; "
           f"until then {stack_file.path.name} may not be what the environment says.")
    try:
        if environments is None or environments.project_dir != stack_file.project_dir:
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
        raise EnvironmentNotRendered(f"environments.yaml has errors for environment {name}:\n{error}\n{fix}", 1,
                                     problems=error.problems, source=error.source) from None
    except EnvironmentNotRendered:
        raise
    except UserError as error:
        raise EnvironmentNotRendered(f"{error}\n{fix}", 2, problems=error.problems, source=error.source) from None
