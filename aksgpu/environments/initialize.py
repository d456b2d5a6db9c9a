"""`aksgpu init`: add an environment to stacks/environments.yaml and render its stack file.

Everything is checked before anything is written. The new environment is appended as text, so
the rest of the file (comments, layout) stays exactly as the user wrote it; the result is read
back and compared before it replaces the file.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from aksgpu.environments.file import (
    DESCRIPTION_MAX_CHARS,
    Defaults,
    ENVIRONMENT_NAME,
    SCHEMA_FILE,
    UPGRADES,
    EnvironmentsDocument,
    EnvironmentSettings,
    EnvironmentsFile,
    load_environments,
)
from aksgpu.environments.overrides import assignment_overrides, merge
from aksgpu.environments.presets import load_preset
from aksgpu.errors import MISSING, Problem, UserError
from aksgpu.project.files import locked_for_writing, read_text_if_exists, write_text_atomically
from aksgpu.project.stackfile import find_project_dir

NEW_FILE_HEADER = """\
# yaml-language-server: $schema=./{schema}
# The authored file: each environment is a preset plus the fields that differ from it.
# `aksgpu render` turns each environment into stacks/Pulumi.<env>.yaml (the full, effective
# config Pulumi reads); edit this file, never the rendered ones.
"""


@dataclass(frozen=True)
class InitRequest:
    environment: str
    preset: str
    location: str | None = None
    name: str | None = None
    resource_group: str | None = None
    admin_groups: list[str] = field(default_factory=list)
    description: str | None = None
    assignments: list[str] = field(default_factory=list)
    force: bool = False
    # `aksgpu new`: admin_groups go into a new file's defaults.overrides, so every environment
    # added later inherits them, not only this first one.
    admin_groups_in_defaults: bool = False


@dataclass(frozen=True)
class InitOutcome:
    messages: list[str]


def add_environment(request: InitRequest, project_dir: Path | None = None) -> InitOutcome:
    """Check, then write environments.yaml (and its schema if new) and the rendered stack file,
    holding the project folder's lock from reading environments.yaml to the last write (project.files)."""
    project_dir = project_dir or find_project_dir(Path.cwd().resolve())
    with locked_for_writing(project_dir):
        return _add_environment(request, project_dir)


def _add_environment(request: InitRequest, project_dir: Path) -> InitOutcome:
    from aksgpu.environments.render import plan_render, write_rendered

    environments = load_environments(project_dir)
    env = request.environment
    if not ENVIRONMENT_NAME.fullmatch(env):
        raise UserError(problems=[Problem("ENVIRONMENT argument", env, 'an environment name is 1-64 letters, digits, '
                                          '"-", "_" or ".", starting with a letter or digit and not ending in "." '
                                          "or .yaml (it is also the Pulumi stack name and part of a file name)",
                                          'choose a name like "staging"')])
    stacks = environments.stacks()
    fleet_stack = next((name for name in stacks if name.casefold() == env.casefold() and stacks[name][1]), None)
    if fleet_stack is not None:
        fleet, member = stacks[fleet_stack]
        raise UserError(problems=[Problem("ENVIRONMENT argument", env, f"the stack of fleet environment {fleet} "
                                          f"({'its upgrades' if member == UPGRADES else f'member {member}'}), and "
                                          "init would replace its stack file", "choose another name")])
    existing = next((name for name in environments.names if name.casefold() == env.casefold()), None)
    if existing is not None:
        same = "already exists" if existing == env else f'differs only in case from "{existing}", which exists'
        raise UserError(problems=[Problem("ENVIRONMENT argument", env, f"{same} in {environments.relative_path}",
                                          "edit it there and run `aksgpu render`, or choose another name")])
    load_preset(request.preset, "--preset")  # an unknown preset fails here, with the known ones listed
    if request.admin_groups_in_defaults and request.admin_groups and not environments.exists:
        access = {"access": {"aad": {"adminGroupObjectIds": list(request.admin_groups)}}}
        environments = EnvironmentsFile(environments.project_dir, environments.path, EnvironmentsDocument(
            defaults=Defaults(overrides=access)), exists=False)
        request = dataclasses.replace(request, admin_groups=[])
    if request.description is not None and len(request.description) > DESCRIPTION_MAX_CHARS:
        raise UserError(problems=[Problem("--description", request.description,
                                          f"a description is at most {DESCRIPTION_MAX_CHARS:,} characters",
                                          "shorten it to a sentence or a paragraph")])
    settings = EnvironmentSettings(preset=request.preset, description=request.description,
                                   overrides=_overrides(request, environments))
    candidate = EnvironmentsFile(
        environments.project_dir, environments.path,
        EnvironmentsDocument(defaults=environments.document.defaults,
                             environments={**environments.document.environments, env: settings}),
        exists=True)
    rendered = plan_render(candidate, env)  # raises SpecError: nothing is written
    if rendered.state == "hand-edited" and not request.force:
        raise UserError(f"{rendered.path.name} already exists and was not rendered from this environment "
                        f"({rendered.reason}). Fix: move it away, or pass --force to replace it "
                        "(it is kept as a .bak file).")

    text = _environments_text(environments, env, settings)
    messages = []
    write_text_atomically(environments.path, text)
    verb = "added" if environments.exists else "created with"
    messages.append(f"{environments.relative_path}: {verb} environment {env} (preset {request.preset})")
    schema_path = environments.path.parent / SCHEMA_FILE
    if not schema_path.exists():
        from aksgpu.environments.schema import environments_schema

        write_text_atomically(schema_path, json.dumps(environments_schema(), indent=2) + "\n")
        messages.append(f"{schema_path.relative_to(environments.project_dir)}: created (editor completion)")
    backup = write_rendered(rendered, force=request.force)
    messages.append(f"{rendered.path.relative_to(environments.project_dir)}: rendered")
    if backup is not None:
        messages.append(f"  the previous file was kept as {backup.relative_to(environments.project_dir)}")
    messages += [f"warning: {warning}" for warning in rendered.warnings]
    messages.append(f"Next: review it, then `aksgpu plan {env}` (offline) or `aksgpu preview {env}` (Azure).")
    return InitOutcome(messages)


