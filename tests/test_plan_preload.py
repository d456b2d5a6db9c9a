"""plan/preload.py's SDK_MODULES, what the plan workers start with, is what planning the examples
imports from the provider SDKs: after it, a plan imports no SDK module of its own, and each module
it names is one a plan of the examples imports (issue 28)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import EXAMPLE, FLEET_EXAMPLE

# Plans every stack of both examples in one process; prints the SDK modules imported before the
# plans (PRELOADED) and by them (PLANNED).
_PLAN_EXAMPLES = """
import json, os, sys
from pathlib import Path
import aksgpu.plan.planner, aksgpu.program
if sys.argv[1] == "preload":
    import aksgpu.plan.preload
from aksgpu.plan.review import Stacks
from aksgpu.project.stackfile import resolve_stack
def sdk():
    return {name for name in sys.modules if name.startswith(("pulumi_azure_native.", "pulumi_kubernetes."))}
preloaded = sdk()
for folder in sys.argv[2:]:
    os.chdir(folder)
    stacks = Stacks()
    for path in sorted(Path("stacks").glob("Pulumi.*.yaml")):
        stacks.plan(resolve_stack(path.name[len("Pulumi."):-len(".yaml")]))
print(json.dumps({"preloaded": sorted(preloaded), "planned": sorted(sdk() - preloaded)}))
"""


def _plan_examples(mode: str) -> dict[str, list[str]]:
    result = subprocess.run([sys.executable, "-c", _PLAN_EXAMPLES, mode, str(EXAMPLE), str(FLEET_EXAMPLE)],
                            capture_output=True, text=True, check=True, timeout=600)
    return json.loads(result.stdout.splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.slow
def test_after_the_preload_a_plan_of_the_examples_imports_no_sdk_module() -> None:
    assert _plan_examples("preload")["planned"] == []


@pytest.mark.slow
def test_each_preloaded_module_is_one_a_plan_of_the_examples_imports() -> None:
    code = "import json; from aksgpu.plan.preload import SDK_MODULES; print(json.dumps(SDK_MODULES))"
    modules = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                        check=True).stdout)  # importing it preloads: not in this process
    planned = set(_plan_examples("plain")["planned"])
    listed = {f"{package}.{name}" for package, names in modules.items() for name in names}
    assert listed - planned == set()
