"""ClusterKubernetes: the Kubernetes provider every in-cluster component uses, and aksgpu's namespace."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from aksgpu.components.kubeconfig import KubeconfigError, kubeconfig_for_login
from aksgpu.components.kubernetes.objects import SYSTEM_NAMESPACE, metadata
from aksgpu.spec import ClusterSpec


@dataclass
class ClusterKubernetesArgs:
    spec: ClusterSpec
    # The cluster's user kubeconfig (exec format with Entra ID), a secret output of Cluster.
    kubeconfig: pulumi.Input[str]


def provider_kubeconfig(kubeconfig: str, login: str) -> str:
    """The kubeconfig the provider uses: Entra ID users sign in through `kubelogin get-token
    --login <login>` (non-interactive); local-account users stay as AKS issued them. A kubeconfig
    that cannot be converted stops the program with the reason (RunError: no traceback)."""
    try:
        return kubeconfig_for_login(kubeconfig, login).text
    except KubeconfigError as error:
        raise pulumi.RunError(f"inCluster.login = {login}: {error}") from None


class ClusterKubernetes(pulumi.ComponentResource):
    """A Kubernetes provider built from the cluster's exec kubeconfig, and the aksgpu-system
    namespace that holds aksgpu's own node agents (device plugin, DCGM exporter, node gate).

    The kubeconfig carries no credential (kubelogin fetches a token when the provider calls the
    API), but it names the cluster's endpoint and CA, so it stays secret in state. The provider
    is replaced only when the cluster's name changes (clusterIdentifier); a new login mode is an
    update, not a replacement of every object.
    """

    provider: k8s.Provider
    system_namespace: str

    def __init__(self, name: str, args: ClusterKubernetesArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aksgpu:index:ClusterKubernetes", name, None, opts)
        spec = args.spec
        login = spec.in_cluster.login
        kubeconfig = pulumi.Output.from_input(args.kubeconfig).apply(lambda text: provider_kubeconfig(text, login))
        self.provider = k8s.Provider(
            f"{name}-provider",
            kubeconfig=pulumi.Output.secret(kubeconfig),  # type: ignore[arg-type]  # the SDK types secret() by inference
            cluster_identifier=spec.name,
            # deleteUnreachable stays off: a private API server is unreachable from outside its
            # VNet, and a refresh from there must fail, not drop every object from the state.
            enable_server_side_apply=True,
            opts=pulumi.ResourceOptions(parent=self),
        )
        namespace = k8s.core.v1.Namespace(
            f"{name}-system-namespace",
            # Privileged: the node agents here mount host paths (device plugin sockets, pod
            # resources) and the DCGM exporter needs SYS_ADMIN for profiling metrics.
            metadata=metadata(SYSTEM_NAMESPACE, extra_labels={
                "pod-security.kubernetes.io/enforce": "privileged",
                "pod-security.kubernetes.io/warn": "baseline",
            }),
            opts=pulumi.ResourceOptions(parent=self, provider=self.provider),
        )
        self.system_namespace = SYSTEM_NAMESPACE
        self.namespace_resource = namespace
        self.register_outputs({"systemNamespace": SYSTEM_NAMESPACE})
