"""Oracle: how Kueue places a pod under a ResourceFlavor, as read in kubernetes-sigs/kueue v0.19.2.

- pkg/podset/podset.go FromAssignment: the PodSetInfo of an admitted podset carries the flavor's
  spec.nodeLabels as NodeSelector (utilmaps.Copy) and its tolerations (append).
- podset.go Merge: the PodSetInfo is merged into the pod (template) metadata and spec: nodeSelector
  keys added (a key already set to another value is a conflict, PodSetInfo.Merge returns an error),
  tolerations appended.
- Jobs (pkg/controller/jobs/job/job_controller.go RunWithPodSetsInfo): Merge into the Job's pod
  template, then unsuspend; the Job controller then CREATEs pods from the merged template.
- Plain pods (pkg/controller/jobs/pod/pod_webhook.go Default): on CREATE the webhook adds the
  scheduling gate kueue.x-k8s.io/admission (and kueue.x-k8s.io/topology with TopologyAwareScheduling);
  on admission pod_controller.go Run -> prepare patches the pod: Merge, remove the admission gate,
  and remove the topology gate unless the podset uses topology-aware scheduling.
"""

from __future__ import annotations

import copy
from typing import Any

ADMISSION_GATE = "kueue.x-k8s.io/admission"
TOPOLOGY_GATE = "kueue.x-k8s.io/topology"


class MergeConflict(Exception):
    """PodSetInfo.Merge: the pod already selects another value for a flavor's node label."""


def merge_flavor(pod_spec: dict[str, Any], flavor: dict[str, Any]) -> dict[str, Any]:
    """podset.Merge of a flavor's PodSetInfo into a pod spec (a copy)."""
    spec = copy.deepcopy(pod_spec)
    selector = spec.setdefault("nodeSelector", {})
    for key, value in flavor["spec"].get("nodeLabels", {}).items():
        if key in selector and selector[key] != value:
            raise MergeConflict(key)
        selector[key] = value
    spec["tolerations"] = [*spec.get("tolerations", []), *flavor["spec"].get("tolerations", [])]
    return spec


def gated_on_create(pod: dict[str, Any], topology_aware: bool = False) -> dict[str, Any]:
    """The pod as Kueue's pod webhook lets it be created: with its scheduling gates."""
    created = copy.deepcopy(pod)
    gates = created["spec"].setdefault("schedulingGates", [])
    gates.append({"name": ADMISSION_GATE})
    if topology_aware:
        gates.append({"name": TOPOLOGY_GATE})
    return created


def admitted(pod: dict[str, Any], flavor: dict[str, Any], topology_aware: bool = False) -> dict[str, Any]:
    """The pod after Kueue's admission patch (prepare): flavor merged, admission gate removed, and the
    topology gate removed unless the podset is topology-aware (then a later update removes it)."""
    patched = copy.deepcopy(pod)
    patched["spec"] = merge_flavor(pod["spec"], flavor)
    removed = {ADMISSION_GATE} if topology_aware else {ADMISSION_GATE, TOPOLOGY_GATE}
    patched["spec"]["schedulingGates"] = [g for g in patched["spec"].get("schedulingGates", [])
                                          if g["name"] not in removed]
    if not patched["spec"]["schedulingGates"]:
        del patched["spec"]["schedulingGates"]
    return patched


def job_pod(template_spec: dict[str, Any], flavor: dict[str, Any]) -> dict[str, Any]:
    """A pod the Job controller creates after Kueue admitted the Job under `flavor`."""
    return {"metadata": {"name": "job-0", "namespace": "vision"}, "spec": merge_flavor(template_spec, flavor)}
