"""Field types and rules a cluster and a fleet share: a region, a resource group, a cluster name, a
DNS prefix and a Pulumi stack name. A fleet's location, its members' clusters and regions, and its
hub's DNS prefix are checked by the same rule, with the same message, as a cluster's (issue 27,
"fleet-level fields as strictly as the same fields of a cluster").
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Annotated

from aksgpu import catalog

from aksgpu.spec.base import Issue, checked, did_you_mean

# managedClusters.json: resourceName path parameter.
CLUSTER_NAME = re.compile(r"^[a-zA-Z0-9]$|^[a-zA-Z0-9][-_a-zA-Z0-9]{0,61}[a-zA-Z0-9]$")
# terraform-provider-azurerm validate/kubernetes.go KubernetesDNSPrefix (1-54 characters); Fleet
# Manager's FleetHubProfile.dnsPrefix has the same pattern and length (fleets.json 2024-05-02-preview).
DNS_PREFIX = re.compile(r"^[a-zA-Z\d][-a-zA-Z\d]{0,52}[a-zA-Z\d]$|^[a-zA-Z\d]$")
RESOURCE_GROUP = re.compile(r"^[-\w._()]{0,89}[-\w_()]$")
LOCATION = re.compile(r"^[a-z][a-z0-9]+$")
# Pulumi stack names allow letters, digits, '-', '_' and '.'; the name is also part of a file
# name (Pulumi.<env>.yaml), so it may not end in '.' or in .yaml (then it reads as a path).
STACK_NAME = re.compile(r"^(?![\s\S]*\.ya?ml$)[a-zA-Z0-9](?:[a-zA-Z0-9_.-]{0,62}[a-zA-Z0-9_-])?$")
STACK_NAME_RULE = ("must be 1-64 letters, digits, '-', '_' or '.', starting with a letter or digit, not ending in '.' "
                   "or .yaml (a Pulumi stack name, and part of a file name)")

ClusterName = Annotated[
    str,
    checked(CLUSTER_NAME.fullmatch,
            "must be 1-63 letters, digits, '-' or '_', starting and ending with a letter or digit",
            'rename it, e.g. "gpu-prod"'),
]
DnsPrefix = Annotated[
    str,
    checked(DNS_PREFIX.fullmatch, "must be 1-54 letters, digits or '-', starting and ending with a letter or digit",
            "shorten it or remove the other characters"),
]
Location = Annotated[
    str,
    checked(LOCATION.fullmatch, "must be an Azure region name in lowercase without spaces",
            'write it like "eastus2" (see `az account list-locations -o table`)'),
]
ResourceGroupName = Annotated[
    str,
    checked(RESOURCE_GROUP.fullmatch,
            "must be 1-90 letters, digits, '-', '_', '.', '(' or ')', not ending in '.'",
            'rename it, e.g. "rg-gpu-prod"'),
]
StackName = Annotated[str, checked(STACK_NAME.fullmatch, STACK_NAME_RULE,
                                   "render the fleet environment again (`aksgpu render ENV`)")]


def check_location(location: str, path: str = "location") -> Iterator[Issue]:
    """A region aksgpu's table (catalog/azure_regions.yaml) lists; a near miss is an error with the
    nearest region, a name the table lacks a warning (a region new to aksgpu)."""
    table = catalog.load("azure_regions")
    if location in table["regions"] or location in table["restricted"]:
        return
    guess = did_you_mean(location, table["regions"], cutoff=0.8)
    if guess:
        yield Issue(path, location, "is not an Azure region, but is close to one",
                    f"{guess}(regions: `az account list-locations -o table`)")
        return
    yield Issue(path, location, "is not in aksgpu's table of Azure public-cloud regions "
                "(aksgpu/catalog/azure_regions.yaml)",
                "check the name with `az account list-locations -o table`; if it is a new region, add it to the table",
                "warning")
