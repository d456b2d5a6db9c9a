"""The floor an offline plan is measured against (tests/benchmark_plan.py; not part of the tests).

Run: python tests/bare_mock_program.py PLAN.json [--per-class]  (the document `aksgpu plan --json` prints)

It registers the plan's resources again, with nothing of aksgpu in between: under Pulumi's mock
runtime in preview mode, each resource with the type, name, parent, explicit provider,
dependencies, protect flag and input values the plan recorded, through pulumi.CustomResource,
pulumi.ProviderResource and pulumi.ComponentResource directly, with no aliases. The provider SDK
modules that define those types (pulumi_azure_native.*, pulumi_kubernetes.*) are imported first, as
a program using them would: as the SDKs ship (`network` imports its ~290 modules), or with
--per-class as the plan does, one module per class (aksgpu/components/sdk_modules.py), their
annotations as text and no stack trace per registration (aksgpu/plan/offline_sdk.py), so the floor
pays for the same SDK work and the ratio is aksgpu's own work alone. The collector
is off while it registers, as in the planner. What it leaves out is aksgpu's
own work: reading and validating the spec, the components' logic, the typed resource classes'
argument handling and alias lists, recording the requests, and the report.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import importlib.util
import json
import sys

import pulumi
from pulumi.runtime import mocks


class _Mocks(mocks.Mocks):
    def new_resource(self, args: mocks.MockResourceArgs) -> tuple[str | None, dict]:
        return None, {}

    def call(self, args: mocks.MockCallArgs) -> dict:
        return {}


def sdk_module(type_token: str) -> str | None:
    """The Python module of a provider SDK that exports `type_token`'s class, e.g.
    azure-native:containerservice:AgentPool -> pulumi_azure_native.containerservice."""
    package, _, rest = type_token.partition(":")
    module = rest.partition(":")[0]
    if package == "pulumi" and module == "providers":
        package, module = rest.partition(":")[2], ""
    root = {"azure-native": "pulumi_azure_native", "kubernetes": "pulumi_kubernetes"}.get(package)
    if root is None:
        return None
    if "/" in module:  # a Kubernetes group/version: rbac.authorization.k8s.io/v1 -> rbac.v1
        group, version = module.split("/", 1)
        module = f"{group.split('.')[0]}.{version}"
    return f"{root}.{module}" if module else root


def main(plan_path: str, per_class: bool = False) -> None:
    document = json.loads(open(plan_path, encoding="utf-8").read())
    adjusted = contextlib.nullcontext()
    if per_class:
        from aksgpu.components.sdk_modules import load_by_class
        from aksgpu.plan.offline_sdk import load_sdks_with_text_annotations, no_stack_traces

        load_sdks_with_text_annotations()
        load_by_class()
        adjusted = no_stack_traces()
    for type_token in sorted({r["type"] for r in document["resources"]}):
        module_name = sdk_module(type_token)
        if module_name is None:
            continue
        # The class itself, not only its package: the SDKs load each class's module lazily.
        class_name = "Provider" if type_token.startswith("pulumi:providers:") else type_token.rsplit(":", 1)[-1]
        group = module_name.rsplit(".", 1)[0]
        if module_name.startswith("pulumi_kubernetes.") and importlib.util.find_spec(group) is None:
            # A custom resource (Kueue's, the Network Operator's): the SDK's generic class.
            module_name, class_name = "pulumi_kubernetes.apiextensions", "CustomResource"
        root, *path = module_name.split(".")
        module = importlib.import_module(root)
        for part in path:  # by attribute, as a program reads them (pulumi_kubernetes.core.v1)
            module = getattr(module, part)
        getattr(module, class_name)
    gc.disable()
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    mocks.set_mocks(_Mocks(), project=document["project"], stack=document["stack"], preview=True)
    created: dict[str, pulumi.Resource] = {}

    async def program() -> None:
        for resource in document["resources"]:
            parent = created.get(resource["parent"]) if resource["parent"] else None
            opts = pulumi.ResourceOptions(
                parent=parent,
                provider=created.get(resource["provider"]) if resource.get("provider") else None,
                depends_on=[created[urn] for urn in resource["dependencies"] if urn in created],
                protect=resource["options"].get("protect", False))
            if resource["type"].startswith("pulumi:providers:"):
                package = resource["type"].removeprefix("pulumi:providers:")
                created[resource["urn"]] = pulumi.ProviderResource(package, resource["name"],
                                                                   dict(resource["inputs"]), opts)
            elif resource["custom"]:
                created[resource["urn"]] = pulumi.CustomResource(resource["type"], resource["name"],
                                                                 dict(resource["inputs"]), opts)
            else:
                created[resource["urn"]] = pulumi.ComponentResource(resource["type"], resource["name"], None, opts)

    from pulumi.runtime import stack

    with adjusted:
        loop.run_until_complete(stack.run_pulumi_func(program))
    sys.stdout.flush()
    gc.freeze()


if __name__ == "__main__":
    main(sys.argv[1], per_class="--per-class" in sys.argv[2:])
