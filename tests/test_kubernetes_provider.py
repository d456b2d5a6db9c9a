"""The Kubernetes provider: one per cluster, built from the cluster's exec kubeconfig with the
spec's kubelogin login mode, kept secret, and used by every Kubernetes object of the plan."""

from __future__ import annotations

import asyncio
import base64
import contextvars
from typing import Any

import pulumi
import pytest
import yaml

from aksgpu.plan.planner import SECRET_TEXT, _placeholder_kubeconfig
from aksgpu.components.kubeconfig import AKS_AAD_SERVER_ID
from aksgpu.components.kubernetes.provider import (
    ClusterKubernetes,
    ClusterKubernetesArgs,
    provider_kubeconfig,
)
from aksgpu.spec import parse_cluster_spec
from tests.helpers import base_spec, edit, shared_plan

PROVIDER = "pulumi:providers:kubernetes"
# The shape AKS returns from listClusterUserCredential?format=exec for an Entra ID cluster
# (kubelogin's docs; pulumi-azure-native#2399): device-code login, which no pipeline can answer.
AKS_EXEC_ARGS = ["get-token", "--environment", "AzurePublicCloud", "--server-id", AKS_AAD_SERVER_ID,
                 "--client-id", "80faf920-1908-4b52-b5ef-a8e7bedfc67a", "--tenant-id",
                 "72f988bf-86f1-41af-91ab-2d7cd011db47", "--login", "devicecode"]


def aks_kubeconfig(user: dict[str, Any] | None = None) -> str:
    exec_user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": "kubelogin",
                          "args": AKS_EXEC_ARGS, "env": None, "provideClusterInfo": False}}
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "gpu-test",
        "clusters": [{"name": "gpu-test", "cluster": {"server": "https://gpu-test.hcp.eastus2.azmk8s.io:443",
                                                      "certificate-authority-data": "Q0E="}}],
        "contexts": [{"name": "gpu-test", "context": {"cluster": "gpu-test", "user": "clusterUser"}}],
        "users": [{"name": "clusterUser", "user": user or exec_user}],
    })


def _args(text: str) -> list[str]:
    return yaml.safe_load(text)["users"][0]["user"]["exec"]["args"]


@pytest.mark.parametrize(("login", "expected"), [
    ("azurecli", ["--login", "azurecli", "--server-id", AKS_AAD_SERVER_ID]),
    ("workloadidentity", ["--login", "workloadidentity", "--server-id", AKS_AAD_SERVER_ID]),
    ("msi", ["--login", "msi", "--server-id", AKS_AAD_SERVER_ID]),
    ("spn", ["--login", "spn", "--server-id", AKS_AAD_SERVER_ID, "--client-id", "80faf920-1908-4b52-b5ef-a8e7bedfc67a",
             "--tenant-id", "72f988bf-86f1-41af-91ab-2d7cd011db47", "--environment", "AzurePublicCloud"]),
])
def test_the_provider_signs_in_without_a_prompt(login: str, expected: list[str]) -> None:
    """What `kubelogin convert-kubeconfig -l MODE` writes (Azure/kubelogin v0.2.19, converter tests)."""
    assert _args(provider_kubeconfig(aks_kubeconfig(), login)) == ["get-token", *expected]


def test_local_account_credentials_pass_through() -> None:
    local = aks_kubeconfig({"client-certificate-data": "Y2VydA==", "client-key-data": "a2V5", "token": "t"})
    converted = yaml.safe_load(provider_kubeconfig(local, "azurecli"))
    assert converted["users"] == yaml.safe_load(local)["users"]


def _run_component(spec: dict[str, Any], kubeconfig: str) -> dict[str, dict[str, Any]]:
    """Build ClusterKubernetes under Pulumi's mocks (not a preview, so the kubeconfig is known);
    returns each registration's inputs as the mock engine receives them."""
    recorded: dict[str, dict[str, Any]] = {}

    class Mocks(pulumi.runtime.Mocks):
        def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[None, dict]:
            recorded[args.typ] = args.inputs
            return None, {}

        def call(self, args: pulumi.runtime.MockCallArgs) -> dict:
            return {}

    def run() -> None:
        from pulumi.runtime import stack

        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            pulumi.runtime.set_mocks(Mocks(), preview=False)
            parsed, _ = parse_cluster_spec(spec)

            async def program() -> None:
                component = ClusterKubernetes("k8s", ClusterKubernetesArgs(spec=parsed,
                                                                            kubeconfig=pulumi.Output.secret(kubeconfig)))
                await component.provider.urn.future()

            loop.run_until_complete(stack.run_pulumi_func(program))
        finally:
            loop.run_until_complete(loop.shutdown_default_executor())
            asyncio.set_event_loop(None)
            loop.close()

    contextvars.Context().run(run)
    return recorded


def test_the_provider_gets_the_converted_kubeconfig_as_a_secret() -> None:
    recorded = _run_component(edit(base_spec(), "inCluster.login", "workloadidentity"), aks_kubeconfig())
    provider = recorded[PROVIDER]
    kubeconfig = provider["kubeconfig"]
    assert isinstance(kubeconfig, dict) and kubeconfig.get(pulumi.runtime.rpc._special_sig_key) == \
        pulumi.runtime.rpc._special_secret_sig, "the kubeconfig reaches the engine as a secret"
    assert _args(kubeconfig["value"])[:3] == ["get-token", "--login", "workloadidentity"]
    # Only a new cluster name replaces the provider (and with it every object); a new login mode
    # or endpoint is an update (pulumi-kubernetes DiffConfig and clusterIdentifier).
    assert provider["clusterIdentifier"] == "gpu-test"
    # An unreachable (private) cluster is an error, never a reason to forget its objects.
    assert "deleteUnreachable" not in provider
    assert recorded["kubernetes:core/v1:Namespace"]["metadata"]["name"] == "aksgpu-system"


def test_the_plan_binds_every_kubernetes_object_to_the_one_provider() -> None:
    plan = shared_plan(base_spec())
    [provider] = plan.by_type(PROVIDER)
    assert provider.inputs["kubeconfig"] in (SECRET_TEXT, "(known after apply)")
    objects = [r for r in plan.resources if r.custom and r.type.startswith("kubernetes:")]
    assert len(objects) > 10
    assert {r.provider for r in objects} == {provider.urn}
    azure = [r for r in plan.resources if r.custom and r.type.startswith("azure-native:")]
    assert all(r.provider is None for r in azure), "Azure resources keep the default provider"


def test_the_placeholder_kubeconfig_of_the_offline_plan_converts() -> None:
    text = base64.b64decode(_placeholder_kubeconfig("gpu-test")).decode()
    assert _args(provider_kubeconfig(text, "azurecli")) == ["get-token", "--login", "azurecli",
                                                            "--server-id", AKS_AAD_SERVER_ID]
