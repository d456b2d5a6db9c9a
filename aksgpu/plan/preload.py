"""What the plan workers' server imports before it forks a worker (plan/workers.py PRELOAD): the
provider SDK modules of the resources aksgpu declares, each as the program loads it (one module per
class, components/sdk_modules.py), so that a worker plans its first stack without importing them
(about two thirds of a first plan's time). Importing this module does it, once per process.

SDK_MODULES is what planning the examples (examples/gpu-clusters dev and prod, every stack of
examples/gpu-fleet) imports from the SDKs, as pulumi-azure-native v3 and pulumi-kubernetes v4 name
their modules (tests/test_plan_preload.py holds it to that: nothing more, nothing missing). A stack
that declares a class not listed still plans: its worker imports that module itself.
"""

from __future__ import annotations

import functools
import gc
import importlib
from typing import Any

# Package -> the modules of the classes (and invokes) aksgpu declares from it, by module name.
SDK_MODULES: dict[str, tuple[str, ...]] = {
    "pulumi_azure_native.alertsmanagement": ("prometheus_rule_group",),
    "pulumi_azure_native.authorization": ("get_client_config", "role_assignment"),
    "pulumi_azure_native.compute": ("disk_encryption_set",),
    "pulumi_azure_native.containerregistry": ("registry", "replication"),
    "pulumi_azure_native.containerservice": ("agent_pool", "auto_upgrade_profile", "fleet", "fleet_member",
                                             "fleet_update_strategy", "list_managed_cluster_user_credentials",
                                             "maintenance_configuration", "managed_cluster"),
    "pulumi_azure_native.keyvault": ("key", "vault"),
    "pulumi_azure_native.managedidentity": ("user_assigned_identity",),
    "pulumi_azure_native.monitor": ("azure_monitor_workspace", "data_collection_endpoint", "data_collection_rule",
                                    "data_collection_rule_association", "diagnostic_setting"),
    "pulumi_azure_native.network": ("nat_gateway", "network_security_group", "private_dns_zone_group",
                                    "private_endpoint", "public_ip_address", "subnet", "virtual_network"),
    "pulumi_azure_native.operationalinsights": ("workspace",),
    "pulumi_azure_native.privatedns": ("private_zone", "virtual_network_link"),
    "pulumi_azure_native.resources": ("resource_group",),
    "pulumi_kubernetes.admissionregistration.v1": ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"),
    "pulumi_kubernetes.apiextensions": ("CustomResource",),
    "pulumi_kubernetes.apps.v1": ("DaemonSet", "Deployment"),
    "pulumi_kubernetes.batch.v1": ("CronJob",),
    "pulumi_kubernetes.core.v1": ("ConfigMap", "LimitRange", "Namespace", "ResourceQuota", "Service",
                                  "ServiceAccount"),
    "pulumi_kubernetes.helm.v3": ("Release",),
    "pulumi_kubernetes.meta.v1": ("_inputs", "outputs"),
    "pulumi_kubernetes.networking.v1": ("NetworkPolicy",),
    "pulumi_kubernetes.rbac.v1": ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"),
    "pulumi_kubernetes.scheduling.v1": ("PriorityClass",),
}


@functools.cache
def preload() -> None:
    """Import SDK_MODULES as the program would (its packages partial: only these modules run)."""
    from aksgpu.plan.offline_sdk import load_sdks_with_text_annotations
    from aksgpu.program import load_by_class

    load_sdks_with_text_annotations()
    load_by_class()
    for package_name, names in SDK_MODULES.items():
        root, *path = package_name.split(".")
        package: Any = importlib.import_module(root)
        for part in path:
            package = getattr(package, part)
        for name in names:
            getattr(package, name)


preload()
# What was imported lives as long as the process: frozen, the collector leaves it out of every pass,
# in the server and in each worker forked from it (which then copies fewer pages), and at exit,
# where a last pass over it took the server about 0.6 s (Python's gc.freeze documents the use
# before fork: https://docs.python.org/3/library/gc.html#gc.freeze, checked 2026-11-27).
gc.freeze()
