"""The Pulumi policy pack (aksgpu/policy/pack.py) reports what the offline evaluation reports.

The pack runs as a real policy pack process (`run()` serves pulumi-policy's analyzer over gRPC,
as `pulumi preview --policy-pack` starts it). The test speaks the engine's side of that protocol:
it configures the pack with an environment's waivers (`pack_config`, the --policy-pack-config
JSON), sends every resource of an offline plan to Analyze and all of them to AnalyzeStack, with
values not known before deployment sent as the engine's unknown sentinel, and compares what the
pack reports with the offline evaluation of the same plan.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Iterator
from datetime import date
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2
from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc

from aksgpu.plan.planner import UNKNOWN_TEXT, Plan
from aksgpu.plan.policy_results import evaluate_plan
from aksgpu.spec import parse_cluster_spec
from aksgpu.policy.catalog import rules
from aksgpu.policy.pack import pack_config
from tests.bare_mock_program import sdk_module
from tests.helpers import base_spec, edit, plan_spec

pytestmark = pytest.mark.slow  # the pack runs in its own process, reached over gRPC

# pulumi_policy/proxy.py: how the engine marks a string it does not know during a preview.
UNKNOWN_STRING = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
LEVELS = {"mandatory": analyzer_pb2.MANDATORY, "advisory": analyzer_pb2.ADVISORY}


@pytest.fixture(scope="module")
def analyzer() -> Iterator[analyzer_pb2_grpc.AnalyzerStub]:
    process = subprocess.Popen([sys.executable, "-c", "from aksgpu.policy.pack import run; run()"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = int(process.stdout.readline().strip())  # the pack prints its port, as the engine expects
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield analyzer_pb2_grpc.AnalyzerStub(channel)
    finally:
        process.kill()
        process.wait()


def _as_engine_sends(value: Any) -> Any:
    if value == UNKNOWN_TEXT:
        return UNKNOWN_STRING
    if isinstance(value, dict):
        return {key: _as_engine_sends(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_as_engine_sends(item) for item in value]
    return value


def _struct(props: dict[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(_as_engine_sends(props))
    return struct


# Which input names a resource: in its outputs, which stack policies read, it is `name`.
NAME_INPUTS = {"azure-native:containerservice:ManagedCluster": "resourceName",
               "azure-native:containerservice:AgentPool": "agentPoolName",
               "azure-native:containerservice:MaintenanceConfiguration": "configName",
               "azure-native:containerregistry:Registry": "registryName",
               "azure-native:monitor:DiagnosticSetting": "name"}


def _output_names(type_token: str) -> set[str] | None:
    """The output properties of a resource type, as its SDK class declares them (None: not an
    azure-native or Kubernetes class)."""
    module = sdk_module(type_token)
    if module is None:
        return None
    cls = getattr(importlib.import_module(module), type_token.rsplit(":", 1)[-1], None)
    if cls is None:
        return None
    return {attribute.fget._pulumi_name for attribute in vars(cls).values()
            if isinstance(attribute, property) and hasattr(attribute.fget, "_pulumi_name")}


def _as_outputs(resource: Any, name_known: bool) -> dict[str, Any]:
    """What a stack policy sees of a resource in a real preview: its outputs. Those an input
    determines carry the input's value; `name` is known on an update and unknown on a create."""
    names = _output_names(resource.type)
    if names is None:
        return resource.inputs
    outputs = {key: value for key, value in resource.inputs.items() if key in names}
    name_input = NAME_INPUTS.get(resource.type)
    if name_input is not None:
        outputs["name"] = resource.inputs.get(name_input, UNKNOWN_TEXT) if name_known else UNKNOWN_TEXT
    return outputs


def _reported(analyzer: analyzer_pb2_grpc.AnalyzerStub, plan: Plan, config: dict[str, Any], *,
              names_known: bool = True, skipped: set[str] | None = None) -> set[tuple[str, str]]:
    """(policy, subject) of every violation the pack reports for the plan; the policies it could
    not run in this preview go into `skipped`."""
    policy_config = {}
    for rule in rules():
        properties = struct_pb2.Struct()
        properties.update(config.get(rule.id, {}))
        policy_config[rule.id] = analyzer_pb2.PolicyConfig(enforcementLevel=LEVELS[rule.enforcement],
                                                           properties=properties)
    analyzer.Configure(analyzer_pb2.ConfigureAnalyzerRequest(policyConfig=policy_config))
    diagnostics = []
    for resource in plan.resources:
        response = analyzer.Analyze(analyzer_pb2.AnalyzeRequest(
            type=resource.type, properties=_struct(resource.inputs), urn=resource.urn, name=resource.name))
        diagnostics += response.diagnostics
    stack = analyzer.AnalyzeStack(analyzer_pb2.AnalyzeStackRequest(resources=[
        analyzer_pb2.AnalyzerResource(type=r.type, properties=_struct(_as_outputs(r, names_known)), urn=r.urn,
                                      name=r.name)
        for r in plan.resources]))
    diagnostics += stack.diagnostics
    cannot_run = [d for d in diagnostics if "can't run policy" in d.message]
    assert all(d.enforcementLevel == analyzer_pb2.ADVISORY for d in cannot_run), "a skipped policy fails nothing"
    if skipped is None:
        assert not cannot_run, [d.message for d in cannot_run]
    else:
        skipped |= {d.policyName for d in cannot_run}
    # pulumi-policy puts the policy's description on the message's first line; ours follows it.
    return {(d.policyName, d.message.rsplit("\n", 1)[-1].split(":", 1)[0]) for d in diagnostics
            if d not in cannot_run}


