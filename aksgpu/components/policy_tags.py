"""Tags Azure Policy owns (spec.policyOwnedTags): every Azure resource aksgpu tags ignores changes to
them, so a tag a Modify or Append policy adds after create is no diff on refresh or in the daily
drift check.

Pulumi ignoreChanges takes property paths; a map key is written in bracket notation, in double
quotes with `"` escaped, e.g. tags["costCenter"] (pulumi.com/docs/reference/property-paths: keys
with special characters need bracket notation; the paths are used by the ignoreChanges resource
option; read 2026-11-27).
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi


def tag_path(name: str) -> str:
    """The ignoreChanges path of one tag: tags["name"]."""
    escaped = name.replace("\\", "\\\\").replace('"', '\\"')
    return f'tags["{escaped}"]'


def ignore_policy_tags(names: Sequence[str]) -> pulumi.ResourceTransformation:
    """A transformation (set on the cluster component, so its children inherit it) that adds
    tags["name"] to ignoreChanges of each Azure resource that has tags."""
    paths = [tag_path(name) for name in names]

    def transform(args: pulumi.ResourceTransformationArgs) -> pulumi.ResourceTransformationResult | None:
        if not args.type_.startswith("azure-native:") or not isinstance(args.props, dict) \
                or args.props.get("tags") is None:
            return None
        ignored = list(args.opts.ignore_changes or [])
        ignored += [path for path in paths if path not in ignored]
        return pulumi.ResourceTransformationResult(
            args.props, pulumi.ResourceOptions.merge(args.opts, pulumi.ResourceOptions(ignore_changes=ignored)))

    return transform
