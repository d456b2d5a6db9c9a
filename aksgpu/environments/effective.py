"""An environment resolved to its cluster spec (preset, shared overrides and its own, validated)
and the stack file text rendered from it through templates/stack.yaml.j2. Below rendering
(render.py, which compares with what is on disk) and fleets (fleet.py), which both build on it."""

from __future__ import annotations

import functools
import re
import textwrap
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aksgpu.environments.file import Environment
from aksgpu.environments.overrides import (check_override_items, check_override_keys, describe_overrides, merge,
                                           user_path)
from aksgpu.environments.presets import Preset, load_preset
from aksgpu.environments.stack_text import aksgpu_text, to_yaml, value_digest
from aksgpu.project.generated import stamp, stamp_placeholder
from aksgpu.spec.base import Issue
from aksgpu.stack_config import CLUSTER_KEY, DIGEST_KEY

if TYPE_CHECKING:
    import jinja2

    from aksgpu.spec import ClusterSpec

TEMPLATES_DIR = Path(__file__).resolve().parents[1] / "templates"


HEADER_WIDTH = 96


# A pool reads best with what it is first; the other fields follow in the model's order.
POOL_KEYS_FIRST = ("name", "kind", "vmSize", "priority", "spot", "zones", "perZone", "count", "minCount",
                   "maxCount", "team", "taints", "labels", "gpu")


@dataclass(frozen=True)
class EffectiveEnvironment:
    """An environment resolved to its validated cluster spec."""

    environment: Environment
    preset: Preset
    spec: ClusterSpec
    warnings: list[Issue]


def effective_layers(environment: Environment, layers: list[tuple[str, Any]], what: str,
                     environments_file: str) -> EffectiveEnvironment:
    """The environment's preset with `layers` (where each was written, its overrides; base first)
    merged on top, validated as a ClusterSpec; issues name the layer that set the value."""
    from aksgpu.spec import SpecError, parse_cluster_spec

    preset = load_preset(environment.preset, source=f"{what} ({environments_file})")
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
    from aksgpu.spec.base import is_missing

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


def _sections(spec: ClusterSpec, config: dict[str, Any]) -> list[dict[str, Any]]:
    from aksgpu.spec import ClusterSpec
    from aksgpu.spec.descriptions import field_descriptions

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
    gpus = f", {size.gpus} x {size.gpu_model} each" if size and size.gpus else ""
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
    from aksgpu.spec.base import one_line

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
        spec_key=CLUSTER_KEY,
        sections=_sections(effective.spec, config),
        digest_key=DIGEST_KEY,
        value_digest=value_digest(config),
        kept_config=to_yaml(kept_config) if kept_config else "",
    )
    return stamp(text, owned=aksgpu_text)
