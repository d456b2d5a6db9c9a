"""Azure CLI steps, the one shape `backend bootstrap` and `ci oidc` share: each step an az command
that may capture a value for later steps (${NAME}), look first and skip what exists, and retry
while Entra ID and role assignments replicate. The same steps print as a bash script or run here.

Also the Azure naming rules both commands check their options against. Standard library only.
"""

from __future__ import annotations

import functools
import re
import shlex
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

# Azure's naming rules (https://learn.microsoft.com/azure/azure-resource-manager/management/resource-name-rules).
STORAGE_ACCOUNT_NAME = re.compile(r"^[a-z0-9]{3,24}$")
CONTAINER_NAME = re.compile(r"^[a-z0-9](?!.*--)[a-z0-9-]{1,61}[a-z0-9]$")
KEY_NAME = re.compile(r"^[a-zA-Z0-9-]{1,127}$")


@functools.cache
def key_vault_name_rule() -> re.Pattern[str]:
    """Azure's Key Vault naming rule, from the table the spec reads too (catalog/azure_names.yaml);
    read when a command needs it, not when the CLI starts."""
    from aksgpu import catalog

    return re.compile(catalog.load("azure_names")["rules"]["Microsoft.KeyVault/vaults"]["pattern"])


AZ_MISSING = ("--apply runs the Azure CLI, and az is not on PATH. Fix: install it "
              "(https://learn.microsoft.com/cli/azure/install-azure-cli) and run `az login`, or drop "
              "--apply to print the commands and run them elsewhere (Azure Cloud Shell has az).")


@dataclass(frozen=True)
class AzStep:
    description: str
    argv: list[str]
    capture: str | None = None
    """A shell variable this step's stdout sets (it must not be empty); later steps use it as ${NAME}."""
    unless: list[str] | None = None
    """A probe: when it succeeds, the step is skipped (what exists already stays as it is)."""
    lookup: list[str] | None = None
    """Runs first; when it prints something the thing exists: the step is skipped, and with
    `capture` that output is the value. Lookups are list commands that print nothing when absent."""
    missing: str | None = None
    """The error when a capture comes back empty."""
    retries: int = 0
    """Extra attempts: new role assignments, apps and service principals take a while to apply."""


def _shell_word(token: str) -> str:
    # Our ${NAME} placeholders must expand, so those words go in double quotes (the rest of such a
    # word is a validated Azure name or a fixed path, with nothing else a shell would expand).
    return f'"{token}"' if "${" in token else shlex.quote(token)


def shell_command(argv: list[str]) -> str:
    return " ".join(_shell_word(token) for token in argv)


def shell_command_lines(argv: list[str], indent: str = "") -> list[str]:
    """A command as script lines: the command words first, then one `--option value` per line."""
    first = next((index for index, token in enumerate(argv) if token.startswith("--")), len(argv))
    groups: list[list[str]] = [argv[:first]]
    for token in argv[first:]:
        if token.startswith("--"):
            groups.append([token])
        else:
            groups[-1].append(token)
    words = [shell_command(group) for group in groups]
    if len(" ".join(words)) <= 100:
        return [indent + " ".join(words)]
    return ([indent + words[0] + " \\"] + [f"{indent}    {word} \\" for word in words[1:-1]]
            + [f"{indent}    {words[-1]}"])


def step_script_lines(step: AzStep) -> list[str]:
    """The bash lines that run one step as the runner does: capture, look first, or probe first."""
    command = shell_command(step.argv)
    if step.lookup and step.capture:
        return [f'{step.capture}="$({shell_command(step.lookup)})"',
                f'if [ -z "${{{step.capture}}}" ]; then',
                f'  {step.capture}="$({command})"',
                "fi"]
    if step.lookup:
        return [f'if [ -z "$({shell_command(step.lookup)})" ]; then', *shell_command_lines(step.argv, indent="  "),
                "fi"]
    if step.unless:
        return [f"if ! {shell_command(step.unless)} 2>/dev/null; then", *shell_command_lines(step.argv, indent="  "),
                "fi"]
    if step.capture:
        return [f'{step.capture}="$({command})"']
    return shell_command_lines(step.argv)


def substitute(argv: list[str], values: Mapping[str, str]) -> list[str]:
    """`argv` with each ${NAME} replaced by the value an earlier step captured."""
    def one(token: str) -> str:
        for name, value in values.items():
            token = token.replace(f"${{{name}}}", value)
        return token
    return [one(token) for token in argv]


class AzStepFailed(Exception):
    """A step failed: the message names the step's number, the command and Azure's last line."""


def run_steps(steps: list[AzStep], *, values: Mapping[str, str] | None = None, rerun_fix: str,
              retry_note: str, retry_seconds: float, say: Callable[[str, str | None], None],
              run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run,
              sleep: Callable[[float], None] = time.sleep) -> dict[str, str]:
    """Runs the steps one by one and returns the values they captured (with `values` given first).

    A failed step raises AzStepFailed naming the command, Azure's message and `rerun_fix`; a step
    with retries is tried again `retry_seconds` apart, saying `retry_note` each time.
    """
    captured = dict(values or {})

    def failure(number: int, argv: list[str], result: subprocess.CompletedProcess[str]) -> AzStepFailed:
        message = (result.stderr or result.stdout or "").strip().splitlines()
        return AzStepFailed(f"step {number} failed: {shell_command(argv)}\n  {message[-1] if message else ''}\n"
                            f"Fix: {rerun_fix}")

    def attempts(argv: list[str], retries: int) -> subprocess.CompletedProcess[str]:
        for attempt in range(retries + 1):
            result = run(argv, capture_output=True, text=True)
            if result.returncode == 0 or attempt == retries:
                return result
            say(f"    {retry_note}; trying again in {retry_seconds:g} s", "dim")
            sleep(retry_seconds)
        raise AssertionError("unreachable")

    for number, step in enumerate(steps, start=1):
        say(f"[{number}/{len(steps)}] {step.description}", None)
        if step.unless and run(substitute(step.unless, captured), capture_output=True, text=True).returncode == 0:
            say("    exists already: left as it is", "dim")
            continue
        if step.lookup:
            lookup = substitute(step.lookup, captured)
            found = attempts(lookup, step.retries)
            if found.returncode != 0:
                raise failure(number, lookup, found)
            if found.stdout.strip():
                say("    exists already: left as it is", "dim")
                if step.capture:
                    captured[step.capture] = found.stdout.strip()
                continue
        argv = substitute(step.argv, captured)
        result = attempts(argv, step.retries)
        if result.returncode != 0:
            raise failure(number, argv, result)
        if step.capture:
            value = result.stdout.strip()
            if not value:
                raise AzStepFailed(step.missing or f"step {number} failed: {shell_command(argv)} printed nothing.")
            captured[step.capture] = value
    return captured
