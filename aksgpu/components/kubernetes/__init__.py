"""The in-cluster layer: Kubernetes objects driven by the same ClusterSpec as the Azure resources.

One component per concern, each taking the Kubernetes provider of `ClusterKubernetes`:
- `ClusterKubernetes` (provider.py): the provider, signed in with kubelogin, and aksgpu's namespace.
- `GpuSoftware` (gpu_software.py): what advertises nvidia.com/gpu on each GPU pool, by driver mode.
- `TeamAccess` (team_access.py): admin and read-only bindings; per team a namespace, RBAC, quota;
  the admission policies that keep teams apart on shared pools (team_admission.py).
- `GpuHealth` (gpu_health.py): DCGM metrics, scraping and alert rules (gpu_metrics.py); the node
  gate (gpu_gate.py), its watchdog and re-checks (gpu_gate_jobs.py), its rights (gpu_gate_access.py).
- `Headroom` (headroom.py): priority classes, balloons, the autoscaler's priority expander.
- `GangScheduling` (gang_scheduling.py): Kueue, its flavors and team queues.

They depend on the Azure components' outputs (the cluster's kubeconfig and name), never the other
way round. `objects.py` holds the pure helpers they share.
"""