def _overrides(request: InitRequest, environments: EnvironmentsFile) -> dict[str, Any]:
    # An environment name may hold '.', which cluster names may not; and the name is at most 63.
    cluster_name = request.name or f"gpu-{re.sub(r'[^a-zA-Z0-9_-]', '-', request.environment)}"[:63].rstrip("-_")
    overrides: dict[str, Any] = {
        "name": cluster_name,
        "resourceGroup": {"name": request.resource_group or f"rg-{cluster_name}"},
    }
    preset = load_preset(request.preset, "--preset")
    has_location = "location" in merge(preset.spec, environments.document.defaults.overrides)
    if request.location:
        overrides["location"] = request.location
    elif not has_location:
        raise UserError(problems=[Problem("--location", MISSING, "required: neither the preset nor "
                                          f"defaults.overrides in {environments.relative_path} sets one",
                                          "pass --location eastus2 (or your region)")])
    if request.admin_groups:
        overrides["access"] = {"aad": {"adminGroupObjectIds": list(request.admin_groups)}}
    base = merge(merge(preset.spec, environments.document.defaults.overrides), overrides)
    return merge(overrides, assignment_overrides(request.assignments, base=base))


def _environments_text(environments: EnvironmentsFile, env: str, settings: EnvironmentSettings) -> str:
    """The new environments.yaml text: the old text with the environment appended."""
    entry = settings.model_dump(by_alias=True, exclude_none=True, exclude_defaults=False)
    if not entry.get("overrides"):
        entry.pop("overrides", None)
    if not environments.exists:
        defaults = environments.document.defaults.model_dump(by_alias=True, exclude_none=True, exclude_defaults=True)
        body = yaml.safe_dump({**({"defaults": defaults} if defaults else {}), "environments": {env: entry}},
                              sort_keys=False, default_flow_style=False, allow_unicode=True)
        text = NEW_FILE_HEADER.format(schema=SCHEMA_FILE) + "\n" + body
    else:
        text = _append_environment(read_text_if_exists(environments.path) or "", env, entry)
    expected = {**environments.document.environments, env: settings}
    _check_round_trip(text, expected, environments)
    return text


def _append_environment(old: str, env: str, entry: dict[str, Any]) -> str:
    """Append `env` under the `environments:` mapping, which must be the file's last block. The
    file's line endings (LF or CRLF) are kept; an empty inline `environments: {}` becomes a block."""
    newline = "\r\n" if "\r\n" in old else "\n"
    lines = old.splitlines()
    top_level = [i for i, line in enumerate(lines) if re.match(r"^[A-Za-z_][\w-]*\s*:", line)]
    empty = next((i for i in top_level if re.match(r"^environments\s*:\s*\{\s*\}\s*(#.*)?$", lines[i])), None)
    if empty is not None and empty == top_level[-1]:
        lines[empty] = "environments:"
        old = newline.join(lines) + newline
    env_line = next((i for i in top_level if re.match(r"^environments\s*:\s*(#.*)?$", lines[i])), None)
    if env_line is None and not any(re.match(r"^environments\s*:", lines[i]) for i in top_level):
        block = yaml.safe_dump({"environments": {env: entry}}, sort_keys=False, default_flow_style=False,
                               allow_unicode=True)
        return old.rstrip("\r\n") + newline * 2 + block.replace("\n", newline)
    if env_line is None or env_line != top_level[-1]:
        raise UserError("init adds environments at the end of the environments: mapping, but in this file it is "
                        "not the last top-level block (or is written inline). Fix: move environments: to the end "
                        "of the file in block style, or add the environment by hand.")
    indent = next((len(line) - len(line.lstrip(" ")) for line in lines[env_line + 1:]
                   if line.strip() and not line.lstrip().startswith("#")), 2)
    block = yaml.safe_dump({env: entry}, sort_keys=False, default_flow_style=False, indent=indent,
                           allow_unicode=True)
    indented = "".join(" " * indent + line if line.strip() else line for line in block.splitlines(keepends=True))
    return old.rstrip("\r\n") + newline * 2 + indented.replace("\n", newline)


def _check_round_trip(text: str, expected: dict[str, EnvironmentSettings], environments: EnvironmentsFile) -> None:
    """The new text must read back as the old document plus the new environment, exactly."""
    from aksgpu.project.yaml_input import parse_yaml

    try:
        document = EnvironmentsDocument.model_validate(parse_yaml(text))
    except Exception:  # noqa: BLE001 - any failure means the append went wrong
        document = None
    if document is None or document.environments != expected or document.defaults != environments.document.defaults:
        raise UserError(f"could not add the environment to {environments.relative_path} without changing what is "
                        "already there; nothing was written. Fix: add it by hand (see `aksgpu presets show`).")
