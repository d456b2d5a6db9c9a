"""Generated hostile inputs for aksgpu's commands: seeded, so a failure is reproducible.

Each generated case is a file's bytes (a stack file or stacks/environments.yaml) built from the
repository's examples and presets by a few mutations drawn from the classes of input that
broke aksgpu before: non-finite and huge numbers, unencodable and overlong strings, names Azure
would refuse, deep nesting, tags outside YAML's core schema, duplicate keys and list items,
overrides that name nothing, bytes that are not UTF-8, and truncated or mangled text.
Used by tests/test_fuzz.py (a few hundred cases per run) and tests/benchmark_validate.py.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.helpers import EXAMPLE

HOSTILE_VALUES: list[Any] = [
    None, True, False, 0, -1, 1, 7, 1000, 1001, 2**31, 2**63, 10**30, -(10**30), 0.5, 1e308, -0.0,
    float("nan"), float("inf"), float("-inf"),
    "", " ", "x" * 300, "a_b", "UPPER", "-lead", "trail-", "a--b", "ü名前", "tab\there", "new\nline",
    "\x00", "eastus22", "Standard_B1s", "Standard_B2s", "Standard_D2_v2", "Standard_NC4as_T4_v3", "spot",
    "1.2.3.4/33", "10.0.0.0/8", "0.0.0.0/0", "not-a-guid", "11111111-1111-1111-1111-111111111111",
    "${env:HOME}", "../../etc/passwd", "Free", "Premium", "Ephemeral", "AzureLinux", "kubenet",
    [], {}, [None], [[]], {"x": 1}, ["1", "1"], ["4"], {"_remove": True},
]
RAW_SCALARS = [".nan", ".inf", "-.Inf", "!!set {a}", "!!binary aGk=", "!!python/name:os.system", "!custom x",
               '"\\ud800"', "2025-01-31", "0x1F", "1_000", "~", "&a [1]", "*undefined", "'unclosed", "[unclosed",
               "9" * 5000]


@dataclass(frozen=True)
class Case:
    """One generated input: which file it is, its bytes, and how it was made (for messages)."""

    kind: str  # "stack" (a stack file) or "environments" (stacks/environments.yaml)
    data: bytes
    how: str


def _stack_cluster(env: str) -> dict[str, Any]:
    document = yaml.safe_load((EXAMPLE / "stacks" / f"Pulumi.{env}.yaml").read_text(encoding="utf-8"))
    return document["config"]["aksgpu:cluster"]


def _environments() -> dict[str, Any]:
    return yaml.safe_load((EXAMPLE / "stacks" / "environments.yaml").read_text(encoding="utf-8"))


class Generator:
    """Seeded generator of hostile cases (see the module docstring)."""

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)
        self.clusters = [_stack_cluster("dev"), _stack_cluster("prod")]
        self.environments = _environments()

    def cases(self, count: int) -> Iterator[Case]:
        for _ in range(count):
            yield self.case()

    def case(self) -> Case:
        if self.random.random() < 0.6:
            document: Any = {"config": {"aksgpu:cluster": copy.deepcopy(self.random.choice(self.clusters))}}
            kind = "stack"
            root = document["config"]["aksgpu:cluster"]
        else:
            document = copy.deepcopy(self.environments)
            kind = "environments"
            root = document
        steps = [self._mutate_tree(root) for _ in range(self.random.randint(1, 3))]
        text = yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=10**6)
        if self.random.random() < 0.35:
            text, step = self._mutate_text(text)
            steps.append(step)
        data = text.encode("utf-8", errors="surrogatepass")
        if self.random.random() < 0.05:
            position = self.random.randrange(len(data))
            data = data[:position] + bytes([self.random.choice([0xFF, 0xC3, 0x80, 0xFE])]) + data[position:]
            steps.append(f"byte inserted at {position}")
        return Case(kind, data, "; ".join(steps))

    # --- tree mutations ------------------------------------------------------------------

    def _nodes(self, value: Any, path: str = "") -> list[tuple[Any, Any, str]]:
        """(container, key or index, path) of every value under `value`."""
        found: list[tuple[Any, Any, str]] = []
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
        for key, item in items:
            child = f"{path}.{key}" if isinstance(value, dict) else f"{path}[{key}]"
            found.append((value, key, child))
            found += self._nodes(item, child)
        return found

    def _mutate_tree(self, root: Any) -> str:
        nodes = self._nodes(root)
        if not nodes:
            return "empty"
        container, key, path = self.random.choice(nodes)
        roll = self.random.random()
        if roll < 0.55:
            value = copy.deepcopy(self.random.choice(HOSTILE_VALUES))
            container[key] = value
            return f"{path} = {value!r:.40}"
        if roll < 0.65:
            nested: Any = "deep"
            for _ in range(self.random.choice([10, 70, 120])):
                nested = [nested]
            container[key] = nested
            return f"{path} nested deeply"
        if roll < 0.75 and isinstance(container, dict):
            del container[key]
            return f"{path} deleted"
        if roll < 0.85 and isinstance(container, list) and container:
            container.append(copy.deepcopy(container[key]))
            return f"{path} duplicated"
        if roll < 0.92 and isinstance(container[key], dict):
            container[key][self.random.choice(["nmae", "_remove", "maxcount", "Name", "extra"])] = True
            return f"{path} unknown key"
        if isinstance(container[key], dict) and "name" in container[key]:
            container[key]["name"] = self.random.choice(["x" * 61, "a_b", "A", "-", "pool-with-dash", "ü", ""])
            return f"{path}.name renamed"
        container[key] = self.random.choice([{"name": "nosuchpool", "_remove": True}, "nosuch", 3])
        return f"{path} replaced"

    # --- text mutations ------------------------------------------------------------------

    def _mutate_text(self, text: str) -> tuple[str, str]:
        lines = text.splitlines(keepends=True)
        index = self.random.randrange(len(lines))
        roll = self.random.random()
        if roll < 0.3:
            return "".join(lines[:index + 1] + [lines[index]] + lines[index + 1:]), f"line {index + 1} doubled"
        if roll < 0.5:
            return text[:self.random.randrange(len(text))], "truncated"
        if roll < 0.8 and ":" in lines[index]:
            head, _, _ = lines[index].partition(":")
            scalar = self.random.choice(RAW_SCALARS)
            lines[index] = f"{head}: {scalar}\n"
            return "".join(lines), f"line {index + 1} = {scalar:.30}"
        position = self.random.randrange(len(text))
        junk = self.random.choice(["\t", "{", "]", '"', "- ", ": ", "\n  x", "#", "&a", "*a", "%"])
        return text[:position] + junk + text[position:], f"{junk!r} inserted at {position}"


def write_case(case: Case, project: Path) -> list[str]:
    """Put `case` into `project` (a copy of the repository's project); the validate arguments for it."""
    stacks = project / "stacks"
    if case.kind == "stack":
        (stacks / "Pulumi.fuzz.yaml").write_bytes(case.data)
        return ["validate", "stacks/Pulumi.fuzz.yaml"]
    (stacks / "environments.yaml").write_bytes(case.data)
    return ["validate"]


def handled_outcome(result: Any, where: str) -> int:
    """Assert that a command's run on a generated case ended in a message and a documented exit
    code (a failure names its fix); returns the exit code."""
    assert result.exit_code in (0, 1, 2), f"{where}: exit {result.exit_code}\n{result.output[-2000:]}"
    assert result.exception is None or isinstance(result.exception, SystemExit), where
    assert "Traceback" not in result.output and "internal error" not in result.output, where
    if result.exit_code:
        assert "Fix:" in result.output, f"{where}: a failure without a fix\n{result.output[-2000:]}"
    return result.exit_code
