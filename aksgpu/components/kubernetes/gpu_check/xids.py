"""Xid events: the NVIDIA driver's error reports in the kernel log, read where the check may read
it (/dev/kmsg in a privileged container), and judged by thresholds.yaml's critical codes."""

from __future__ import annotations

import os
import re

from aksgpu.components.kubernetes.gpu_check.results import CheckResult

# "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
XID_LINE = re.compile(r"NVRM: Xid \((?P<pci>PCI:[0-9a-fA-F:.]+)\): (?P<code>\d+),")


def parse_xids(text: str) -> list[tuple[str, int]]:
    """(PCI address, Xid code) of every Xid line in kernel log text."""
    return [(match["pci"], int(match["code"])) for match in XID_LINE.finditer(text)]


def read_kmsg(path: str = "/dev/kmsg", limit_bytes: int = 4 << 20) -> str | None:
    """The kernel's log buffer since boot, or None where it cannot be read (not privileged)."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    chunks: list[bytes] = []
    try:
        while sum(map(len, chunks)) < limit_bytes:
            try:
                record = os.read(descriptor, 8192)
            except BlockingIOError:
                break
            except OSError:  # EPIPE: a record was overwritten while reading; keep what was read
                continue
            if not record:
                break
            chunks.append(record)
    finally:
        os.close(descriptor)
    return b"".join(chunks).decode("utf-8", "replace")


def xid_checks(log: str | None, critical: frozenset[int]) -> list[CheckResult]:
    if log is None:
        return [CheckResult("xid", "skip", "the kernel log is not readable here (run privileged to read /dev/kmsg)")]
    events = parse_xids(log)
    bad = sorted({(pci, code) for pci, code in events if code in critical})
    if bad:
        listed = ", ".join(f"Xid {code} on {pci}" for pci, code in bad)
        return [CheckResult("xid", "fail", f"critical Xid events since boot: {listed}", value=len(bad),
                            details={"events": [{"pci": p, "xid": c} for p, c in events]})]
    if events:
        codes = ", ".join(str(code) for code in sorted({code for _, code in events}))
        return [CheckResult("xid", "warn", f"non-critical Xid events since boot: {codes}", value=len(events))]
    return [CheckResult("xid", "pass", "no Xid events since boot", value=0)]
