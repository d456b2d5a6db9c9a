"""The text of a rendered stack file: deterministic YAML, the digest of the spec it holds, and the
part of the file aksgpu answers for (what tells a stale file from one edited by hand)."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import yaml

from aksgpu.stack_config import DIGEST_KEY, SPEC_KEYS


def value_digest(cluster: Any) -> str:
    canonical = json.dumps(cluster, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


# --- YAML layout -----------------------------------------------------------------------------


class _StackDumper(yaml.SafeDumper):
    """Block style with indented sequences; short lists of scalars and empty containers inline."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> Any:
        return super().increase_indent(flow, False)

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _represent_list(dumper: yaml.SafeDumper, data: list) -> Any:
    inline = all(isinstance(item, (str, int, float, bool)) or item is None for item in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=inline)


def _represent_dict(dumper: yaml.SafeDumper, data: dict) -> Any:
    return dumper.represent_mapping("tag:yaml.org,2002:map", data.items(), flow_style=not data)


_StackDumper.add_representer(list, _represent_list)
_StackDumper.add_representer(dict, _represent_dict)


def to_yaml(value: Any) -> str:
    """Deterministic YAML for stack files (key order kept, no line folding)."""
    return yaml.dump(value, Dumper=_StackDumper, sort_keys=False, default_flow_style=False,
                     allow_unicode=True, width=10_000).rstrip("\n")


# A top-level key, or an entry of config: (its keys hold a colon: aksgpu:cluster, azure-native:location).
_TOP_LEVEL_KEY = re.compile(r"^(?P<key>[^\s#-][^\s]*?):(\s|$)")
_CONFIG_KEY = re.compile(r"^  (?P<key>[^\s#][^\s]*?):(\s|$)")


def aksgpu_text(text: str) -> str:
    """The part of a stack file aksgpu answers for: its comments and the aksgpu:cluster and
    aksgpu:renderDigest entries of config, without blank lines. The keys Pulumi adds or changes
    (encryptionsalt, secretsprovider, `pulumi config set` values) are left out, so they do not
    make the file count as edited by hand; render keeps them."""
    kept: list[str] = []
    skip_deeper_than: int | None = None
    in_config = False
    for line in text.splitlines(keepends=True):
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        if skip_deeper_than is not None:
            if indent > skip_deeper_than:
                continue
            skip_deeper_than = None
        top = _TOP_LEVEL_KEY.match(line)
        if top is not None:
            in_config = top.group("key") == "config"
            if not in_config:
                skip_deeper_than = 0
                continue
        entry = _CONFIG_KEY.match(line) if in_config else None
        if entry is not None and entry.group("key") not in (*SPEC_KEYS, DIGEST_KEY):
            skip_deeper_than = 2
            continue
        kept.append(line)
    return "".join(kept)


