"""aksgpu components: the Pulumi ComponentResources built from a validated ClusterSpec (aksgpu.spec),
and nothing else: Azure (network, cluster, node pools, access, registry, monitoring, KMS, disk
encryption, fleet) here, the in-cluster layer in kubernetes/. AksGpuCluster
(aks_gpu_cluster.py) composes them; each owns one concern and exposes outputs.
"""
