"""`aksgpu --help` without Typer or any command module: the top-level help text from a table of the
group's help, options and commands (each command's first help paragraph, in the app's order),
laid out as click lays it out (its HelpFormatter and make_default_short_help, click 8.x
src/click/formatting.py and src/click/utils.py, as vendored in typer._click; checked 2026-11-27).

tests/test_cli_short_help.py holds the table to the real app: the same help, options and commands,
and the same text at several terminal widths. Only the standard library is imported here.
"""

from __future__ import annotations

import shutil
import textwrap

GROUP_HELP = ("AKS GPU clusters from one validated spec: presets and environments, rendered Pulumi stacks, "
              "an offline plan, and the real `pulumi up`.")
USAGE = "[OPTIONS] COMMAND [ARGS]..."
OPTIONS = (
    ("--version", "Print aksgpu's version and exit."),
    ("-q, --quiet", "Print no status lines or spinners on stderr; errors still print."),
    ("--install-completion", "Install completion for the current shell."),
    ("--show-completion", "Show completion for the current shell, to copy it or customize the installation."),
    ("-h, --help", "Show this message and exit."),
)
COMMANDS = (
    ("plan", "Show every resource `pulumi up` would create for a stack, offline."),
    ("validate", "Check environments and stack files against every spec rule and aksgpu's security policies, "
                 "and print all problems at once."),
    ("render", "Render stacks/Pulumi.<env>.yaml from stacks/environments.yaml through templates/."),
    ("init", "Add an environment to stacks/environments.yaml (creating it if needed) and render its stack."),
    ("new", "Start your own infrastructure repository: a Pulumi project that uses aksgpu, a first environment "
            "and its CI."),
    ("diff", "Show how two environments' effective specs differ, field by field."),
    ("schema", "Print the JSON Schema of the cluster spec or of environments.yaml, for editors and CI."),
    ("preview", "Show what `aksgpu up` would change in Azure (pulumi preview through the Automation API)."),
    ("up", "Create or update the stack's resources in Azure (pulumi up through the Automation API)."),
    ("destroy", "Delete every resource of the stack (pulumi destroy through the Automation API)."),
    ("refresh", "Bring the stack's state in line with what exists in Azure (pulumi refresh)."),
    ("outputs", "Print the stack's outputs (cluster name and ID, OIDC issuer, registry, workspace, kubeconfig)."),
    ("kubeconfig", "Write a kubeconfig for the cluster from the stack's kubeconfig output (Entra ID sign-in "
                   "through kubelogin)."),
    ("cost", "Estimate what a stack's cluster costs per hour and per month, offline."),
    ("vm-sizes", "List the VM sizes aksgpu knows: vCPUs, memory, GPUs, local disks, where an ephemeral OS disk "
                 "goes, InfiniBand, MIG, vCPU quota family, encryption at host and retirement."),
    ("promote", "Decide from the canary pool's gate verdicts: promote its stack to the other GPU pools, wait, "
                "refuse or roll back."),
    ("presets", "The presets environments start from."),
    ("backend", "Pulumi state backends: set up a team backend on Azure."),
    ("prices", "The price table behind cost estimates: its date, and a fresh one from Azure."),
    ("ci", "CI for pull requests: offline checks, previews, gated deploys, drift checks."),
    ("policy", "aksgpu's security policies: what each checks, why, and its sources."),
)


def short_help(text: str, max_length: int) -> str:
    """click's make_default_short_help for a one-paragraph help: whole, cut at its first sentence,
    or cut at a word with "..."."""
    words = text.split()
    total_length = 0
    for i, word in enumerate(words):
        total_length += len(word) + (i > 0)
        if total_length > max_length:
            break
        if word[-1] == ".":
            return " ".join(words[: i + 1])
        if total_length == max_length and i != len(words) - 1:
            break
    else:
        return " ".join(words)
    total_length += len("...")
    while i > 0:
        total_length -= len(words[i]) + (i > 0)
        if total_length <= max_length:
            break
        i -= 1
    return " ".join(words[:i]) + "..."


def _wrap(text: str, width: int, indent: str = "") -> str:
    return textwrap.TextWrapper(width, initial_indent=indent, subsequent_indent=indent,
                                replace_whitespace=False).fill(text)


def _definitions(rows: list[tuple[str, str]], width: int, indent: int = 2) -> list[str]:
    """click's HelpFormatter.write_dl (col_max 30, col_spacing 2) inside one section."""
    first_col = min(max(len(term) for term, _ in rows), 30) + 2
    lines = []
    for term, text in rows:
        head = " " * indent + term
        if len(term) <= first_col - 2:
            head += " " * (first_col - len(term))
        else:
            lines.append(head)
            head = " " * (first_col + indent)
        wrapped = _wrap(text, max(width - first_col - 2, 10)).splitlines()
        lines.append(head + wrapped[0])
        lines.extend(" " * (first_col + indent) + line for line in wrapped[1:])
    return lines


def help_text(columns: int | None = None) -> str:
    """What `aksgpu --help` prints, without its final newline, for a terminal this wide."""
    width = max(min(columns or shutil.get_terminal_size().columns, 80) - 2, 50)
    lines = [f"Usage: aksgpu {USAGE}", "", _wrap(GROUP_HELP, width, "  "), "", "Options:"]
    lines += _definitions(list(OPTIONS), width)
    limit = width - 6 - max(len(name) for name, _ in COMMANDS)
    lines += ["", "Commands:"]
    lines += _definitions([(name, short_help(text, limit)) for name, text in COMMANDS], width)
    return "\n".join(lines)
