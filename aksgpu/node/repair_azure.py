"""The repair loop's only calls to Azure, in one small class: an Azure Resource Manager token (the
pod's workload identity, or the VM's managed identity through IMDS), the reimage of a node's VMSS
instance, the delete of a node through AKS (agentPools/deleteMachines: AKS, not the scale set,
removes it), and Azure Scheduled Events from IMDS.

None of this is exercised offline: the tests use a fake of `AzureCompute` (docs/guides/repair.md).

Standard library only: shipped beside node_repair.py in its ConfigMap."""

from __future__ import annotations

import json
import os
import re
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

# Azure Resource Manager; the VMSS VM reimage's API version
# (https://learn.microsoft.com/rest/api/compute/virtual-machine-scale-set-vms/reimage,
# api-version 2024-07-01, checked 2026-11-27). AKS has no reimage of one node: this call goes to the
# node resource group, which node resource group lockdown (restrictionLevel ReadOnly) denies with a
# 403 (https://learn.microsoft.com/azure/aks/node-resource-group-lockdown, checked 2026-11-27).
ARM = "https://management.azure.com"
COMPUTE_API_VERSION = "2024-07-01"
# A node is deleted through AKS: POST <cluster>/agentPools/<pool>/deleteMachines with body
# AgentPoolDeleteMachinesParameter {"machineNames": [...]} (operation AgentPools_DeleteMachines,
# Microsoft.ContainerService stable 2025-09-01, managedClusters.json in Azure/azure-rest-api-specs;
# answers 202). A VMSS pool's machine names are its node names, as `kubectl get nodes` lists them
# (https://learn.microsoft.com/azure/aks/delete-node-pool#remove-specific-vms-in-the-existing-node-pool;
# checked 2026-11-27). Deleting the instance through Microsoft.Compute instead is a direct change of
# the node resource group, unsupported by AKS and denied under lockdown (same lockdown page).
CONTAINER_SERVICE_API_VERSION = "2025-09-01"
# The cluster's resource ID, as the CronJob passes it (--cluster-id).
CLUSTER_ID = re.compile(
    r"^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.ContainerService/managedClusters/[^/]+$",
    re.IGNORECASE)
# IMDS: Scheduled Events (https://learn.microsoft.com/en-us/azure/virtual-machines/linux/scheduled-events,
# api-version 2020-07-01, header Metadata: true; checked 2026-11-27) and managed identity tokens
# (https://learn.microsoft.com/en-us/entra/identity/managed-identities-azure-resources/how-to-use-vm-token,
# api-version 2018-02-01).
IMDS = "http://169.254.169.254/metadata"
SCHEDULED_EVENTS_API_VERSION = "2020-07-01"
IMDS_TOKEN_API_VERSION = "2018-02-01"
# Entra Workload ID: the webhook gives the pod these variables and a projected token file, which is
# exchanged for an Entra token as a client assertion
# (https://learn.microsoft.com/en-us/azure/aks/workload-identity-overview, checked 2026-11-27).
WORKLOAD_IDENTITY_VARIABLES = ("AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_FEDERATED_TOKEN_FILE")
DEFAULT_AUTHORITY = "https://login.microsoftonline.com/"

# AKS nodes' providerID: azure:///subscriptions/<id>/resourceGroups/<rg>/providers/
# Microsoft.Compute/virtualMachineScaleSets/<vmss>/virtualMachines/<instance id> (cloud-provider-azure).
PROVIDER_ID = re.compile(
    r"^azure:///subscriptions/(?P<subscription>[^/]+)/resourceGroups/(?P<group>[^/]+)/providers/"
    r"Microsoft\.Compute/virtualMachineScaleSets/(?P<vmss>[^/]+)/virtualMachines/(?P<instance>[0-9]+)$",
    re.IGNORECASE)


@dataclass(frozen=True)
class Instance:
    """A node's VMSS instance, from its providerID."""

    subscription: str
    group: str
    vmss: str
    instance: str

    @property
    def path(self) -> str:
        return (f"/subscriptions/{self.subscription}/resourceGroups/{self.group}/providers/Microsoft.Compute/"
                f"virtualMachineScaleSets/{self.vmss}/virtualMachines/{self.instance}")

    @property
    def event_name(self) -> str:
        """The name Scheduled Events give a scale set's VM in Resources: <scale set>_<instance id>."""
        return f"{self.vmss}_{self.instance}".lower()


