"""The customer keys aksgpu creates (KMS and the disk encryption set's) rotate and expire within
Key Vault's rules, and the vault holding them sends its audit log to the cluster's workspace."""

from __future__ import annotations

import re

import pytest

from aksgpu.plan.planner import Plan
from aksgpu.spec import SpecError, parse_cluster_spec
from tests.arm_template import arm_template
from tests.helpers import SUBSCRIPTION, base_spec, edit, preset_spec, shared_plan

KEY = "azure-native:keyvault:Key"
VAULT = "azure-native:keyvault:Vault"
DIAGNOSTICS = "azure-native:monitor:DiagnosticSetting"

# Key Vault's rules for a rotation policy, written from its documents here, not read from aksgpu:
# learn.microsoft.com/azure/key-vault/keys/how-to-configure-key-rotation ("Key rotation policy",
# read 2026-11-27): "Rotation time: key rotation interval, the minimum value is seven days from
# creation and seven days from expiration time"; the .NET SDK's KeyRotationPolicy.ExpiresIn
# (learn.microsoft.com/dotnet/api/azure.security.keyvault.keys.keyrotationpolicy.expiresin):
# the expiry "should be at least 28 days".
MIN_ROTATE_AFTER_CREATE = 7
MIN_ROTATE_BEFORE_EXPIRY = 7
MIN_EXPIRY = 28
DURATION = re.compile(r"^P(?:(\d+)Y)?(?:(\d+)M)?(?:(\d+)D)?$")


def days(duration: str) -> int:
    """An ISO 8601 date duration in days, a year taken as 365 days and a month as 30 (the shortest
    reading of a month would only make the rules below stricter for months)."""
    match = DURATION.fullmatch(duration)
    assert match and any(match.groups()), f"{duration!r} is not an ISO 8601 duration Key Vault takes"
    years, months, day_count = (int(part or 0) for part in match.groups())
    return years * 365 + months * 30 + day_count


def azure_rule_breaches(policy: dict) -> list[str]:
    """What breaks Key Vault's rules in a key's rotationPolicy (as the plan holds it)."""
    breaches = []
    expiry = days(policy["attributes"]["expiryTime"])
    if expiry < MIN_EXPIRY:
        breaches.append(f"expiry {expiry} days < {MIN_EXPIRY}")
    actions = {action["action"]["type"]: action["trigger"] for action in policy["lifetimeActions"]}
    if "rotate" not in actions:
        breaches.append("no rotate action")
        return breaches
    rotate = actions["rotate"]
    if "timeAfterCreate" in rotate:
        after = days(rotate["timeAfterCreate"])
        if after < MIN_ROTATE_AFTER_CREATE:
            breaches.append(f"rotates {after} days after creation < {MIN_ROTATE_AFTER_CREATE}")
        if expiry - after < MIN_ROTATE_BEFORE_EXPIRY:
            breaches.append(f"rotates {expiry - after} days before expiry < {MIN_ROTATE_BEFORE_EXPIRY}")
    elif days(rotate["timeBeforeExpiry"]) < MIN_ROTATE_BEFORE_EXPIRY:
        breaches.append("rotates too close to expiry")
    return breaches


def _keys(plan: Plan) -> dict[str, dict]:
    return {key.inputs["keyName"]: key.inputs["properties"] for key in plan.by_type(KEY)}


def _production_plans(example_plans: dict[str, Plan]) -> dict[str, Plan]:
    plans = {f"example {env}": plan for env, plan in example_plans.items()}
    plans |= {f"preset {preset}": shared_plan(preset_spec(preset)) for preset in ("inference", "training", "fleet")}
    return plans


def test_every_key_aksgpu_creates_rotates_and_expires_within_key_vaults_rules(
        example_plans: dict[str, Plan]) -> None:
    plans = _production_plans(example_plans)
    with_keys = {name: _keys(plan) for name, plan in plans.items() if plan.by_type(KEY)}
    assert {"example prod", "preset inference", "preset training", "preset fleet"} <= set(with_keys)
    for name, keys in with_keys.items():
        assert set(keys) == {"aks-kms", "aks-disks"}, name
        for key_name, properties in keys.items():
            policy = properties["rotationPolicy"]
            assert azure_rule_breaches(policy) == [], (name, key_name, policy)
            actions = {action["action"]["type"] for action in policy["lifetimeActions"]}
            assert actions == {"rotate", "notify"}, (name, key_name)


def test_the_default_policy_rotates_yearly_and_expires_after_two_years(example_plans: dict[str, Plan]) -> None:
    policy = _keys(example_plans["prod"])["aks-kms"]["rotationPolicy"]
    assert days(policy["attributes"]["expiryTime"]) == 730
    rotate = [a["trigger"] for a in policy["lifetimeActions"] if a["action"]["type"] == "rotate"]
    assert [days(trigger["timeAfterCreate"]) for trigger in rotate] == [365]
    assert "exp" not in policy.get("attributes", {}) and "attributes" not in _keys(example_plans["prod"])["aks-kms"], \
        "no absolute expiry in the program: it would change on every run"


