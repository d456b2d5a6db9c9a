"""PSRule for Azure's rules against aksgpu: the status table (aksgpu/policy/psrule.yaml) held to
the extract of PSRule's rules (tests/data/psrule/rules.yaml, with its source) and to the code each
status names."""

from __future__ import annotations

import importlib
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from aksgpu.policy.catalog import rule, rule_ids, rules
from aksgpu.policy.psrule import RuleStatus, _entry, statuses
from aksgpu.spec import ClusterSpec
from tools.docs_reference import spec_fields

REPO = Path(__file__).resolve().parent.parent
EXTRACT = Path(__file__).resolve().parent / "data" / "psrule" / "rules.yaml"
PSRULE_CITATION = re.compile(r"PSRule (Azure\.[A-Za-z]+\.[A-Za-z.]+[A-Za-z])")


@cache
def extract() -> dict[str, Any]:
    return yaml.safe_load(EXTRACT.read_text(encoding="utf-8"))


def _extract_rules() -> dict[str, dict[str, Any]]:
    return {entry["name"]: entry for entry in extract()["rules"]}


def test_every_rule_of_the_extract_has_one_status_and_no_status_names_another_rule() -> None:
    names = [status.rule for status in statuses()]
    assert len(names) == len(set(names)), sorted({n for n in names if names.count(n) > 1})
    known = set(_extract_rules())
    assert set(names) == known, f"no status: {sorted(known - set(names))}; no such rule: {sorted(set(names) - known)}"


def test_the_extract_is_consistent_with_its_source() -> None:
    document = extract()
    declared = set(document["declaredTypes"])
    refs = [entry["ref"] for entry in document["rules"] if entry["ref"]]
    assert len(refs) == len(set(refs))
    assert all(re.fullmatch(r"AZR-\d{6}", ref) for ref in refs)
    targeted = set()
    for entry in document["rules"]:
        assert entry["types"] == ["*"] or set(entry["types"]) <= declared | {
            "Microsoft.KeyVault/vaults/accessPolicies", "Microsoft.KeyVault/vaults/secrets"}, entry["name"]
        targeted |= set(entry["types"])
        # Each rule says where it was read: a rule file at a commit, or the page that stood in.
        assert bool(entry.get("definedIn")) != bool(entry.get("foundIn")), entry["name"]
        if entry.get("definedIn"):
            assert re.fullmatch(r"src/PSRule\.Rules\.Azure/rules/Azure\.\w+\.Rule\.(ps1|yaml)@[0-9a-f]{40}",
                                entry["definedIn"]), entry["name"]
    assert document["declaredTypesWithoutRules"] == sorted(declared - targeted)


def test_an_enforced_rule_names_a_policy_of_the_pack_that_follows_it() -> None:
    for status in statuses():
        if status.status != "enforced":
            continue
        assert status.policy in rule_ids(), f"{status.rule}: no policy rule {status.policy}"
        assert any(status.rule in source for source in rule(status.policy).sources), (
            f"{status.rule}: policy {status.policy} does not cite it among its sources")


def test_every_psrule_rule_the_policy_pack_cites_exists() -> None:
    cited = {(r.id, name) for r in rules() for source in r.sources for name in PSRULE_CITATION.findall(source)}
    assert cited
    assert [(policy, name) for policy, name in sorted(cited) if name not in _extract_rules()] == []


def _spec_paths() -> set[str]:
    return {path for path, *_ in spec_fields(ClusterSpec)}


def test_named_fields_checks_and_components_exist() -> None:
    paths = _spec_paths()
    for status in statuses():
        if status.field:
            assert status.field in paths, f"{status.rule}: no spec field {status.field}"
        if status.check:
            module, _, attribute = status.check.partition(":")
            assert callable(getattr(importlib.import_module(module), attribute, None)), (
                f"{status.rule}: no {status.check}")
        if status.component:
            text = (REPO / status.component).read_text(encoding="utf-8")
            assert status.sets is None or status.sets in text, (
                f"{status.rule}: {status.component} does not set {status.sets}")