def _offline(plan: Plan, spec: Any) -> set[tuple[str, str]]:
    report = evaluate_plan(plan, spec, date.today())
    return {(f.rule.id, f.violation.subject) for f in report.findings if f.waiver is None}


def test_the_pack_reports_what_the_offline_plan_reports(analyzer: analyzer_pb2_grpc.AnalyzerStub) -> None:
    # A pool finding beside a cluster one (ssh: LocalUser, once the pool finding here, is no longer
    # accepted by the spec: AKS refuses sshAccess, catalog/aks_refused_fields.yaml).
    raw = edit(edit(base_spec(), "security.defender", False), "nodePools.0.encryptionAtHost", False)
    raw = edit(raw, "policy", {"waivers": [
        {"rule": "acr-public-network", "reason": "images are pushed from laptops in this test"},
        {"rule": "pool-user-min-nodes", "resources": ["a100"], "reason": "the GPU pool scales from zero"}]})
    spec, _ = parse_cluster_spec(raw)
    plan = plan_spec(raw)
    offline = _offline(plan, spec)
    assert {("aks-defender", "gpu-test-cluster-aks"), ("pool-encryption-at-host", "a100")} <= offline
    assert not any(rule == "acr-public-network" for rule, _ in offline), "waived offline"
    assert _reported(analyzer, plan, pack_config(spec.policy.waivers)) == offline


def test_on_a_create_the_stack_policies_that_read_names_are_skipped_not_failed(
        analyzer: analyzer_pb2_grpc.AnalyzerStub) -> None:
    raw = edit(base_spec(), "controlPlane.maintenanceWindows", [{"schedule": "autoUpgrade"}])
    raw = edit(raw, "policy", {"waivers": [
        {"rule": "acr-public-network", "reason": "images are pushed from laptops in this test"}]})
    spec, _ = parse_cluster_spec(raw)
    plan = plan_spec(raw)
    offline = _offline(plan, spec)
    assert ("aks-maintenance-window", "gpu-test-cluster-aks") in offline
    skipped: set[str] = set()
    reported = _reported(analyzer, plan, pack_config(spec.policy.waivers), names_known=False, skipped=skipped)
    # Before the maintenance windows exist their names are unknown: that policy waits for the next preview.
    assert skipped == {"aks-maintenance-window"}
    assert reported == {finding for finding in offline if finding[0] not in skipped}
    # Once they exist (an update), it runs and finds the missing window as the offline plan does.
    assert _reported(analyzer, plan, pack_config(spec.policy.waivers)) == offline


def test_without_its_waivers_the_pack_reports_the_waived_findings(analyzer: analyzer_pb2_grpc.AnalyzerStub) -> None:
    raw = edit(base_spec(), "policy", {"waivers": [
        {"rule": "acr-public-network", "reason": "images are pushed from laptops in this test"}]})
    plan = plan_spec(raw)
    reported = _reported(analyzer, plan, {})
    assert ("acr-public-network", "gpu-test-registry-acr") in reported


def test_an_expired_waiver_is_reported_as_expired(analyzer: analyzer_pb2_grpc.AnalyzerStub) -> None:
    plan = plan_spec(base_spec())
    config = {"acr-public-network": {"waivers": [{"resources": ["*"], "reason": "a reason", "expires": "2020-01-31"}]}}
    policy_config = {rule.id: analyzer_pb2.PolicyConfig(enforcementLevel=LEVELS[rule.enforcement]) for rule in rules()}
    properties = struct_pb2.Struct()
    properties.update(config["acr-public-network"])
    policy_config["acr-public-network"] = analyzer_pb2.PolicyConfig(enforcementLevel=analyzer_pb2.MANDATORY,
                                                                    properties=properties)
    analyzer.Configure(analyzer_pb2.ConfigureAnalyzerRequest(policyConfig=policy_config))
    registry = plan.by_type("azure-native:containerregistry:Registry")[0]
    response = analyzer.Analyze(analyzer_pb2.AnalyzeRequest(type=registry.type, properties=_struct(registry.inputs),
                                                            urn=registry.urn, name=registry.name))
    [diagnostic] = [d for d in response.diagnostics if d.policyName == "acr-public-network"]
    assert "expired on 2020-01-31" in diagnostic.message and diagnostic.enforcementLevel == analyzer_pb2.MANDATORY
