"""Files aksgpu writes from templates (stack files, CI workflows): stamped with a digest of their
own text, so a later run can tell a file it wrote and nobody touched (replace it freely) from one
edited by hand (refuse, unless forced, and then keep a backup)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import Path

from aksgpu.errors import UserError
from aksgpu.project.files import read_text_if_exists, write_text_atomically

STAMP_PREFIX = "aksgpu-render: text sha256="
_STAMP_LINE = re.compile(r"^(?P<lead>\s*#\s*)aksgpu-render: text sha256=(?P<digest>[0-9a-f]{64})?$", re.MULTILINE)


def stamp_placeholder(comment: str = "#") -> str:
    """The line a template puts where the digest goes; `stamp` fills it in."""
    return f"{comment} {STAMP_PREFIX}"


def _blanked(text: str) -> str:
    return _STAMP_LINE.sub(lambda m: m.group("lead") + STAMP_PREFIX, text, count=1)


def stamp(text: str, owned: Callable[[str], str] | None = None) -> str:
    """`text` with its stamp line carrying the digest of the text (taken with the stamp blanked).

    `owned` picks the part of the text aksgpu answers for (in a stack file, not the keys Pulumi
    adds); the digest covers that part only.
    """
    blanked = _blanked(text)
    digest = hashlib.sha256((owned(blanked) if owned else blanked).encode()).hexdigest()
    stamped, count = _STAMP_LINE.subn(lambda m: m.group("lead") + STAMP_PREFIX + digest, text, count=1)
    if count != 1:
        raise ValueError("the template has no stamp line")  # a programming error, not user input
    return stamped


def stamp_state(text: str, owned: Callable[[str], str] | None = None) -> str:
    """'intact' (stamped and unchanged since), 'edited' (stamped, then changed) or 'unstamped'."""
    match = _STAMP_LINE.search(text)
    if match is None or match.group("digest") is None:
        return "unstamped"
    return "intact" if stamp(text, owned) == text else "edited"


def free_backup_path(path: Path) -> Path:
    """`<name>.bak`, or `<name>.bak<N>` when that exists: a backup never replaces another."""
    candidate = path.with_name(path.name + ".bak")
    number = 1
    while candidate.exists():
        candidate = path.with_name(f"{path.name}.bak{number}")
        number += 1
    return candidate


def write_generated(path: Path, text: str, *, force: bool, fix: str) -> tuple[str, Path | None]:
    """Write a generated file: ('created' | 'updated' | 'unchanged' | 'overwritten', backup path).

    A file that exists and is not an intact aksgpu file is refused unless `force`; forced, it is
    kept as a backup first. `fix` says how the user moves their change to where it belongs.
    """
    existing = read_text_if_exists(path)
    if existing == text:
        return "unchanged", None
    backup = None
    if existing is not None and stamp_state(existing) != "intact":
        if not force:
            how = "was edited by hand" if stamp_state(existing) == "edited" else "was not written by aksgpu"
            raise UserError(f"{path} {how}; aksgpu will not overwrite it. Fix: {fix}, or pass --force "
                            "(the file is kept as a backup beside it).")
        backup = free_backup_path(path)
        write_text_atomically(backup, existing)
    write_text_atomically(path, text)
    if existing is None:
        return "created", None
    return ("overwritten" if backup else "updated"), backup
