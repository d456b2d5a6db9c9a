"""Programs that run on or for the GPU nodes, in the cluster, not in Pulumi: the node gate
(node_gate.py), the placement-group labeller (node_topology.py), the cross-node acceptance pass and
its all-reduce (fabric_acceptance.py, fabric_allreduce.py), each shipped as a ConfigMap and run by
python3 with the standard library only; and aksgpu's GPU health check (gpu_check/, an image built
from its Dockerfile). They import nothing of Pulumi: only the standard library and, for the
check's thresholds, aksgpu.catalog. The components in aksgpu/components/kubernetes declare them.
"""
