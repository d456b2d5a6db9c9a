"""aksgpu's node topology labeller: writes where an InfiniBand GPU node sits in Azure's fabric.

This file is shipped to the cluster as a ConfigMap key, beside the gate's API client node_api.py
(standard library only, as this file is), and run by `python3` in the DaemonSet NodeTopology
declares, on every node of an InfiniBand pool that has no placement-group label yet. It reads the
VM's placement group from the Azure Instance Metadata Service (IMDS, http://169.254.169.254,
reachable from the host network only when AKS's IMDS restriction is on) and labels its own node
with it. Once the label is there the DaemonSet's node affinity no longer matches and its pod goes
away.

Why the placement group: InfiniBand connects the VMs of one scale-set placement group and no
further (azure-compute-docs setup-infiniband.md, "Cluster configuration options"). AKS creates
InfiniBand pools with a single placement group (Azure/AKS CHANGELOG, 2022-03-20), so one pool is
one InfiniBand domain while it stays within the group's cap; the label says so from Azure's own
record, and a pool that ever spans several groups shows it. Kueue's Topology uses the label as
the "one InfiniBand domain" level; a node without it is not counted by Kueue's topology-aware
scheduling at all (kueue v0.19.2 pkg/util/tas/node.go NodeMatchesFlavor), so no gang lands on a
node before its label exists.

The service account may get and patch nodes; an admission policy (topology.py) lets it change
this one label on the node its pod runs on, and nothing else.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import urllib.request
from collections.abc import Callable
from typing import Any

try:
    from aksgpu.node import node_api
except ImportError:  # in the cluster: sibling files of one folder (the ConfigMap's keys)
    import node_api  # type: ignore[no-redef,import-not-found]

# The label this program writes: the only key it may change (the admission policy's rule too).
PLACEMENT_GROUP_LABEL = "aksgpu.io/placement-group"
LABEL_KEYS = (PLACEMENT_GROUP_LABEL,)
# azure-compute-docs instance-metadata-service.md: the compute category, JSON, api-version
# required; placementGroupId exists since 2017-08-01 (aksgpu/catalog/topology.yaml).
IMDS_URL = "http://169.254.169.254/metadata/instance/compute"
IMDS_API_VERSION = "2021-12-13"
# A Kubernetes label value: at most 63 characters, alphanumerics at both ends, "-_." inside.
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
# The API client the gate uses too (node_api.py, shipped beside this file): get and merge-patch a Node
# with the pod's service account.
Api = node_api.Api


class TopologyUnknown(ValueError):
    """IMDS did not say where this VM is (an empty or malformed placement group)."""


def topology_labels(compute: dict[str, Any]) -> dict[str, str]:
    """The node labels for an IMDS compute document: the VM's placement group.

    IMDS sets a field that does not apply to a VM to "" (instance-metadata-service.md, "Data
    format"): a VM outside a scale set has no placement group, and a node without one must stay
    unlabelled (so out of Kueue's topology) rather than get a made-up domain."""
    group = compute.get("placementGroupId")
    if not isinstance(group, str) or not group:
        raise TopologyUnknown(f"IMDS gives no placementGroupId (scale set {compute.get('vmScaleSetName')!r}): "
                              "the VM is not in a scale-set placement group")
    if len(group) > 63 or not _LABEL_VALUE.match(group):
        raise TopologyUnknown(f"placementGroupId {group!r} is not a valid Kubernetes label value")
    return {PLACEMENT_GROUP_LABEL: group}


def read_imds(opener: Callable[[urllib.request.Request], Any] | None = None) -> dict[str, Any]:
    """This VM's compute metadata. IMDS must be reached directly, never through a proxy
    (instance-metadata-service.md, "Proxies"), with the header Metadata: true."""
    request = urllib.request.Request(f"{IMDS_URL}?api-version={IMDS_API_VERSION}&format=json",
                                     headers={"Metadata": "true"})
    if opener is None:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({})).open
    with opener(request) as response:  # noqa: S310 - IMDS's fixed link-local address
        document = json.loads(response.read())
    if not isinstance(document, dict):
        raise TopologyUnknown("IMDS answered with something other than a JSON object")
    return document


def label_patch(node: dict[str, Any], wanted: dict[str, str]) -> dict[str, Any] | None:
    """The merge patch that gives the node `wanted` (None: it has them), carrying the node's
    resourceVersion so a concurrent change makes the API server refuse it (409) instead of
    being overwritten."""
    current = node.get("metadata", {}).get("labels") or {}
    changed = {key: value for key, value in wanted.items() if current.get(key) != value}
    if not changed:
        return None
    return {"metadata": {"labels": changed, "resourceVersion": node["metadata"]["resourceVersion"]}}


def label_node(api: Api, node_name: str, wanted: dict[str, str], attempts: int = 10) -> bool:
    """Label the node (node_api.update_node: retried on conflict); whether anything changed."""
    changed = False

    def change(node: dict[str, Any]) -> dict[str, Any] | None:
        nonlocal changed
        patch = label_patch(node, wanted)
        changed = patch is not None  # of the last try: the one that applied, or found nothing to do
        return patch

    node_api.update_node(api, node_name, change, attempts)
    return changed


def run(api: Api, node_name: str, read: Callable[[], dict[str, Any]] = read_imds,
        sleep: Callable[[float], None] = time.sleep, attempts: int | None = None) -> dict[str, str]:
    """Read IMDS until it says where the VM is, then label the node. IMDS answers 429 above 5
    requests a second and may be briefly unreachable while the VM boots: retried with backoff
    (at most a minute apart). `attempts` bounds the tries (None: until it works)."""
    tried = 0
    while True:
        tried += 1
        try:
            wanted = topology_labels(read())
            changed = label_node(api, node_name, wanted)
            print(f"aksgpu: {node_name}: {'labelled' if changed else 'already labelled'} "
                  + ", ".join(f"{k}={v}" for k, v in wanted.items()), flush=True)
            return wanted
        except (OSError, ValueError) as error:  # urllib's errors are OSErrors; TopologyUnknown a ValueError
            print(f"aksgpu: {node_name}: no topology label yet: {error}", file=sys.stderr, flush=True)
            if attempts is not None and tried >= attempts:
                raise
            sleep(min(5 * 2 ** min(tried - 1, 4), 60))


def main() -> int:
    node_name = os.environ["NODE_NAME"]
    run(Api.in_cluster(), node_name)
    # A DaemonSet pod must keep running; the controller removes it now that the node's label no
    # longer matches the DaemonSet's node affinity.
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
