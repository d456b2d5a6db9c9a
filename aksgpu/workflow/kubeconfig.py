"""The kubeconfig `aksgpu kubeconfig` writes: the stack's kubeconfig output converted for the
chosen kubelogin sign-in, written with mode 0600, never over a different file unless forced."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import TYPE_CHECKING

from aksgpu.errors import Problem, UserError

if TYPE_CHECKING:
    from aksgpu.components.kubeconfig import Kubeconfig


class LoginMode(str, enum.Enum):
    """How kubelogin gets an Entra ID token (kubelogin get-token --login)."""

    azurecli = "azurecli"
    devicecode = "devicecode"
    spn = "spn"
    msi = "msi"
    workloadidentity = "workloadidentity"


def kubeconfig_for_login(kubeconfig: str, login: LoginMode | str) -> Kubeconfig:
    """components.kubeconfig.kubeconfig_for_login, with its errors as UserError (exit code 2)."""
    from aksgpu.components.kubeconfig import KubeconfigError
    from aksgpu.components.kubeconfig import kubeconfig_for_login as convert

    try:
        return convert(kubeconfig, LoginMode(login).value)
    except KubeconfigError as error:
        raise UserError(str(error)) from None


def write_kubeconfig(path: Path, text: str, *, force: bool) -> str:
    """Writes the kubeconfig with mode 0600; 'written', 'replaced' or 'unchanged'. An existing
    different file is replaced only with `force`: it may hold other clusters' credentials."""
    from aksgpu.project.files import read_text_if_exists, write_text_atomically

    current = read_text_if_exists(path)
    existed = current is not None
    if existed:
        if current == text:
            path.chmod(0o600)
            return "unchanged"
        if not force:
            raise UserError(problems=[Problem("--output", str(path), "the file already exists and differs from "
                                              "this cluster's kubeconfig", "pass --force to replace it, or --output "
                                              "PATH to write elsewhere")])
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as error:
        raise UserError(problems=[Problem("--output", str(path), f"cannot create its folder {path.parent}: "
                                          f"{error.strerror}", "choose another --output")]) from None
    write_text_atomically(path, text, mode=0o600)
    return "replaced" if existed else "written"
