"""Refresh the digests of aksgpu/catalog/images.yaml from the registries (needs network; not run in CI).

For each image it asks the registry's v2 API for the tag's manifest (a multi-arch index where the
registry has one: the Accept header lists the OCI index and Docker manifest list first) and reads the
Docker-Content-Digest header; an anonymous bearer token is fetched where the registry's
WWW-Authenticate header asks for one (nvcr.io, registry.k8s.io and mcr.microsoft.com serve public
images so). It rewrites each `digest:` line and prints what changed; review the diff and replace the
entry's `source` with "the registry's v2 API, <date>".

    .venv/bin/python tools/refresh_image_digests.py
"""

from __future__ import annotations

import json
import re
import sys
import urllib.request
from pathlib import Path

TABLE = Path(__file__).resolve().parent.parent / "aksgpu" / "catalog" / "images.yaml"
ACCEPT = ", ".join(["application/vnd.oci.image.index.v1+json",
                    "application/vnd.docker.distribution.manifest.list.v2+json",
                    "application/vnd.oci.image.manifest.v1+json",
                    "application/vnd.docker.distribution.manifest.v2+json"])


def parse_challenge(header: str) -> dict[str, str]:
    """The parameters of a `Bearer realm="...",service="...",scope="..."` WWW-Authenticate header."""
    return dict(re.findall(r'(\w+)="([^"]*)"', header))


def split_image(image: str) -> tuple[str, str]:
    registry, _, repository = image.partition("/")
    return registry, repository


def manifest_digest(image: str, tag: str) -> str:
    registry, repository = split_image(image)
    url = f"https://{registry}/v2/{repository}/manifests/{tag}"
    headers = {"Accept": ACCEPT}
    request = urllib.request.Request(url, method="HEAD", headers=headers)
    try:
        response = urllib.request.urlopen(request, timeout=30)  # noqa: S310 - https only
    except urllib.error.HTTPError as error:
        if error.code != 401:
            raise
        challenge = parse_challenge(error.headers.get("WWW-Authenticate", ""))
        query = "&".join(f"{key}={challenge[key]}" for key in ("service", "scope") if key in challenge)
        with urllib.request.urlopen(f"{challenge['realm']}?{query}", timeout=30) as token_response:  # noqa: S310
            token = json.load(token_response).get("token")
        request = urllib.request.Request(url, method="HEAD", headers={**headers, "Authorization": f"Bearer {token}"})
        response = urllib.request.urlopen(request, timeout=30)  # noqa: S310
    digest = response.headers.get("Docker-Content-Digest", "")
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise ValueError(f"{image}:{tag}: the registry sent no digest ({digest!r})")
    return digest


def rewrite(text: str, component: str, digest: str) -> str:
    """The table's text with `component`'s digest line replaced (comments and order kept)."""
    pattern = re.compile(rf"(\n  {re.escape(component)}:\n(?:    .*\n)*?    digest: )(\S+)")
    if not pattern.search(text):
        raise ValueError(f"images.yaml has no digest line for {component}")
    return pattern.sub(lambda match: match.group(1) + digest, text, count=1)


def main() -> int:
    import yaml

    text = TABLE.read_text(encoding="utf-8")
    for component, entry in yaml.safe_load(text)["images"].items():
        digest = manifest_digest(entry["image"], str(entry["tag"]))
        if digest != entry.get("digest"):
            print(f"{component}: {entry.get('digest')} -> {digest}")
            text = rewrite(text, component, digest)
    TABLE.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
