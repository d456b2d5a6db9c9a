"""Reading YAML a person wrote, strictly: every surprise is a located problem, never a traceback.

PyYAML's safe loader accepts more than a cluster spec can mean and loses things silently: a
second `prod:` key replaces the first, `.nan` and `.inf` are numbers, `!!set`, `!!binary` and
`!!null 5` build types no field expects or turn text into something else, a double-quoted
"\\ud800" is a string that cannot be written back, a thousand nested brackets exhaust Python's
recursion limit, and a few aliases can stand for billions of values or for themselves.
`parse_yaml` turns each of these into a `YamlProblem` with the line and column where it starts,
the rule it breaks and the fix. Dates stay text.
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode

# Deeper than any cluster spec (about 8 levels); far below Python's recursion limit.
MAX_DEPTH = 64
# Values after expanding aliases; a spec with a hundred pools has a few thousand.
MAX_VALUES = 200_000
# An explicit tag either builds a type no spec field takes (!!set, !!binary, !!python/..., !custom)
# or turns text into something else (!!null 5 is null); only !!str, which keeps text text, is read.
_MERGE_TAG = "tag:yaml.org,2002:merge"
_STR_TAG = "tag:yaml.org,2002:str"


class YamlProblem(Exception):
    """Where a YAML text breaks a rule (1-based line and column), the rule and the fix."""

    def __init__(self, line: int, column: int, rule: str, fix: str) -> None:
        super().__init__(line, column, rule, fix)
        self.line, self.column, self.rule, self.fix = line, column, rule, fix

    def __str__(self) -> str:
        return f"line {self.line}, column {self.column}: {self.rule}. Fix: {self.fix}"


class _StrictConstructor(SafeConstructor):
    """SafeConstructor with text keys written once, finite numbers and text that is characters."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, Node] = {}
        merges = [key_node for key_node, _ in node.value if key_node.tag == _MERGE_TAG]
        if len(merges) > 1:
            mark = merges[1].start_mark
            raise YamlProblem(mark.line + 1, mark.column + 1, "a second merge key (<<) in one mapping; YAML keeps "
                              "only one", "merge both into one: <<: [*first, *second]")
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                written = key_node.value if isinstance(key_node, ScalarNode) else "(a list or mapping)"
                kind = {bool: "true or false", int: "a number", float: "a number", type(None): "null"}.get(
                    type(key), "a list or mapping")
                raise YamlProblem(key_node.start_mark.line + 1, key_node.start_mark.column + 1,
                                  f"the key {written} reads as {kind}, but every key here is a name (text)",
                                  f'quote it: "{written}"' if isinstance(key_node, ScalarNode) else
                                  "use a plain name as the key")
            first = seen.get(key)
            if first is not None:
                raise YamlProblem(key_node.start_mark.line + 1, key_node.start_mark.column + 1,
                                  f'the key "{key_node.value}" appears twice in one mapping (first at line '
                                  f"{first.start_mark.line + 1}); YAML keeps only the second",
                                  "merge the two into one, or delete the one you do not mean")
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, KeyError, TypeError) as error:  # a guard: _check_events refuses explicit tags
            raise YamlProblem(node.start_mark.line + 1, node.start_mark.column + 1,
                              f"the value cannot be read as {_short_tag(node.tag)} ({error})",
                              "write a plain string, number, list or mapping") from None

    def construct_yaml_float(self, node: ScalarNode) -> float:
        value = SafeConstructor.construct_yaml_float(self, node)
        if not math.isfinite(value):
            raise YamlProblem(node.start_mark.line + 1, node.start_mark.column + 1,
                              f"{node.value} is not a finite number",
                              "write a number, or quote it if you mean the text")
        return value

    def construct_yaml_int(self, node: ScalarNode) -> int:
        text = str(node.value)
        try:
            if text.startswith(("0o", "0x")):
                return int(text[2:], 8 if text[1] == "o" else 16)
            return int(text, 10)  # YAML 1.2: 010 is ten, not YAML 1.1's octal eight
        except ValueError:  # Python refuses to convert integers of more than 4300 digits
            raise YamlProblem(node.start_mark.line + 1, node.start_mark.column + 1,
                              f"{node.value[:20]}... is a number too long to read",
                              "write a number no spec field range excludes, or quote it if you mean the text") from None

    def construct_yaml_str(self, node: ScalarNode) -> str:
        value = SafeConstructor.construct_yaml_str(self, node)
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as error:
            raise YamlProblem(node.start_mark.line + 1, node.start_mark.column + 1,
                              f"the text holds {ascii(value[error.start:error.end])}, a lone surrogate that "
                              "is not a character and cannot be written to Azure or to a file",
                              "remove that \\u escape, or write the character itself") from None
        return value


_StrictConstructor.add_constructor("tag:yaml.org,2002:float", _StrictConstructor.construct_yaml_float)
_StrictConstructor.add_constructor("tag:yaml.org,2002:int", _StrictConstructor.construct_yaml_int)
_StrictConstructor.add_constructor("tag:yaml.org,2002:str", _StrictConstructor.construct_yaml_str)