def instance_of(provider_id: str | None) -> Instance | None:
    found = PROVIDER_ID.fullmatch(provider_id or "")
    return Instance(**found.groupdict()) if found else None


def delete_machines_request(cluster_id: str, pool: str, machine: str) -> tuple[str, dict[str, Any]]:
    """The path and body of AKS's deleteMachines for one machine (a node) of one agent pool."""
    if not CLUSTER_ID.fullmatch(cluster_id or ""):
        raise ValueError(f"--cluster-id {cluster_id!r} is not a managed cluster's resource ID "
                         "(/subscriptions/<id>/resourceGroups/<group>/providers/Microsoft.ContainerService/"
                         "managedClusters/<name>)")
    if not pool or not machine:
        raise ValueError(f"node {machine!r} has no agent pool (label kubernetes.azure.com/agentpool) to delete it from")
    return f"{cluster_id}/agentPools/{pool}/deleteMachines", {"machineNames": [machine]}


class AzureCompute:
    """Reimage a VMSS instance through Azure Resource Manager, delete a node through AKS; read
    Scheduled Events."""

    def __init__(self, environ: dict[str, str] | None = None, cluster_id: str = "") -> None:
        self.environ = dict(os.environ if environ is None else environ)
        self.cluster_id = cluster_id
        self._token: tuple[str, float] | None = None

    def _open(self, request: urllib.request.Request, timeout: float = 30) -> Any:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310  (fixed https/IMDS URLs)
            body = response.read()
            return json.loads(body) if body else {}

    def token(self) -> str:
        """An Azure Resource Manager token: the workload identity's where the pod has one, else IMDS's."""
        if self._token and self._token[1] > time.time() + 300:
            return self._token[0]
        if all(self.environ.get(name) for name in WORKLOAD_IDENTITY_VARIABLES):
            with open(self.environ["AZURE_FEDERATED_TOKEN_FILE"], encoding="utf-8") as handle:
                assertion = handle.read().strip()
            authority = self.environ.get("AZURE_AUTHORITY_HOST") or DEFAULT_AUTHORITY
            url = f"{authority.rstrip('/')}/{self.environ['AZURE_TENANT_ID']}/oauth2/v2.0/token"
            form = urllib.parse.urlencode({
                "client_id": self.environ["AZURE_CLIENT_ID"], "grant_type": "client_credentials",
                "scope": f"{ARM}/.default", "client_assertion": assertion,
                "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"}).encode()
            answer = self._open(urllib.request.Request(url, data=form, method="POST"))
        else:
            query = urllib.parse.urlencode({"api-version": IMDS_TOKEN_API_VERSION, "resource": f"{ARM}/"})
            request = urllib.request.Request(f"{IMDS}/identity/oauth2/token?{query}", headers={"Metadata": "true"})
            answer = self._open(request)
        expires = time.time() + float(answer.get("expires_in") or 300)
        self._token = (str(answer["access_token"]), expires)
        return self._token[0]

    def _arm(self, method: str, path: str, api_version: str, body: Any = None) -> Any:
        url = f"{ARM}{path}?api-version={api_version}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method,
                                         headers={"Authorization": f"Bearer {self.token()}",
                                                  "Content-Type": "application/json"})
        return self._open(request, timeout=60)

    def reimage(self, instance: Instance) -> None:
        """Reimage the instance (.../virtualMachines/reimage/action); Azure answers 202 and works on."""
        self._arm("POST", f"{instance.path}/reimage", COMPUTE_API_VERSION, {})

    def delete_machine(self, pool: str, machine: str) -> None:
        """Delete a node through AKS (Microsoft.ContainerService/managedClusters/agentPools/deleteMachines/
        action); AKS answers 202, removes the VMSS instance and lowers the pool's count."""
        path, body = delete_machines_request(self.cluster_id, pool, machine)
        self._arm("POST", path, CONTAINER_SERVICE_API_VERSION, body)

    def scheduled_events(self) -> list[dict[str, Any]]:
        """The Scheduled Events IMDS gives this VM: those of every VM of its scale set's placement group."""
        query = urllib.parse.urlencode({"api-version": SCHEDULED_EVENTS_API_VERSION})
        request = urllib.request.Request(f"{IMDS}/scheduledevents?{query}", headers={"Metadata": "true"})
        return list(self._open(request, timeout=10).get("Events") or [])