@pytest.mark.parametrize("raw, message", [
    ({"rule": "Azure.X.Y", "status": "enforced"}, "needs policy"),
    ({"rule": "Azure.X.Y", "status": "waived"}, "needs reason"),
    ({"rule": "Azure.X.Y", "status": "default"}, "needs field or component"),
    ({"rule": "Azure.X.Y", "status": "fine", "reason": "r"}, "is not one of"),
    ({"rule": "Azure.X.Y", "status": "waived", "reason": "r", "why": "x"}, "unknown keys"),
    ({"rule": "Azure.X.Y", "status": "default", "field": "tags", "sets": "x"}, "sets needs the component"),
])
def test_a_malformed_entry_is_refused(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _entry(raw)


def test_the_docs_page_lists_every_rule_with_its_status() -> None:
    from tools.docs_reference import pages

    page = next(text for path, text in pages().items() if path.name == "psrule-rules.md")
    for status in statuses():
        row = next(line for line in page.splitlines() if line.startswith(f"| `{status.rule}` "))
        assert f"| {status.status} |" in row
    ref = _extract_rules()["Azure.AKS.UseRBAC"]["ref"]
    assert ref in page and "AZR-000038" == ref


def test_a_status_detail_reads_as_one_line() -> None:
    assert RuleStatus(rule="a", status="enforced", policy="aks-rbac").detail == "policy rule `aks-rbac`"
    assert "\n" not in "".join(status.detail for status in statuses())


# The ARM type of each azure-native resource class aksgpu's components declare.
ARM_TYPES = {
    "alertsmanagement.PrometheusRuleGroup": "Microsoft.AlertsManagement/prometheusRuleGroups",
    "authorization.RoleAssignment": "Microsoft.Authorization/roleAssignments",
    "authorization.RoleDefinition": "Microsoft.Authorization/roleDefinitions",
    "azure_network.NatGateway": "Microsoft.Network/natGateways",
    "azure_network.NetworkSecurityGroup": "Microsoft.Network/networkSecurityGroups",
    "azure_network.PrivateDnsZoneGroup": "Microsoft.Network/privateEndpoints/privateDnsZoneGroups",
    "azure_network.PrivateEndpoint": "Microsoft.Network/privateEndpoints",
    "azure_network.PublicIPAddress": "Microsoft.Network/publicIPAddresses",
    "azure_network.Subnet": "Microsoft.Network/virtualNetworks/subnets",
    "azure_network.VirtualNetwork": "Microsoft.Network/virtualNetworks",
    "compute.DiskEncryptionSet": "Microsoft.Compute/diskEncryptionSets",
    "containerregistry.Registry": "Microsoft.ContainerRegistry/registries",
    "containerregistry.Replication": "Microsoft.ContainerRegistry/registries/replications",
    "containerservice.AgentPool": "Microsoft.ContainerService/managedClusters/agentPools",
    "containerservice.AutoUpgradeProfile": "Microsoft.ContainerService/fleets/autoUpgradeProfiles",
    "containerservice.Fleet": "Microsoft.ContainerService/fleets",
    "containerservice.FleetMember": "Microsoft.ContainerService/fleets/members",
    "containerservice.FleetUpdateStrategy": "Microsoft.ContainerService/fleets/updateStrategies",
    "containerservice.MaintenanceConfiguration": "Microsoft.ContainerService/managedClusters/maintenanceConfigurations",
    "containerservice.ManagedCluster": "Microsoft.ContainerService/managedClusters",
    "containerservice.Snapshot": "Microsoft.ContainerService/snapshots",
    "keyvault.Key": "Microsoft.KeyVault/vaults/keys",
    "keyvault.Vault": "Microsoft.KeyVault/vaults",
    "managedidentity.UserAssignedIdentity": "Microsoft.ManagedIdentity/userAssignedIdentities",
    "managedidentity.FederatedIdentityCredential":
        "Microsoft.ManagedIdentity/userAssignedIdentities/federatedIdentityCredentials",
    "monitor.AzureMonitorWorkspace": "Microsoft.Monitor/accounts",
    "monitor.DataCollectionEndpoint": "Microsoft.Insights/dataCollectionEndpoints",
    "monitor.DataCollectionRule": "Microsoft.Insights/dataCollectionRules",
    "monitor.DataCollectionRuleAssociation": "Microsoft.Insights/dataCollectionRuleAssociations",
    "monitor.DiagnosticSetting": "Microsoft.Insights/diagnosticSettings",
    "operationalinsights.Workspace": "Microsoft.OperationalInsights/workspaces",
    "privatedns.PrivateZone": "Microsoft.Network/privateDnsZones",
    "privatedns.VirtualNetworkLink": "Microsoft.Network/privateDnsZones/virtualNetworkLinks",
    "resources.ResourceGroup": "Microsoft.Resources/resourceGroups",
}
AZURE_CLASS = re.compile(r"\b((?:alertsmanagement|authorization|azure_network|compute|containerregistry"
                         r"|containerservice|keyvault|managedidentity|monitor|operationalinsights|privatedns"
                         r"|resources)\.[A-Z]\w+)\(")


def test_the_extract_covers_every_azure_resource_type_aksgpu_declares() -> None:
    """A new kind of Azure resource in the components needs its PSRule rules reviewed: its type
    must be among the extract's declared types (and the rules for it among the extract's rules)."""
    found = {match for path in (REPO / "aksgpu" / "components").rglob("*.py")
             for match in AZURE_CLASS.findall(path.read_text(encoding="utf-8"))}
    assert found, "no azure-native resource found: the pattern no longer matches the components"
    assert sorted(found - set(ARM_TYPES)) == [], "add the new class's ARM type to ARM_TYPES and the extract"
    assert {ARM_TYPES[name] for name in found} == set(extract()["declaredTypes"])