def _short_tag(tag: str) -> str:
    return "!!" + tag.removeprefix("tag:yaml.org,2002:") if tag.startswith("tag:yaml.org,2002:") else tag


def decode_utf8(data: bytes) -> str:
    """`data` as text; raises YamlProblem at the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        before = data[:error.start]
        line = before.count(b"\n") + 1
        column = error.start - (before.rfind(b"\n") + 1) + 1
        raise YamlProblem(line, column, f"byte 0x{data[error.start]:02x} is not UTF-8 text",
                          "save the file as UTF-8 (an editor's \"encoding\" setting), or remove that character") \
            from None


try:  # libyaml's parser when PyYAML was built with it (the wheels are): about 20x faster
    from yaml.cyaml import CParser as _Parser
except ImportError:  # pragma: no cover - pure-Python PyYAML
    from yaml.composer import Composer
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _Parser(Reader, Scanner, Parser, Composer):  # type: ignore[no-redef]
        def __init__(self, stream: str) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)
            Composer.__init__(self)


class _CoreResolver(yaml.resolver.BaseResolver):
    """Plain scalars read as YAML 1.2's core schema, as Pulumi's own YAML reader (Go yaml.v3) reads
    stack files: only true/false are booleans (yes, no, on and off stay text), 1:30 is text (not
    YAML 1.1's base-60 90), dates are text, and numbers have no underscores."""


for _tag, _pattern, _first in (
    ("bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    ("int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", "-+0123456789"),
    ("float",
     r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
     "-+0123456789."),
    ("null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("merge", r"^(?:<<)$", "<"),
):
    _CoreResolver.add_implicit_resolver(f"tag:yaml.org,2002:{_tag}", re.compile(_pattern), list(_first))


class _StrictLoader(_Parser, _StrictConstructor, _CoreResolver):
    def __init__(self, stream: str) -> None:
        _Parser.__init__(self, stream)
        _StrictConstructor.__init__(self)
        _CoreResolver.__init__(self)


def _check_events(text: str) -> Any:
    """Refuse, before anything is built, nesting deeper than MAX_DEPTH (the composer recurses per
    level) and explicit tags other than !!str. Returns the mark of the first alias, if any."""
    parser = _Parser(text)
    depth = 0
    first_alias = None
    try:
        while (event := parser.get_event()) is not None:
            tag = getattr(event, "tag", None)
            if tag not in (None, "!", _STR_TAG) and not isinstance(event, yaml.CollectionEndEvent):
                mark = event.start_mark
                raise YamlProblem(mark.line + 1, mark.column + 1,
                                  f"the tag {_short_tag(tag)} is not read here: a spec takes plain strings, "
                                  "numbers, lists and mappings (!!str, which makes a value text, is the one tag "
                                  "allowed)", "remove the tag; quote the value if you mean text")
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    mark = event.start_mark
                    raise YamlProblem(mark.line + 1, mark.column + 1,
                                      f"values are nested more than {MAX_DEPTH} levels deep",
                                      "a cluster spec is a few levels deep; check for runaway brackets or indentation")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
            elif isinstance(event, yaml.AliasEvent) and first_alias is None:
                first_alias = event.start_mark
    finally:
        parser.dispose()
    return first_alias


def parse_yaml(text: str) -> Any:
    """The one YAML document in `text`, strictly (see the module docstring); raises YamlProblem."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        line = text.count("\n", 0, error.start) + 1
        column = error.start - (text.rfind("\n", 0, error.start) + 1) + 1
        raise YamlProblem(line, column, f"the text holds {ascii(text[error.start])}, which is not a character "
                          "(bytes that were not UTF-8)", "write it as UTF-8 text") from None
    unprintable = _UNPRINTABLE.search(text)
    if unprintable is not None:
        start = unprintable.start()
        line = text.count("\n", 0, start) + 1
        column = start - (text.rfind("\n", 0, start) + 1) + 1
        raise YamlProblem(line, column, f"U+{ord(unprintable.group()):04X} is a control character, which YAML does "
                          "not allow", "remove it (in a double-quoted string, write it as an escape such as \\t)")
    loader = None
    first_alias = None
    try:
        first_alias = _check_events(text)
        loader = _StrictLoader(text)
        document = loader.get_single_data()
    except YamlProblem:
        raise
    except ConstructorError as error:
        raise _problem(error, "remove the tag or the complex key and write plain YAML") from None
    except yaml.YAMLError as error:
        raise (_tab_problem(text, error) or _problem(error, _syntax_fix(error))) from None
    except RecursionError:  # a guard: the depth limit stops nesting long before this
        raise YamlProblem(1, 1, "the document is nested too deeply to read",
                          f"keep nesting under {MAX_DEPTH} levels") from None
    finally:
        if loader is not None:
            loader.dispose()
    _check_expanded(document, first_alias)
    return document


# Characters YAML 1.1 does not allow in a stream (PyYAML's Reader.NON_PRINTABLE; a BOM is fine).
_UNPRINTABLE = re.compile("[^\x09\x0A\x0D\x20-\x7E\x85\xA0-\uD7FF\uE000-\uFFFD\U00010000-\U0010FFFF]")


def _problem(error: yaml.YAMLError, fix: str) -> YamlProblem:
    """A located problem from PyYAML's error, placed where the problem starts.

    PyYAML places an unclosed quote or bracket at the end of the file (problem_mark) and where it
    opened in context_mark; the opening is where the person has to look.
    """
    context = getattr(error, "context", None)
    context_mark = getattr(error, "context_mark", None)
    problem = getattr(error, "problem", None) or str(error)
    problem_mark = getattr(error, "problem_mark", None)
    mark = context_mark or problem_mark
    if "single document" in (context or "") + problem and problem_mark is not None:
        return YamlProblem(problem_mark.line + 1, problem_mark.column + 1,
                           "a second YAML document (---) starts here; aksgpu reads one document per file",
                           "remove the --- and what follows it, or merge the two documents")
    if mark is None:
        return YamlProblem(1, 1, problem, fix)
    rule = f"{context}, {problem}" if context else problem
    if context_mark is not None and problem_mark is not None and problem_mark.line != context_mark.line:
        rule += f" (at line {problem_mark.line + 1})"
    return YamlProblem(mark.line + 1, mark.column + 1, rule, fix)


def _tab_problem(text: str, error: yaml.YAMLError) -> YamlProblem | None:
    """The problem when a tab character caused the error: at the error's place, or in the
    indentation of the line it names. PyYAML says only "found character '\\t' that cannot start
    any token" or a mapping error, which never names the tab."""
    lines = text.split("\n")
    for mark in (getattr(error, "problem_mark", None), getattr(error, "context_mark", None)):
        if mark is None or mark.line >= len(lines):
            continue
        line = lines[mark.line]
        if line[mark.column:mark.column + 1] == "\t":
            column = mark.column
        else:
            indent = line[:len(line) - len(line.lstrip(" \t"))]
            if "\t" not in indent:
                continue
            column = indent.index("\t")
        return YamlProblem(mark.line + 1, column + 1,
                           f"a tab character at line {mark.line + 1} column {column + 1}: YAML indents with spaces",
                           "replace tabs with spaces")
    return None


def _syntax_fix(error: yaml.YAMLError) -> str:
    context = getattr(error, "context", None) or ""
    if "escape" in (getattr(error, "problem", None) or ""):
        return "remove that \\ escape, or write the character itself"
    if "incompatible YAML document" in (getattr(error, "problem", None) or ""):
        return "remove the %YAML line (aksgpu reads YAML 1.1 and 1.2)"
    if "quoted scalar" in context:
        return "close the quote that opens here"
    if "flow" in context:
        return "close the bracket or brace that opens here"
    return "correct the indentation or quoting there"


def _check_expanded(document: Any, first_alias: Any) -> None:
    """Refuse what aliases (*name) make of a document: a value that contains itself, nesting past
    MAX_DEPTH, or more than MAX_VALUES values ("billion laughs"); reported at the first alias."""
    line, column = (first_alias.line + 1, first_alias.column + 1) if first_alias is not None else (1, 1)
    fix = "write the values out instead of the aliases (*name)"
    measured: dict[int, tuple[int, int]] = {}  # id -> (values, levels below)
    open_ids: set[int] = set()

    def measure(value: Any, depth: int) -> tuple[int, int]:
        if not isinstance(value, dict | list):
            return 1, 0
        known = measured.get(id(value))
        if known is None:
            if id(value) in open_ids:
                raise YamlProblem(line, column, "an alias refers to a value that contains it", fix)
            if depth > MAX_DEPTH:
                raise YamlProblem(line, column, f"once aliases are expanded, values are nested more than "
                                  f"{MAX_DEPTH} levels deep", fix)
            open_ids.add(id(value))
            items = list(value.keys()) + list(value.values()) if isinstance(value, dict) else value
            parts = [measure(item, depth + 1) for item in items]
            open_ids.discard(id(value))
            known = (1 + sum(count for count, _ in parts), 1 + max((levels for _, levels in parts), default=0))
            measured[id(value)] = known
        if depth + known[1] > MAX_DEPTH:
            raise YamlProblem(line, column, f"once aliases are expanded, values are nested more than {MAX_DEPTH} "
                              "levels deep", fix)
        return known

    if measure(document, 0)[0] > MAX_VALUES:
        if first_alias is None:
            raise YamlProblem(1, 1, f"the document holds more than {MAX_VALUES:,} values, far more than any "
                              "cluster spec", "check that this is the file you meant")
        raise YamlProblem(line, column, f"its aliases (*name) expand to more than {MAX_VALUES:,} values", fix)
