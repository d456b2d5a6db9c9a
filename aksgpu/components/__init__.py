"""aksgpu components: the cluster spec and the Pulumi ComponentResources built from it.

`components.spec` is pure (no Pulumi import), so validation stays fast; the components live in
their own modules and are composed by `components.aks_gpu_cluster.AksGpuCluster`.
"""
