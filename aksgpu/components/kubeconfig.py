"""Kubeconfigs that sign in to an Entra ID (AAD) AKS cluster through kubelogin.

AKS hands out an exec kubeconfig (listClusterUserCredential, format exec) whose user runs
`kubelogin get-token --login devicecode ...`: interactive, so unusable by Pulumi or CI. This
rewrites each kubelogin user to a chosen login mode, with the arguments that mode needs, the way
`kubelogin convert-kubeconfig -l MODE` does. The Kubernetes provider of the in-cluster layer and
`aksgpu kubeconfig` both use it. Pure functions: no Pulumi, no network.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

import yaml

from aksgpu import catalog

# The AKS AAD server application: the audience of every Entra ID token for an AKS API server.
AKS_AAD_SERVER_ID = str(catalog.limit("aadServerAppId"))
KUBELOGIN_INSTALL_HINT = ("\nkubelogin is not installed which is required to connect to AAD enabled cluster.\n\n"
                          "To learn more, please go to https://azure.github.io/kubelogin/\n")
# kubelogin get-token --login modes aksgpu writes (kubelogin's README, "Login Modes").
LOGIN_MODES = ("azurecli", "devicecode", "spn", "msi", "workloadidentity")
# Modes whose token request names the Entra application and tenant on the command line.
_MODES_WITH_CLIENT = ("devicecode", "spn")


class KubeconfigError(ValueError):
    """The kubeconfig cannot be converted; the message says why and what to do."""


@dataclass(frozen=True)
class Kubeconfig:
    text: str
    converted_users: list[str]
    """Users switched to `kubelogin get-token --login <mode>`."""
    other_users: list[str]
    """Users that do not sign in with Entra ID (AKS local accounts), written as AKS gave them."""
    current_context: str | None


def _exec_arg(args: list[str], flag: str) -> str | None:
    for index, arg in enumerate(args):
        if arg == flag and index + 1 < len(args):
            return args[index + 1]
        if arg.startswith(flag + "="):
            return arg[len(flag) + 1:]
    return None


def kubeconfig_for_login(kubeconfig: str, login: str) -> Kubeconfig:
    """The cluster's kubeconfig with every Entra ID user signing in through `kubelogin get-token
    --login <login>`, the arguments each mode needs as `kubelogin convert-kubeconfig` writes them.

    Accepts plain YAML (or it base64-encoded, as the AKS API returns it); converts exec users that
    run kubelogin and legacy `auth-provider: azure` users; keeps the server-id already there (else
    the AKS AAD server app); never writes a secret into the file. spn, msi and workloadidentity
    read their credentials from AZURE_* variables when kubelogin runs.
    """
    mode = str(getattr(login, "value", login))
    if mode not in LOGIN_MODES:
        raise KubeconfigError(f'"{mode}" is not a kubelogin login mode aksgpu writes; use one of: '
                              + ", ".join(LOGIN_MODES))
    document = parse_kubeconfig(kubeconfig)
    converted: list[str] = []
    others: list[str] = []
    for entry in document.get("users") or []:
        if not isinstance(entry, dict):
            continue
        name = str(entry.get("name", ""))
        user: dict[str, Any] = entry["user"] if isinstance(entry.get("user"), dict) else {}
        exec_config = user.get("exec") if isinstance(user.get("exec"), dict) else None
        provider = user.get("auth-provider") if isinstance(user.get("auth-provider"), dict) else None
        uses_kubelogin = exec_config is not None and "kubelogin" in str(exec_config.get("command", "")).lower()
        legacy_azure = provider is not None and provider.get("name") == "azure"
        if not (uses_kubelogin or legacy_azure):
            others.append(name)
            continue
        if exec_config is not None and uses_kubelogin:
            old_args = [str(arg) for arg in exec_config.get("args") or []]
            found = {flag: _exec_arg(old_args, f"--{flag}") for flag in
                     ("server-id", "client-id", "tenant-id", "environment", "cache-dir", "token-cache-dir")}
            legacy_mode = "--legacy" in old_args
            install_hint = exec_config.get("installHint") or KUBELOGIN_INSTALL_HINT
        else:
            settings = (provider or {}).get("config") or {}
            found = {"server-id": settings.get("apiserver-id"), "client-id": settings.get("client-id"),
                     "tenant-id": settings.get("tenant-id"), "environment": settings.get("environment")}
            legacy_mode = str(settings.get("config-mode", "")) in ("", "0")
            install_hint = KUBELOGIN_INSTALL_HINT
        args = ["get-token", "--login", mode, "--server-id", found.get("server-id") or AKS_AAD_SERVER_ID]
        cache_dir = found.get("cache-dir") or found.get("token-cache-dir")
        if cache_dir:
            args += ["--cache-dir", cache_dir]
        if mode in _MODES_WITH_CLIENT:
            for flag in ("client-id", "tenant-id"):
                if not found.get(flag):
                    raise KubeconfigError(f"user {name} in the kubeconfig has no --{flag}, which --login {mode} "
                                          "needs. Fix: use --login azurecli (after `az login`).")
            args += ["--client-id", str(found["client-id"]), "--tenant-id", str(found["tenant-id"])]
            if found.get("environment"):
                args += ["--environment", str(found["environment"])]
            if legacy_mode:
                args.append("--legacy")
        user.pop("auth-provider", None)
        # A new exec entry: kubelogin's convert-kubeconfig drops the old env too.
        user["exec"] = {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": "kubelogin",
                        "args": args, "env": None, "installHint": install_hint, "provideClusterInfo": False}
        entry["user"] = user
        converted.append(name)
    text = yaml.safe_dump(document, sort_keys=False, default_flow_style=False)
    current = document.get("current-context")
    return Kubeconfig(text, converted, others, str(current) if current else None)


def parse_kubeconfig(kubeconfig: str) -> dict[str, Any]:
    """The kubeconfig mapping from plain or base64-encoded YAML; KubeconfigError when it is none."""

    def load(text: str) -> Any:
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError:
            return None

    document = load(kubeconfig)
    if not (isinstance(document, dict) and "users" in document):
        try:
            document = load(base64.b64decode(kubeconfig.strip(), validate=True).decode("utf-8"))
        except (binascii.Error, ValueError):
            document = None
    if not (isinstance(document, dict) and isinstance(document.get("users"), list)):
        raise KubeconfigError("the stack's kubeconfig output is not a kubeconfig (a YAML mapping with users:). "
                              "Fix: run `aksgpu refresh ENV` and try again; if it persists, the cluster's "
                              "credentials call failed during `aksgpu up`.")
    return document
