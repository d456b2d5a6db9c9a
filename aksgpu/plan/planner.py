"""The offline plan: the real Pulumi program under Pulumi's mock runtime, recorded.

No Azure account, no Pulumi CLI and no network. The program (`__main__.py`) runs unchanged in
preview mode; a recording resource monitor keeps every registration as the engine would see it:
type, name, URN, parent, dependencies, the options that matter and the inputs exactly as the
provider would receive them (camelCase). Values the provider only knows after creating a
resource (IDs, principal IDs, endpoints) read "(known after apply)"; secrets read "[secret]".
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import contextvars
import gc
import logging
import os
import runpy
import signal
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from aksgpu.plan.offline_sdk import drop_aliases, load_sdks_with_text_annotations, no_stack_traces
from aksgpu.plan.references import referenced_stack_outputs
from aksgpu.project.stackfile import StackFile

UNKNOWN_TEXT = "(known after apply)"
SECRET_TEXT = "[secret]"
PLAN_FORMAT_VERSION = 1
# Placeholders the mock answers invokes with: plausible shapes, obviously not real values.
PLACEHOLDER_GUID = "00000000-0000-0000-0000-000000000000"

# The output that carries each Azure type's ARM name, so resources that refer to another by
# name (an AgentPool to its cluster) see the name in the plan instead of "(known after apply)".
NAME_INPUT_BY_TYPE = {
    "azure-native:resources:ResourceGroup": "resourceGroupName",
    "azure-native:network:VirtualNetwork": "virtualNetworkName",
    "azure-native:network:Subnet": "subnetName",
    "azure-native:network:NatGateway": "natGatewayName",
    "azure-native:network:PublicIPAddress": "publicIpAddressName",
    "azure-native:managedidentity:UserAssignedIdentity": "resourceName",
    "azure-native:containerservice:ManagedCluster": "resourceName",
    "azure-native:containerservice:AgentPool": "agentPoolName",
    "azure-native:containerservice:MaintenanceConfiguration": "configName",
    "azure-native:containerregistry:Registry": "registryName",
    "azure-native:keyvault:Vault": "vaultName",
    "azure-native:compute:DiskEncryptionSet": "diskEncryptionSetName",
    "azure-native:operationalinsights:Workspace": "workspaceName",
    "azure-native:monitor:AzureMonitorWorkspace": "azureMonitorWorkspaceName",
    "azure-native:monitor:DataCollectionRule": "dataCollectionRuleName",
    "azure-native:monitor:DataCollectionEndpoint": "dataCollectionEndpointName",
    "azure-native:monitor:DataCollectionRuleAssociation": "associationName",
    "azure-native:monitor:DiagnosticSetting": "name",
    "azure-native:containerservice:Fleet": "fleetName",
    "azure-native:containerservice:FleetMember": "fleetMemberName",
    "azure-native:containerservice:FleetUpdateStrategy": "updateStrategyName",
    "azure-native:containerservice:AutoUpgradeProfile": "autoUpgradeProfileName",
    "azure-native:containerregistry:Replication": "replicationName",
}


@dataclass
class PlannedResource:
    urn: str
    type: str
    name: str
    parent: str | None
    custom: bool
    dependencies: list[str]
    options: dict[str, Any]
    inputs: dict[str, Any]
    provider: str | None = None
    """URN of the explicit provider the resource is bound to (None: the default provider)."""


@dataclass
class Plan:
    project: str
    stack: str
    stack_file: str
    resources: list[PlannedResource]
    outputs: dict[str, Any]
    invokes: list[str] = field(default_factory=list)
    stack_references: list[str] = field(default_factory=list)
    """The stacks the program read through stack references, by their full names."""

    def by_type(self, type_: str) -> list[PlannedResource]:
        return [r for r in self.resources if r.type == type_]

    def get(self, type_: str, name: str) -> PlannedResource:
        return next(r for r in self.resources if r.type == type_ and r.name == name)


def _to_plan_value(value: Any) -> Any:
    """Unknowns and secrets as readable markers; everything else as plain JSON values, mappings
    with their keys sorted: the engine hands inputs over as protobuf Structs, whose key order
    changes from run to run, and a plan must read the same every time."""
    from pulumi.output import Unknown
    from pulumi.runtime import rpc

    if isinstance(value, Unknown):
        return UNKNOWN_TEXT
    if rpc.is_rpc_secret(value):
        return SECRET_TEXT
    if isinstance(value, dict):
        return {key: _to_plan_value(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_to_plan_value(item) for item in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)  # the wire carries every number as a float
    return value


def _make_recorder(plan_resources: list[PlannedResource], thread_loops: list[asyncio.AbstractEventLoop]) -> Any:
    from pulumi.runtime import mocks, rpc

    def ensure_thread_loop() -> None:
        # The SDK calls the monitor from executor threads, and the mock monitor needs an event
        # loop there; create it here so the planner can close it (the SDK would leak it).
        if threading.current_thread() is threading.main_thread():
            return
        try:
            asyncio.get_event_loop_policy().get_event_loop()
        except RuntimeError:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            thread_loops.append(loop)

    class RecordingMonitor(mocks.MockMonitor):
        """A mock monitor that also records what MockResourceArgs leaves out."""

        def Invoke(self, request: Any) -> Any:  # noqa: N802 - gRPC method name
            ensure_thread_loop()
            return super().Invoke(request)

        def RegisterResource(self, request: Any) -> Any:  # noqa: N802 - gRPC method name
            ensure_thread_loop()
            response = super().RegisterResource(request)
            if request.type == "pulumi:pulumi:Stack":
                return response
            inputs = rpc.deserialize_properties(request.object, keep_unknowns=True)
            options = {
                "protect": bool(request.protect),
                "ignoreChanges": list(request.ignoreChanges),
                "replaceOnChanges": list(request.replaceOnChanges),
                "deleteBeforeReplace": bool(request.deleteBeforeReplace),
            }
            plan_resources.append(PlannedResource(
                urn=response.urn,
                type=request.type,
                name=request.name,
                parent=request.parent or None,
                custom=bool(request.custom),
                dependencies=sorted(set(request.dependencies)),
                options=options,
                inputs=_to_plan_value(dict(inputs)),
                # A provider reference is "<urn>::<id>"; the URN names it in the plan.
                provider=request.provider.rsplit("::", 1)[0] if request.provider else None,
            ))
            return response

    return RecordingMonitor


def make_plan_mocks(invokes: list[str], stack_outputs: Mapping[str, Mapping[str, Any]] | None = None,
                    references_read: list[str] | None = None) -> Any:
    """The offline plan's answers to registrations and invokes (also used to run the program
    with aliases, tests/registrations.py); `invokes` collects the tokens of the invokes made.
    `stack_outputs`: the outputs a stack reference reads, by stack name (a fleet's shared stack, as
    its own offline plan gives them); values unknown there are unknown to the reader too."""
    from pulumi.runtime import mocks

    references = dict(stack_outputs or {})

    class PlanMocks(mocks.Mocks):
        """Answers resource registrations and invokes the way a preview would."""

        def new_resource(self, args: mocks.MockResourceArgs) -> tuple[str | None, dict]:
            if args.typ == STACK_REFERENCE_TYPE:
                name = args.inputs.get("name") or args.name
                if references_read is not None:
                    references_read.append(name)
                stack = name.rsplit("/", 1)[-1]
                if stack not in references:
                    raise ValueError(f"the offline plan has no outputs of stack {stack} to read")
                return name, {"name": name, "outputs": _as_reference_outputs(references[stack]),
                              "secretOutputNames": [], "secret_output_names": []}
            # Only the ARM name is known before creation (inputs are recorded from the request;
            # echoing them as outputs would also clash where output shapes differ). No ID: in a
            # preview, IDs of resources to be created are unknown.
            name_key = NAME_INPUT_BY_TYPE.get(args.typ)
            if name_key and isinstance(args.inputs.get(name_key), str):
                return None, {"name": args.inputs[name_key]}
            return None, {}

        def call(self, args: mocks.MockCallArgs) -> dict:  # type: ignore[override]  # the SDK accepts a dict or a tuple
            invokes.append(args.token)
            if args.token == "azure-native:authorization:getClientConfig":
                return {"clientId": PLACEHOLDER_GUID, "objectId": PLACEHOLDER_GUID,
                        "subscriptionId": PLACEHOLDER_GUID, "tenantId": PLACEHOLDER_GUID}
            if args.token == "azure-native:containerservice:listManagedClusterUserCredentials":
                cluster = args.args.get("resourceName", "cluster")
                return {"kubeconfigs": [{"name": "clusterUser", "value": _placeholder_kubeconfig(cluster)}]}
            return {}

    return PlanMocks


STACK_REFERENCE_TYPE = "pulumi:pulumi:StackReference"


def _as_reference_outputs(value: Any) -> Any:
    """A plan's outputs as a stack reference hands them over. A value the referenced stack's plan
    does not know stays the text "(known after apply)": a real unknown anywhere in the outputs
    would make every output unknown to the reader (the SDK reads them as one value), while a
    deployed stack's outputs are all known."""
    if isinstance(value, dict):
        return {key: _as_reference_outputs(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_as_reference_outputs(item) for item in value]
    return value


def _placeholder_kubeconfig(cluster: str) -> str:
    text = f"""apiVersion: v1
kind: Config
clusters:
- name: {cluster}
  cluster:
    server: https://{cluster}.hcp.example.invalid:443
contexts:
- name: {cluster}
  context: {{cluster: {cluster}, user: clusterUser_{cluster}}}
current-context: {cluster}
users:
- name: clusterUser_{cluster}
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: kubelogin
      args: [get-token, --login, azurecli, --server-id, 6dae42f8-4368-4678-94ff-3960e28e3630]
"""
    return base64.b64encode(text.encode()).decode()


def plan_stack(stack_file: StackFile, project: str | None = None,
               stack_outputs: Mapping[str, Mapping[str, Any]] | None = None) -> Plan:
    """Run the project's program for `stack_file` offline and return what it would declare.

    `project`: the Pulumi project name in the URNs; by default Pulumi.yaml's, as in a real preview.
    `stack_outputs`: what the stacks the program references output (see make_plan_mocks); by
    default, a fleet member's fleet stack is planned first for its outputs.
    """
    if project is None:
        project = _project_name(stack_file)
    load_sdks_with_text_annotations()
    if stack_outputs is None:
        stack_outputs = referenced_stack_outputs(stack_file, project, plan_stack)
    # A fresh context gives the Pulumi SDK fresh globals (its settings are context variables),
    # so plans in one process do not see each other.
    # The cyclic garbage collector is paused meanwhile: importing azure-native and registering
    # resources allocate many long-lived objects, and the collector's repeated passes over them
    # cost about a third of the plan time while freeing almost nothing (tests/benchmark_plan.py).
    collecting = gc.isenabled()
    gc.disable()
    with _interrupt_ends_the_process(), no_stack_traces():
        try:
            return contextvars.Context().run(_plan_in_context, stack_file, project, stack_outputs)
        finally:
            if collecting:
                _resume_collector()


# What the collector may leave uncollected, in objects, before a plan collects (see _resume_collector).
_FROZEN_LEFTOVER_LIMIT = 250_000
_frozen_since_collected: int | None = None  # None until the first plan's objects are frozen
_frozen_when_collected = 0


def _resume_collector() -> None:
    """Turn the collector back on, with what the plan allocated frozen (gc.freeze): on again as is,
    its first passes would walk every object of the plan and the SDKs it imported (~400,000 at 100
    pools), a tenth of the command's time, to free a few thousand (cycles the plan left: about 2,000
    objects at 100 pools, measured with gc.collect()). Frozen, those few stay; a process that plans
    on (a fleet, the tests) collects them once the frozen objects grew, after the first plan's, by
    _FROZEN_LEFTOVER_LIMIT or by as many as were frozen when it last collected, if more: a full pass
    walks every object (0.8 s in a test process of 940,000), so the larger the process, the rarer.
    The growth is the youngest generation's count, which freezing zeroes: objects made less objects
    freed, frozen ones too: the frozen set's net growth, which gc.get_freeze_count() would give by
    walking every frozen object (read once per collection only)."""
    global _frozen_since_collected, _frozen_when_collected
    if (_frozen_since_collected is not None
            and _frozen_since_collected > max(_FROZEN_LEFTOVER_LIMIT, _frozen_when_collected)):
        gc.unfreeze()
        gc.collect()
        _frozen_since_collected = None
    left = gc.get_count()[0]
    gc.freeze()
    if _frozen_since_collected is None:
        _frozen_since_collected = 0
        _frozen_when_collected = gc.get_freeze_count()
    else:
        _frozen_since_collected += left
    gc.enable()


def _project_name(stack_file: StackFile) -> str:
    from aksgpu.errors import UserError
    from aksgpu.project.stackfile import load_yaml

    try:
        document = load_yaml(stack_file.project_dir / "Pulumi.yaml")
    except UserError:
        return "aksgpu"
    name = document.get("name") if isinstance(document, dict) else None
    return name if isinstance(name, str) and name else "aksgpu"


@contextlib.contextmanager
def _interrupt_ends_the_process() -> Iterator[None]:
    """Ctrl-C while the program runs ends the process at once, with one line and exit 130.

    Pulumi's runtime runs the program on an asyncio loop with gRPC threads: a KeyboardInterrupt
    raised into it can be swallowed (the plan then finishes and exits 0), break an import half
    way, or leave the loop waiting forever. An offline plan writes nothing, so stopping the
    process outright loses nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(_signal: int, _frame: object) -> None:
        sys.stderr.write("interrupted: the offline plan stopped; nothing was written.\n")
        sys.stderr.flush()
        from aksgpu.errors import EXIT_INTERRUPTED

        os._exit(EXIT_INTERRUPTED)

    previous = signal.signal(signal.SIGINT, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _plan_in_context(stack_file: StackFile, project: str,
                     stack_outputs: Mapping[str, Mapping[str, Any]] | None) -> Plan:
    import pulumi
    from pulumi.runtime import mocks, stack

    resources: list[PlannedResource] = []
    thread_loops: list[asyncio.AbstractEventLoop] = []
    invokes: list[str] = []
    references: list[str] = []
    outputs: dict[str, Any] = {}
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        pulumi.runtime.set_all_config(stack_file.engine_config(), [])
        monitor = _make_recorder(resources, thread_loops)(make_plan_mocks(invokes, stack_outputs, references)())
        quiet = logging.getLogger("aksgpu.plan")
        quiet.addHandler(logging.NullHandler())
        quiet.propagate = False
        # The organization of a self-managed backend, which stack references name (organization/project/stack).
        mocks.set_mocks(monitor.mocks, project=project, stack=stack_file.stack, preview=True,
                        logger=quiet, monitor=monitor, organization="organization")
        pulumi.runtime.register_stack_transformation(drop_aliases)
        program = stack_file.project_dir / "__main__.py"

        async def run() -> None:
            runpy.run_path(str(program), run_name="__main__")
            root = pulumi.runtime.get_root_resource()
            for name, value in sorted(root.outputs.items()):  # type: ignore[union-attr]  # the root stack resource
                outputs[name] = await _resolve_output(value)

        loop.run_until_complete(stack.run_pulumi_func(run))
    finally:
        loop.run_until_complete(loop.shutdown_default_executor())
        for thread_loop in thread_loops:
            thread_loop.close()
        asyncio.set_event_loop(None)
        loop.close()
    return Plan(project, stack_file.stack, str(stack_file.path.relative_to(stack_file.project_dir)),
                _tree_order(resources), outputs, sorted(set(invokes)), sorted(set(references)))


async def _resolve_output(value: Any) -> Any:
    import pulumi

    if isinstance(value, dict):  # a mapping of outputs: each value known or not on its own
        return {key: await _resolve_output(item) for key, item in sorted(value.items())}

    output = pulumi.Output.from_input(value)
    if await output.is_secret():
        return SECRET_TEXT
    if not await output.is_known():
        return UNKNOWN_TEXT
    return _to_plan_value(await output.future())


def _tree_order(resources: list[PlannedResource]) -> list[PlannedResource]:
    """Parents before children, siblings in a stable order: same spec, same plan."""
    children: dict[str | None, list[PlannedResource]] = {}
    known = {r.urn for r in resources}
    for resource in resources:
        parent = resource.parent if resource.parent in known else None
        children.setdefault(parent, []).append(resource)
    ordered: list[PlannedResource] = []

    def visit(parent: str | None) -> None:
        for resource in sorted(children.get(parent, []), key=lambda r: (r.custom, r.urn)):
            ordered.append(resource)
            visit(resource.urn)

    visit(None)
    return ordered
