"""Test helpers: a minimal valid spec, spec edits, planning a spec with the real program."""

from __future__ import annotations

import ast
import contextlib
import copy
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
import typer

from aksgpu.plan.planner import Plan, plan_stack
from aksgpu.project.stackfile import StackFile

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
# A subscription in the resource IDs tests pass: ARM takes only a GUID there (spec/resource_ids.py).
SUBSCRIPTION = "/subscriptions/6b1d8f2e-3c4a-4e5f-9a7b-1c2d3e4f5a6b"
# The example project: what `aksgpu new` writes, with a dev and a prod environment.
EXAMPLE = REPO / "examples" / "gpu-clusters"
FLEET_EXAMPLE = REPO / "examples" / "gpu-fleet"
EXAMPLES = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in (EXAMPLE / "stacks").glob("Pulumi.*.yaml"))
# `validate` as a test of a message the specs and stack files give (environments/validation.py) runs
# it: --spec-only in the default run; the full command, which also plans every environment for the
# security policies (seconds), with the slow tests.
VALIDATE_COMMANDS = [pytest.param(["validate", "--spec-only"], id="spec-only"),
                     pytest.param(["validate"], id="validate", marks=pytest.mark.slow)]


def base_spec() -> dict[str, Any]:
    """A small valid spec with one GPU pool; tests change one thing at a time."""
    return {
        "name": "gpu-test",
        "location": "westeurope",
        "resourceGroup": {"name": "rg-gpu-test"},
        "controlPlane": {"apiServer": {"authorizedIpRanges": ["20.30.40.0/24"]}},
        "nodePools": [
            {"name": "a100", "kind": "gpu", "vmSize": "Standard_NC24ads_A100_v4", "minCount": 0, "maxCount": 4},
        ],
        "access": {"aad": {"adminGroupObjectIds": ["11111111-1111-1111-1111-111111111111"]}},
        # No managed Prometheus here, so say plainly that nothing scrapes the GPU metrics.
        "gpuHealth": {"metrics": {"scraper": "none"}},
        # The AKS-managed VNet has no room for the registry's private endpoint.
        "registry": {"publicNetworkAccess": True},
    }


def edit(spec: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of `spec` with the value at a dotted path ('nodePools.0.name') set (or removed)."""
    spec = copy.deepcopy(spec)
    *parents, last = path.split(".")
    node: Any = spec
    for part in parents:
        key: Any = int(part) if part.isdigit() else part
        if isinstance(node, dict) and key not in node:
            node[key] = {}
        node = node[key]
    key = int(last) if last.isdigit() else last
    if value is REMOVE:
        node.pop(key, None)
    elif isinstance(node, list) and key == len(node):
        node.append(value)
    else:
        node[key] = value
    return spec


REMOVE = object()


def preset_spec(preset: str, **overrides: Any) -> dict[str, Any]:
    """A full spec from a preset, as `aksgpu init` would start it (names and an admin group added)."""
    from aksgpu.environments.overrides import merge
    from aksgpu.environments.presets import load_preset

    base = {"name": f"gpu-{preset}", "location": "eastus2", "resourceGroup": {"name": f"rg-gpu-{preset}"},
            "access": {"aad": {"adminGroupObjectIds": ["11111111-1111-1111-1111-111111111111"]}}}
    return merge(merge(load_preset(preset).spec, base), overrides)


def kubernetes_manifests(plan: Plan) -> list[dict[str, Any]]:
    """Every Kubernetes object of a plan, as the API server would receive it."""
    from aksgpu.plan.manifests import kubernetes_objects, manifest

    return [manifest(resource) for resource in kubernetes_objects(plan)]


def find_object(plan: Plan, kind: str, name: str) -> dict[str, Any]:
    """The one Kubernetes object of `kind` named `name` in a plan."""
    found = [m for m in kubernetes_manifests(plan) if m["kind"] == kind and m["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


def copy_project(source: Path, folder: Path) -> Path:
    """A copy of an example project's program, environments and stacks in `folder`."""
    import shutil

    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copy(source / name, folder / name)
    shutil.copytree(source / "stacks", folder / "stacks")
    return folder


def plan_spec(spec: dict[str, Any], stack: str = "test") -> Plan:
    """Plan a spec with the project's real program, as `aksgpu plan` would."""
    stack_file = StackFile(EXAMPLE, EXAMPLE / "stacks" / f"Pulumi.{stack}.yaml", stack, {"aksgpu:cluster": spec})
    return plan_stack(stack_file)


_SHARED_PLANS: dict[str, Plan] = {}


def shared_plan(spec: dict[str, Any], stack: str = "test") -> Plan:
    """plan_spec's plan of `spec`, made once per test process (tests in several files plan the same
    presets and the base spec) and handed out as a copy of its own, which a test may change. Only for
    tests that patch nothing the plan reads (a module, a table, an environment variable): the plan is
    whatever the first test to ask for it got."""
    key = json.dumps([spec, stack], sort_keys=True)
    if key not in _SHARED_PLANS:
        _SHARED_PLANS[key] = plan_spec(spec, stack)
    return copy.deepcopy(_SHARED_PLANS[key])


def typer_app_with(register: Callable[[typer.Typer], None], help_text: str) -> typer.Typer:
    """A Typer app holding only the commands `register` adds (a callback keeps them subcommands)."""
    application = typer.Typer(help=help_text)

    @application.callback()
    def main() -> None:
        pass

    register(application)
    return application


def imported_top_levels(source: str) -> set[str]:
    """The top-level names of every module `source` imports (absolute imports, anywhere in it)."""
    tree = ast.parse(source)
    found = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
             for alias in node.names}
    return found | {node.module.split(".")[0] for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0}


@contextlib.contextmanager
def local_http_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve `handler` on a free local port in a thread; yields the server's URL."""
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
