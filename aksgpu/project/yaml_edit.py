"""Set one value in a YAML text (environments.yaml) without touching anything else: the user's
comments, order, quoting and blank lines stay. A path is a list of steps: a mapping key, or
(key, value) for the item of a sequence whose `key` is `value` (nodePools by name). Missing
mappings and items are added in block style at their siblings' indentation, or inside a flow
mapping (`{...}`) in flow style; an empty mapping or a flow list (`[...]`) is refused. The result
is read back by the caller and must equal the old document with the one value set (`set_value`
on the parsed data)."""

from __future__ import annotations

import copy
import json
from typing import Any

import yaml

from aksgpu.errors import MISSING, Problem, UserError

Step = str | tuple[str, str]


def re_plain(value: str) -> bool:
    """Whether `value` reads back as the same string when written without quotes."""
    try:
        return bool(value) and value.strip() == value and "#" not in value and ": " not in value \
            and yaml.safe_load(value) == value
    except yaml.YAMLError:
        return False


def _where(path: list[Step]) -> str:
    return ".".join(s if isinstance(s, str) else f"[{s[0]}={s[1]}]" for s in path)


def set_value(data: Any, path: list[Step], value: Any) -> Any:
    """`data` (parsed YAML) with `value` at `path`, as set_in_text must read back."""
    data = copy.deepcopy(data) if data is not None else {}
    node = data
    for index, step in enumerate(path):
        last = index == len(path) - 1
        if isinstance(step, str):
            if last:
                node[step] = value
            else:
                nxt = path[index + 1]
                node = node.setdefault(step, [] if isinstance(nxt, tuple) else {})
        else:
            key, name = step
            item = next((i for i in node if isinstance(i, dict) and i.get(key) == name), None)
            if item is None:
                item = {key: name}
                node.append(item)
            node = item
    return data


def _build(steps: list[Step], value: Any) -> Any:
    if not steps:
        return value
    step, rest = steps[0], steps[1:]
    if isinstance(step, str):
        return {step: _build(rest, value)}
    return [{step[0]: step[1], **_build(rest, value)}]


def _dump(data: Any, indent: int) -> str:
    text = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True, width=1000)
    return "".join(" " * indent + line if line.strip() else line for line in text.splitlines(keepends=True))


def _last_index(node: yaml.Node) -> int:
    """The text index just after the node's last character (its last scalar's end)."""
    if isinstance(node, yaml.MappingNode) and node.value:
        return _last_index(node.value[-1][1])
    if isinstance(node, yaml.SequenceNode) and node.value:
        return _last_index(node.value[-1])
    return int(node.end_mark.index)


def _line_end(text: str, index: int) -> int:
    end = text.find("\n", index)
    return len(text) if end == -1 else end + 1


def _refuse(path: list[Step], why: str) -> UserError:
    return UserError(problems=[Problem(_where(path), MISSING, f"aksgpu sets a pin only in block-style YAML ({why})",
                                       "write it in block style (one key per line), or set the value by hand")])


def set_in_text(text: str, path: list[Step], value: Any) -> str:
    """`text` with `value` (a string or number) at `path`."""
    root = yaml.compose(text) or yaml.compose("{}")
    node: yaml.Node = root
    for index, step in enumerate(path):
        rest = path[index:]
        if isinstance(step, str):
            if not isinstance(node, yaml.MappingNode):
                raise _refuse(path, f"{_where(path[:index]) or 'the document'} is not a mapping")
            found = next((v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == step), None)
            if found is not None:
                node = found
                continue
            if node.flow_style and node.value and text[node.end_mark.index - 1] == "}":
                # A flow mapping ({name: h100, maxCount: 2}) gets the new key in flow style too.
                flow = yaml.safe_dump(_build(rest, value), default_flow_style=True, width=10_000).strip()
                at = node.end_mark.index - 1
                return text[:at] + ", " + flow[1:-1] + text[at:]
            if node.flow_style or not node.value:
                raise _refuse(path, f"{_where(path[:index]) or 'the document'} is empty or in flow style")
            column = node.value[0][0].start_mark.column
            at = _line_end(text, _last_index(node))
            block = _dump(_build(rest, value), column)
            prefix = "" if at == 0 or text[at - 1] == "\n" else "\n"
            return text[:at] + prefix + block + text[at:]
        key, name = step
        if not isinstance(node, yaml.SequenceNode) or node.flow_style or not node.value:
            raise _refuse(path, f"{_where(path[:index])} is not a list in block style")
        item = next((i for i in node.value if isinstance(i, yaml.MappingNode) and any(
            isinstance(k, yaml.ScalarNode) and k.value == key and isinstance(v, yaml.ScalarNode) and v.value == name
            for k, v in i.value)), None)
        if item is not None:
            node = item
            continue
        first = node.value[0]
        line_start = text.rfind("\n", 0, first.start_mark.index) + 1
        dash = text.find("-", line_start)
        at = _line_end(text, _last_index(node))
        block = _dump(_build(rest, value), dash - line_start)
        prefix = "" if at == 0 or text[at - 1] == "\n" else "\n"
        return text[:at] + prefix + block + text[at:]
    if not isinstance(node, yaml.ScalarNode):
        raise _refuse(path, "it holds a mapping or a list, not a value")
    plain = isinstance(value, str) and node.style is None and re_plain(value)
    rendered = value if plain else json.dumps(value) if isinstance(value, str) else str(value)
    return text[:node.start_mark.index] + rendered + text[node.end_mark.index:]
