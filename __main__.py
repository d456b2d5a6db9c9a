"""The aksgpu Pulumi program: stack config -> ClusterSpec -> AksGpuCluster -> stack outputs."""

import pulumi

from aksgpu.components.aks_gpu_cluster import AksGpuCluster
from aksgpu.components.spec import SpecError, parse_cluster_spec

config = pulumi.Config("aksgpu")
try:
    raw_spec = config.get_object("cluster")
except (ValueError, RecursionError) as error:  # the engine hands structured config over as JSON
    raise pulumi.RunError(f"aksgpu:cluster in this stack's config cannot be read ({type(error).__name__}). "
                          "Fix: check it with `aksgpu validate STACK`, which names the line.") from None
if raw_spec is None:
    raise pulumi.RunError(
        "aksgpu:cluster is not set in this stack's config. Fix: add an aksgpu:cluster mapping "
        "to stacks/Pulumi.<stack>.yaml (stacks/Pulumi.dev.yaml is a small example).")
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