def test_what_checkov_ckv_azure_40_reads_is_in_the_arm_template(example_plans: dict[str, Plan]) -> None:
    # bridgecrewio/checkov @03d5fdad8d checkov/arm/checks/resource/KeyExpirationDate.py:
    # Microsoft.KeyVault/vaults/keys, inspected key properties/rotationPolicy/attributes/expiryTime, any value.
    resources = arm_template(example_plans["prod"])["resources"]
    keys = [r for r in resources if r["type"] == "Microsoft.KeyVault/vaults/keys"]
    assert len(keys) == 2
    assert all(key["properties"]["rotationPolicy"]["attributes"]["expiryTime"] for key in keys)


def _kms_spec(**kms: object) -> dict:
    spec = edit(base_spec(), "security.kms", {"mode": "create", "networkAccess": "Public", **kms})
    return edit(spec, "security.diskEncryption", {"mode": "create"})


# Each case plans a cluster (a few tenths of a second): the bounds run in the default run, the periods
# between them with the slow tests.
@pytest.mark.parametrize(("rotation", "expiry"), [
    (7, 37), *(pytest.param(*periods, marks=pytest.mark.slow) for periods in ((30, 60), (90, 120), (180, 365))),
    (365, 395), pytest.param(365, 730, marks=pytest.mark.slow), (1000, 3650)])
def test_every_period_the_spec_accepts_satisfies_key_vaults_rules(rotation: int, expiry: int) -> None:
    plan = shared_plan(_kms_spec(keyRotationDays=rotation, keyExpiryDays=expiry))
    for key_name, properties in _keys(plan).items():
        assert azure_rule_breaches(properties["rotationPolicy"]) == [], key_name


@pytest.mark.parametrize(("kms", "path"), [
    ({"keyRotationDays": 6}, "security.kms.keyRotationDays"),  # Key Vault rotates at least 7 days after creation
    ({"keyRotationDays": 7, "keyExpiryDays": 27}, "security.kms.keyExpiryDays"),  # a version lives 28 days at least
    ({"keyRotationDays": 365, "keyExpiryDays": 370}, "security.kms.keyExpiryDays"),  # too close to the rotation
    ({"keyRotationDays": 365, "keyExpiryDays": 394}, "security.kms.keyExpiryDays"),  # before the notification
])
def test_periods_outside_key_vaults_rules_name_the_field(kms: dict, path: str) -> None:
    with pytest.raises(SpecError) as error:
        parse_cluster_spec(_kms_spec(**kms))
    assert [issue.path for issue in error.value.errors] == [path]


def test_rotation_settings_are_refused_for_an_existing_key() -> None:
    spec = edit(base_spec(), "security.kms", {
        "mode": "existing", "networkAccess": "Public", "keyRotationDays": 90,
        "keyVaultId": f"{SUBSCRIPTION}/resourceGroups/r/providers/Microsoft.KeyVault/vaults/corp-kms",
        "keyId": "https://corp-kms.vault.azure.net/keys/aks/0123456789abcdef0123456789abcdef"})
    with pytest.raises(SpecError) as error:
        parse_cluster_spec(spec)
    [issue] = error.value.errors
    assert issue.path == "security.kms.keyRotationDays" and "mode create" in issue.rule


def test_the_vault_sends_its_audit_log_and_metrics_to_the_clusters_workspace(example_plans: dict[str, Plan]) -> None:
    plan = example_plans["prod"]
    [vault] = plan.by_type(VAULT)
    settings = plan.by_type(DIAGNOSTICS)
    [vault_logs] = [s for s in settings if vault.urn in s.dependencies]
    assert vault_logs.inputs["logs"] == [{"category": "AuditEvent", "enabled": True}]
    assert vault_logs.inputs["metrics"] == [{"category": "AllMetrics", "enabled": True}]
    [control_plane] = [s for s in settings if s.inputs["name"] == "aksgpu-control-plane"]
    assert vault_logs.inputs["workspaceId"] == control_plane.inputs["workspaceId"]
    workspaces = plan.by_type("azure-native:operationalinsights:Workspace")
    assert workspaces and {w.urn for w in workspaces} <= set(vault_logs.dependencies), "the cluster's workspace"


def test_no_workspace_no_vault_diagnostics() -> None:
    spec = edit(edit(_kms_spec(), "monitoring.logAnalytics", {"mode": "none"}), "security.defender", False)
    spec = edit(edit(spec, "monitoring.containerInsights", False), "monitoring.controlPlaneLogs", [])
    plan = shared_plan(spec)
    assert plan.by_type(VAULT)
    assert not [s for s in plan.by_type(DIAGNOSTICS) if plan.by_type(VAULT)[0].urn in s.dependencies]
