"""The aksgpu Pulumi program: stack config -> ClusterSpec -> AksGpuCluster -> stack outputs.

A project's __main__.py calls `run()`. A team that wants more in the same stack (its own
resources next to the cluster) writes its own program instead and composes `AksGpuCluster`
from `aksgpu.components.aks_gpu_cluster` with a spec from `parse_cluster_spec`, as this one does.
"""

from __future__ import annotations

import pulumi

from aksgpu.alias_urns import defer_alias_urns
from aksgpu.components.aks_gpu_cluster import AksGpuCluster
from aksgpu.components.spec import SpecError, parse_cluster_spec


def run() -> AksGpuCluster:
    """Declare the cluster of this stack's `aksgpu:cluster` config and export its outputs."""
    defer_alias_urns()  # the engine gets the same aliases; Python skips ~8 s of unused URNs at 100 pools
    config = pulumi.Config("aksgpu")
    try:
        raw_spec = config.get_object("cluster")
    except (ValueError, RecursionError) as error:  # the engine hands structured config over as JSON
        raise pulumi.RunError(f"aksgpu:cluster in this stack's config cannot be read ({type(error).__name__}). "
                              "Fix: check it with `aksgpu validate STACK`, which names the line.") from None
    if raw_spec is None:
        raise pulumi.RunError(
            "aksgpu:cluster is not set in this stack's config. Fix: add the environment to stacks/environments.yaml "
            "and render its stack file (`aksgpu init ENV --preset NAME`).")
    try:
        spec, warnings = parse_cluster_spec(raw_spec)
    except SpecError as error:
        raise pulumi.RunError(str(error)) from None  # RunError: the message, without a traceback
    for warning in warnings:
        pulumi.log.warn(str(warning))

    cluster = AksGpuCluster(spec.name, spec)
    pulumi.export("clusterName", cluster.cluster.cluster_name)
    pulumi.export("clusterId", cluster.cluster.cluster_id)
    pulumi.export("oidcIssuerUrl", cluster.cluster.oidc_issuer_url)
    pulumi.export("registryLoginServer", cluster.registry.login_server)
    pulumi.export("logAnalyticsWorkspaceId", cluster.monitoring.workspace_id)
    pulumi.export("kubeconfig", cluster.cluster.kubeconfig)
    return cluster
