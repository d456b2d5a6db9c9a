"""aksgpu/program/alias_urns.py: the engine receives the same registrations whether alias URNs are computed
eagerly (the SDK as shipped) or deferred, on engines with alias specs and on older ones without.

Each run is a fresh process (the deferral patches the SDK for its process) of tests/registrations.py,
which records every RegisterResource request of a program as the mock monitor receives it. Both
runs of a comparison share one hash seed, so lists the SDK fills from sets come out in the same
order, except those whose order depends on when dependencies resolve (sorted before comparing).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from pulumi.runtime.proto import resource_pb2

from tests.helpers import EXAMPLE, REPO

RECORD = REPO / "tests" / "registrations.py"
DEFERRED_LEFT = "deferred alias URNs left:"

# aksgpu's program, then how many alias URNs are still deferred once every resource is constructed
# (read straight from each resource's __dict__, which computes nothing).
COUNTING_PROGRAM = f'''
import gc
import pulumi
from aksgpu.program import run

run()
print("{DEFERRED_LEFT}", sum(type(entry).__name__ == "_DeferredAliasUrn" for resource in gc.get_objects()
                             if isinstance(resource, pulumi.Resource)
                             for entry in resource.__dict__.get("_aliases", [])))
'''

# A component with an alias parenting a resource with its own: the one shape where an older engine
# reads a parent's alias URNs (all_aliases in pulumi/runtime/resource.py), which aksgpu's own
# components never have. The child's name starts with the parent's, so the parent's old name
# carries over into the child's inherited alias; the parent has a parent of its own, which its alias
# URN must keep. A direct call of the SDK function, outside
# Resource.__init__, must still get its URN Output.
ALIASED_PARENT_PROGRAM = f'''
import pulumi
import pulumi.resource
from aksgpu.program.alias_urns import defer_alias_urns

defer_alias_urns()
root = pulumi.ComponentResource("test:index:Root", "root", None)
parent = pulumi.ComponentResource("test:index:Parent", "parent", None,
                                  pulumi.ResourceOptions(parent=root, aliases=[pulumi.Alias(name="old-parent")]))
child = pulumi.CustomResource("test:index:Child", "parent-child", {{"size": 1}},
                              pulumi.ResourceOptions(parent=parent, aliases=[pulumi.Alias(type_="test:v1:Child")]))
print("{DEFERRED_LEFT}", sum(type(entry).__name__ == "_DeferredAliasUrn"
                             for resource in (parent, child) for entry in resource.__dict__["_aliases"]))
direct = pulumi.resource.collapse_alias_to_urn(pulumi.Alias(type_="test:v0:Child"), "x", "test:index:Child", None)
print("direct call:", type(direct).__name__)
'''

# An alias whose URN cannot be computed: the SDK fails the program at its end, even on an engine
# with alias specs that never needs the URN; with the deferral it must still.
BAD_ALIAS_PROGRAM = '''
import pulumi
from aksgpu.program.alias_urns import defer_alias_urns

defer_alias_urns()
pulumi.CustomResource("test:index:Thing", "thing", {}, pulumi.ResourceOptions(aliases=[pulumi.Alias(name=None)]))
'''


def _canonical(request: resource_pb2.RegisterResourceRequest) -> dict[str, Any]:
    """A request as a dict, with the lists the SDK fills in the order dependencies resolve sorted."""
    document = json_format.MessageToDict(request)
    if "dependencies" in document:
        document["dependencies"] = sorted(document["dependencies"])
    for dependencies in document.get("propertyDependencies", {}).values():
        dependencies["urns"] = sorted(dependencies.get("urns", []))
    return document


def _registrations(project: Path, stack: str, tmp_path: Path, *flags: str) -> tuple[list[tuple[str, dict]], str]:
    """Every request of one run, by URN (the order requests arrive in varies from run to run),
    and what the program printed."""
    out = tmp_path / f"registrations{''.join(flags)}.json"
    environment = {**os.environ, "PYTHONHASHSEED": "0"}
    environment.pop("AKSGPU_EAGER_ALIAS_URNS", None)
    result = subprocess.run([sys.executable, str(RECORD), stack, str(out), *flags], cwd=project, env=environment,
                            capture_output=True, text=True, check=True)
    requests = json.loads(out.read_text(encoding="utf-8"))["requests"]
    return (sorted((entry["urn"], _canonical(resource_pb2.RegisterResourceRequest.FromString(
        bytes.fromhex(entry["request"])))) for entry in requests), result.stdout)


def _project(tmp_path: Path, program: str, stack_file: Path | None = None) -> Path:
    project = tmp_path / "project"
    (project / "stacks").mkdir(parents=True)
    shutil.copy(EXAMPLE / "Pulumi.yaml", project / "Pulumi.yaml")
    (project / "__main__.py").write_text(program)
    if stack_file is not None:
        shutil.copy(stack_file, project / "stacks" / "Pulumi.test.yaml")
    else:  # resolve_stack wants an aksgpu:cluster entry; these programs do not read it.
        (project / "stacks" / "Pulumi.test.yaml").write_text("config:\n  aksgpu:cluster: {}\n")
    return project


def _deferred_left(output: str) -> int:
    return int(next(line for line in output.splitlines() if line.startswith(DEFERRED_LEFT)).split(":")[1])


@pytest.mark.parametrize(("environment", "engine"), [("dev", "alias specs"), ("dev", "alias URNs"),
                                                     ("prod", "alias specs")])
@pytest.mark.slow
def test_the_program_registers_the_same_with_deferred_alias_urns(environment: str, engine: str,
                                                                 tmp_path: Path) -> None:
    project = _project(tmp_path, COUNTING_PROGRAM, EXAMPLE / "stacks" / f"Pulumi.{environment}.yaml")
    flags = [] if engine == "alias specs" else ["--no-alias-specs"]
    deferred, deferred_output = _registrations(project, "stacks/Pulumi.test.yaml", tmp_path, *flags)
    eager, eager_output = _registrations(project, "stacks/Pulumi.test.yaml", tmp_path, *flags, "--eager")

    assert len(deferred) == len(eager) > 40
    assert [urn for urn, _ in deferred] == [urn for urn, _ in eager]
    assert [urn for (urn, request), (_, eager_request) in zip(deferred, eager, strict=True)
            if request != eager_request] == []
    field = "aliases" if engine == "alias specs" else "aliasURNs"
    sent = sum(len(request.get(field, [])) for _, request in deferred)
    assert sent > 100  # azure-native's aliases: one per older API version of each type
    # Deferred: every alias of the program (aksgpu's components have none of their own); eager: none.
    assert _deferred_left(deferred_output) == sum(len(request.get("aliases", request.get("aliasURNs", [])))
                                                  for _, request in deferred)
    assert _deferred_left(eager_output) == 0


@pytest.mark.parametrize("engine", ["alias specs", "alias URNs"])
def test_a_parent_with_aliases_gives_its_children_the_same_aliases(engine: str, tmp_path: Path) -> None:
    project = _project(tmp_path, ALIASED_PARENT_PROGRAM)
    flags = [] if engine == "alias specs" else ["--no-alias-specs"]
    deferred, deferred_output = _registrations(project, "stacks/Pulumi.test.yaml", tmp_path, *flags)
    eager, eager_output = _registrations(project, "stacks/Pulumi.test.yaml", tmp_path, *flags, "--eager")
    assert deferred == eager
    child = next(request for urn, request in deferred if urn.endswith("::parent-child"))
    if engine == "alias URNs":
        # Its own alias, the parent's alias inherited, and the two combined: the parent's URNs were read.
        assert len(child["aliasURNs"]) == 3
        assert any(urn.endswith("::old-parent-child") and "test:index:Root$" in urn
                   for urn in child["aliasURNs"])
    else:
        assert len(child["aliases"]) == 1
    # Counted once both are constructed, before registration: deferred with the change, computed without.
    assert (_deferred_left(deferred_output), _deferred_left(eager_output)) == (2, 0)
    assert "direct call: Output" in deferred_output


@pytest.mark.parametrize("flags", [[], ["--eager"]])
def test_an_alias_whose_urn_cannot_be_computed_still_fails_the_program(flags: list[str], tmp_path: Path) -> None:
    project = _project(tmp_path, BAD_ALIAS_PROGRAM)
    result = subprocess.run([sys.executable, str(RECORD), "stacks/Pulumi.test.yaml", str(tmp_path / "out.json"),
                             *flags], cwd=project, capture_output=True, text=True)
    assert result.returncode != 0 and "No valid 'name' passed in for alias." in result.stderr


@pytest.mark.parametrize(("setup", "expected"), [
    ("", "True True False"),
    ("import os; os.environ['AKSGPU_EAGER_ALIAS_URNS'] = '1'", "False False True"),
    ("import pulumi._version; pulumi._version._VERSION = '3.999.0'", "False False True"),
])
def test_it_acts_only_on_tested_sdk_versions_and_can_be_turned_off(setup: str, expected: str) -> None:
    # Twice, to show a second call changes nothing; then whether Resource and its module are patched.
    code = (f"import logging; logging.basicConfig(level=logging.DEBUG)\n{setup}\n"
            "import pulumi.resource, pulumi.runtime.resource\nfrom aksgpu.program.alias_urns import defer_alias_urns\n"
            "first, second = defer_alias_urns(), defer_alias_urns()\nassert first == second\n"
            "print(first, '_aliases' in pulumi.resource.Resource.__dict__,\n"
            "      pulumi.resource.collapse_alias_to_urn is pulumi.runtime.resource.collapse_alias_to_urn)")
    environment = {key: value for key, value in os.environ.items() if key != "AKSGPU_EAGER_ALIAS_URNS"}
    result = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == expected
    if "_VERSION" in setup:
        assert "pulumi 3.999.0 is not one of ['3.272.0']" in result.stderr
