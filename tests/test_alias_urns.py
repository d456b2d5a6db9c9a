"""aksgpu/alias_urns.py: the engine receives the same registrations whether alias URNs are computed
eagerly (the SDK as shipped) or deferred, on engines with alias specs and on older ones without.

Each run is a fresh process (the deferral patches the SDK for its process) of tests/registrations.py,
which records every RegisterResource request of the real program as the mock monitor receives it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from pulumi.runtime.proto import resource_pb2

from tests.helpers import EXAMPLE, REPO

RECORD = REPO / "tests" / "registrations.py"

# A component with an alias parenting a resource with its own: the one shape where an older engine
# needs a parent's alias URNs (all_aliases in pulumi/runtime/resource.py), which aksgpu's own
# components never have. The child's name starts with the parent's, so the parent's old name
# carries over into the child's inherited alias.
ALIASED_PARENT_PROGRAM = '''
import pulumi
from aksgpu.alias_urns import defer_alias_urns

defer_alias_urns()
parent = pulumi.ComponentResource("test:index:Parent", "parent", None,
                                  pulumi.ResourceOptions(aliases=[pulumi.Alias(name="old-parent")]))
child = pulumi.CustomResource("test:index:Child", "parent-child", {"size": 1},
                              pulumi.ResourceOptions(parent=parent, aliases=[pulumi.Alias(type_="test:v1:Child")]))
deferred = sum(type(entry).__name__ == "_DeferredAliasUrn"
               for resource in (parent, child) for entry in list.__iter__(resource.__dict__["_aliases"]))
pulumi.export("deferred", deferred)
print("deferred alias URNs left:", deferred)
'''


def _canonical(request: Any) -> dict[str, Any]:
    """A request as a dict, with the lists the SDK fills from sets (in any order) sorted."""
    document = json_format.MessageToDict(request)
    for key in ("dependencies", "aliasURNs"):
        if key in document:
            document[key] = sorted(document[key])
    if "aliases" in document:
        document["aliases"] = sorted(document["aliases"], key=json.dumps)
    for dependencies in document.get("propertyDependencies", {}).values():
        dependencies["urns"] = sorted(dependencies.get("urns", []))
    return document


def _registrations(project: Path, stack: str, tmp_path: Path, *flags: str) -> tuple[dict[str, Any], str]:
    out = tmp_path / f"registrations{''.join(flags)}.json"
    result = subprocess.run([sys.executable, str(RECORD), stack, str(out), *flags], cwd=project,
                            capture_output=True, text=True, check=True)
    requests = json.loads(out.read_text(encoding="utf-8"))["requests"]
    return ({entry["urn"]: _canonical(resource_pb2.RegisterResourceRequest.FromString(bytes.fromhex(entry["request"])))
             for entry in requests}, result.stdout)


@pytest.mark.parametrize("engine", ["alias specs", "alias URNs"])
def test_the_example_registers_the_same_with_deferred_alias_urns(engine: str, tmp_path: Path) -> None:
    flags = [] if engine == "alias specs" else ["--no-alias-specs"]
    deferred, _ = _registrations(EXAMPLE, "stacks/Pulumi.dev.yaml", tmp_path, *flags)
    eager, _ = _registrations(EXAMPLE, "stacks/Pulumi.dev.yaml", tmp_path, *flags, "--eager")
    assert sorted(deferred) == sorted(eager) and len(deferred) > 40
    field = "aliases" if engine == "alias specs" else "aliasURNs"
    assert sum(len(request.get(field, [])) for request in deferred.values()) > 100  # azure-native's aliases
    assert [urn for urn in eager if deferred[urn] != eager[urn]] == []


@pytest.mark.parametrize("engine", ["alias specs", "alias URNs"])
def test_a_parent_with_aliases_gives_its_children_the_same_aliases(engine: str, tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "stacks").mkdir(parents=True)
    (project / "Pulumi.yaml").write_text("name: gpu-clusters\nruntime: python\nstackConfigDir: stacks\n")
    (project / "__main__.py").write_text(ALIASED_PARENT_PROGRAM)
    # resolve_stack wants an aksgpu:cluster entry; this program does not read it.
    (project / "stacks" / "Pulumi.test.yaml").write_text("config:\n  aksgpu:cluster: {}\n")
    flags = [] if engine == "alias specs" else ["--no-alias-specs"]
    deferred, deferred_output = _registrations(project, "stacks/Pulumi.test.yaml", tmp_path, *flags)
    eager, eager_output = _registrations(project, "stacks/Pulumi.test.yaml", tmp_path, *flags, "--eager")
    assert deferred == eager
    child = next(request for urn, request in deferred.items() if urn.endswith("::parent-child"))
    if engine == "alias URNs":
        # Its own alias, the parent's alias inherited, and the two combined: the parent's URNs were read.
        assert len(child["aliasURNs"]) == 3 and any(urn.endswith("::old-parent-child") for urn in child["aliasURNs"])
    else:
        assert len(child["aliases"]) == 1
    # Counted as the program ends, before registration: deferred with the change, computed without.
    assert "deferred alias URNs left: 2" in deferred_output
    assert "deferred alias URNs left: 0" in eager_output


@pytest.mark.parametrize(("setup", "expected"), [
    ("", "True deferred"),
    ("import os; os.environ['AKSGPU_EAGER_ALIAS_URNS'] = '1'", "False collapse_alias_to_urn"),
    ("import pulumi._version; pulumi._version._VERSION = '3.999.0'", "False collapse_alias_to_urn"),
])
def test_it_acts_only_on_tested_sdk_versions_and_can_be_turned_off(setup: str, expected: str) -> None:
    code = (f"{setup}\nimport pulumi.resource\nfrom aksgpu.alias_urns import defer_alias_urns\n"
            "installed = defer_alias_urns(); defer_alias_urns()\n"
            "print(installed, pulumi.resource.collapse_alias_to_urn.__name__)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == expected
