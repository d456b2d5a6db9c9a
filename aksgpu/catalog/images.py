"""The digest table of the images aksgpu declares itself (images.yaml), typed."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


@dataclass(frozen=True)
class PinnedImage:
    """One image of the table: its repository, the tag the digest belongs to, and the digest with
    its source, or None with the reason there is none."""

    component: str
    image: str
    tag: str
    digest: str | None
    source: str | None
    reason: str | None

    def reference(self, tag: str | None = None) -> str:
        """image:tag@digest for the table's tag; image:tag alone for another tag or with no digest."""
        tag = tag or self.tag
        if self.digest and tag == self.tag:
            return f"{self.image}:{tag}@{self.digest}"
        return f"{self.image}:{tag}"


def pinned_images_of(table: dict[str, Any]) -> dict[str, PinnedImage]:
    found = {}
    for component, entry in table["images"].items():
        digest = entry.get("digest")
        if digest is not None and not DIGEST.fullmatch(digest):
            raise ValueError(f"images.yaml {component}: digest {digest!r} is not sha256:<64 hex digits>")
        if digest is None and not entry.get("reason"):
            raise ValueError(f"images.yaml {component}: no digest and no reason")
        if digest is not None and not entry.get("source"):
            raise ValueError(f"images.yaml {component}: a digest needs its source")
        found[component] = PinnedImage(component, entry["image"], str(entry["tag"]), digest,
                                       entry.get("source"), entry.get("reason"))
    return found
