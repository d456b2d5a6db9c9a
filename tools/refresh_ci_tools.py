"""Refresh aksgpu/ci/data/ci_tools.yaml from the vendors' own checksum files (needs internet).

    .venv/bin/python tools/refresh_ci_tools.py                      # show what the latest releases would pin
    .venv/bin/python tools/refresh_ci_tools.py --write              # write them into the table
    .venv/bin/python tools/refresh_ci_tools.py --version pulumi=3.272.0 --write

For each tool it reads the release version (the latest, or the one given), downloads the vendor's
checksum file for that release and takes the SHA-256 of the linux/amd64 download:
- Pulumi CLI: https://get.pulumi.com/releases/sdk/pulumi-<version>-checksums.txt
  ("<sha256>  pulumi-v<version>-linux-x64.tar.gz" lines); latest: https://www.pulumi.com/latest-version
- kubectl: https://dl.k8s.io/release/<version>/bin/linux/amd64/kubectl.sha256 (the bare hex);
  latest: https://dl.k8s.io/release/stable.txt
- kubelogin: https://github.com/Azure/kubelogin/releases/download/<version>/kubelogin-linux-amd64.zip.sha256
  ("<sha256>  kubelogin-linux-amd64.zip"); latest: the GitHub releases API.
Rows it writes get grade "vendor" and today's date. Review the diff, check that the Pulumi CLI
version is one aksgpu is tested with, then run tools/regenerate.py and re-render the examples' CI.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import yaml

TABLE = Path(__file__).resolve().parents[1] / "aksgpu" / "ci" / "data" / "ci_tools.yaml"
HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Tool:
    latest_url: str
    latest: Callable[[str], str]  # the body of latest_url -> the version
    url: Callable[[str], str]  # version -> download URL
    checksums_url: Callable[[str], str]  # version -> the vendor's checksum file


def _pulumi_version(version: str) -> str:
    return version.strip().lstrip("v")


def _tag(version: str) -> str:
    version = version.strip()
    return version if version.startswith("v") else f"v{version}"


TOOLS: dict[str, Tool] = {
    "pulumi": Tool(
        "https://www.pulumi.com/latest-version", _pulumi_version,
        lambda v: f"https://get.pulumi.com/releases/sdk/pulumi-v{v}-linux-x64.tar.gz",
        lambda v: f"https://get.pulumi.com/releases/sdk/pulumi-{v}-checksums.txt"),
    "kubectl": Tool(
        "https://dl.k8s.io/release/stable.txt", _tag,
        lambda v: f"https://dl.k8s.io/release/{v}/bin/linux/amd64/kubectl",
        lambda v: f"https://dl.k8s.io/release/{v}/bin/linux/amd64/kubectl.sha256"),
    "kubelogin": Tool(
        "https://api.github.com/repos/Azure/kubelogin/releases/latest", lambda body: json.loads(body)["tag_name"],
        lambda v: f"https://github.com/Azure/kubelogin/releases/download/{v}/kubelogin-linux-amd64.zip",
        lambda v: f"https://github.com/Azure/kubelogin/releases/download/{v}/kubelogin-linux-amd64.zip.sha256"),
}


def checksum_for(text: str, filename: str) -> str:
    """The SHA-256 of `filename` in a checksum file: "<hex>  <name>" lines (sha256sum's format, a
    '*' before binary names), or a file that holds one bare hex digest (kubectl's .sha256)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) == 1 and HEX64.fullmatch(lines[0].lower()):
        return lines[0].lower()
    for line in lines:
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("*") == filename and HEX64.fullmatch(parts[0].lower()):
            return parts[0].lower()
    raise ValueError(f"no SHA-256 for {filename} in the checksum file")


def _get(url: str) -> str:
    request = urllib.request.Request(url, headers={"User-Agent": "aksgpu-refresh-ci-tools"})
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 (https URLs above)
        return str(response.read().decode("utf-8"))


def refreshed_row(name: str, version: str | None, get: Callable[[str], str] = _get,
                  today: str | None = None) -> dict[str, str]:
    """The table row for a tool at `version` (None: the latest release), from the vendor's checksum file."""
    tool = TOOLS[name]
    version = tool.latest(get(tool.latest_url)) if version is None else version
    url, checksums_url = tool.url(version), tool.checksums_url(version)
    sha256 = checksum_for(get(checksums_url), url.rsplit("/", 1)[-1])
    return {"version": version, "url": url, "sha256": sha256, "checksums_url": checksums_url, "grade": "vendor",
            "source": f"the vendor's checksum file {checksums_url}, read by tools/refresh_ci_tools.py on "
                      f"{today or datetime.date.today().isoformat()}"}


def write_table(rows: dict[str, dict[str, str]], path: Path = TABLE) -> None:
    """Replace those tools' rows, keeping the table's comments (everything before `tools:`)."""
    text = path.read_text(encoding="utf-8")
    head, _, _ = text.partition("\ntools:\n")
    table = yaml.safe_load(text)
    table["tools"].update(rows)
    head = re.sub(r"^retrieved: .*$", f"retrieved: {datetime.date.today().isoformat()}", head, flags=re.M)
    body = yaml.safe_dump({"tools": table["tools"]}, sort_keys=False, width=100)
    path.write_text(head + "\n" + body, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="append", default=[], metavar="TOOL=VERSION",
                        help="pin this release instead of the latest (repeatable)")
    parser.add_argument("--write", action="store_true", help="write the rows into ci_tools.yaml")
    args = parser.parse_args(argv)
    wanted: dict[str, str | None] = dict.fromkeys(TOOLS)
    for item in args.version:
        name, _, version = item.partition("=")
        if name not in TOOLS or not version:
            parser.error(f"--version {item!r}: expected TOOL=VERSION with TOOL one of {', '.join(TOOLS)}")
        wanted[name] = version
    rows = {name: refreshed_row(name, version) for name, version in wanted.items()}
    for name, row in rows.items():
        print(f"{name} {row['version']} {row['sha256']}  ({row['checksums_url']})")
    if args.write:
        write_table(rows)
        print(f"wrote {TABLE}; review the diff, then run tools/regenerate.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
