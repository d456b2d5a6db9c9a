"""Xid events: the NVIDIA driver's error reports in this boot's kernel log, judged by
thresholds.yaml's critical codes.

Where the log comes from, in order:
- /dev/kmsg, the kernel's own buffer, where the check may open it: a privileged container (an
  unprivileged one has no such device: containerd's default device list, containerd
  oci/spec_opts.go WithDefaultUnixDevices, leaves it out), and, where kernel.dmesg_restrict=1,
  CAP_SYSLOG (CAP_SYS_ADMIN is still accepted, with a deprecation warning): torvalds/linux
  kernel/printk/printk.c devkmsg_open -> check_syslog_permissions(SYSLOG_ACTION_READ_ALL).
- Otherwise the node's text logs under its /var/log mounted read-only into the check (the gate
  mounts it at /host/var/log), as Azure's node health checks read Xids (azure_gpu_xid.nhc greps
  the host's syslog): the first of thresholds.yaml's kernelLog files written since this boot,
  with its rotated predecessors written since boot, keeping only this boot's lines.

A node whose kernel log is only in systemd's binary journal (Flatcar, Azure Container Linux: no
rsyslog) is reported as such; this check does not read the journal's format.
"""

from __future__ import annotations

import datetime
import gzip
import os
import re
import stat
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from aksgpu.node.gpu_check import thresholds
from aksgpu.node.gpu_check.results import CheckResult

# "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
XID_LINE = re.compile(r"NVRM: Xid \((?P<pci>PCI:[0-9a-fA-F:.]+)\): (?P<code>\d+),")
# The kernel's first message of every boot, init/main.c start_kernel: pr_notice("%s", linux_banner),
# with init/version.c's linux_banner "Linux version <release> (<builder>) ...". rsyslog writes it
# (after "kernel: " and, from imklog, the kernel's "[    0.000000] " stamp) when it reads the boot's messages.
BOOT_BANNER = re.compile(r"kernel: (?:\[\s*\d+\.\d+\] )?Linux version \S+ \(")
# rsyslog's RSYSLOG_FileFormat (RFC 3339, Ubuntu 24.04's default) and RSYSLOG_TraditionalFileFormat.
RFC3339_STAMP = re.compile(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2}))\s")
TRADITIONAL_STAMP = re.compile(r"([A-Z][a-z]{2}) ([ \d]\d) (\d{2}):(\d{2}):(\d{2})\s")
MONTHS = {name: number for number, name in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), start=1)}
MODES_THAT_NEED_THE_LOG = frozenset({"gate", "recheck"})


@dataclass(frozen=True)
class KernelLog:
    """This boot's kernel messages (only the lines that matter to the check: Xids), or None with
    every place tried and why it gave nothing."""

    text: str | None
    source: str
    tried: tuple[str, ...] = ()

    @classmethod
    def of(cls, text: str, source: str = "given") -> KernelLog:
        return cls(text, source)


def parse_xids(text: str) -> list[tuple[str, int]]:
    """(PCI address, Xid code) of every Xid line in kernel log text."""
    return [(match["pci"], int(match["code"])) for match in XID_LINE.finditer(text)]


def read_kmsg(path: str = "/dev/kmsg", limit_bytes: int = 4 << 20) -> str | None:
    """The kernel's log buffer since boot, or None where it cannot be read."""
    return _read_kmsg(path, limit_bytes)[0]


def _read_kmsg(path: str, limit_bytes: int = 4 << 20) -> tuple[str | None, str]:
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return None, (f"{path}: absent (a container has it only when privileged: containerd's default device "
                      "list leaves it out)")
    except PermissionError:
        return None, (f"{path}: permission denied (with kernel.dmesg_restrict=1 reading it needs CAP_SYSLOG, "
                      "linux kernel/printk/printk.c check_syslog_permissions)")
    except OSError as error:
        return None, f"{path}: {error.strerror or error}"
    chunks: list[bytes] = []
    try:
        while sum(map(len, chunks)) < limit_bytes:
            try:
                record = os.read(descriptor, 8192)
            except BlockingIOError:
                break
            except BrokenPipeError:  # a record was overwritten while reading; keep what was read
                continue
            except OSError as error:
                if not chunks:
                    return None, f"{path}: {error.strerror or error}"
                break
            if not record:
                break
            chunks.append(record)
    finally:
        os.close(descriptor)
    return b"".join(chunks).decode("utf-8", "replace"), ""


def boot_time(proc_stat: Path = Path("/proc/stat")) -> float:
    """When the node booted, Unix time: /proc/stat's btime (the host's: /proc/stat is not namespaced)."""
    for line in proc_stat.read_text(encoding="ascii").splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    raise ValueError(f"no btime line in {proc_stat}")


def line_time(line: str, now: float) -> float | None:
    """A syslog line's time, Unix seconds: RFC 3339 as written; the traditional format (no year,
    no zone) as UTC (thresholds.yaml kernelLog), in the latest year that does not put it in the future."""
    match = RFC3339_STAMP.match(line)
    if match:
        try:
            return datetime.datetime.fromisoformat(match[1].replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    match = TRADITIONAL_STAMP.match(line)
    if not match or match[1] not in MONTHS:
        return None
    this_year = datetime.datetime.fromtimestamp(now, datetime.timezone.utc).year
    for year in (this_year, this_year - 1):
        try:
            stamp = datetime.datetime(year, MONTHS[match[1]], int(match[2]), int(match[3]), int(match[4]),
                                      int(match[5]), tzinfo=datetime.timezone.utc).timestamp()
        except ValueError:  # 29 February of a year without one
            continue
        if stamp <= now + 86400:
            return stamp
    return None


def lines_of_this_boot(lines: Iterable[bytes], booted: float, now: float, slack_seconds: float) -> list[str]:
    """The Xid lines of this boot among a log's lines (oldest first). A line stamped before the boot
    (less the slack) belongs to an earlier boot; a boot banner of this boot drops everything before it,
    and lines whose stamp cannot be read count only after such a banner."""
    kept: list[str] = []
    after_banner = False
    for raw in lines:
        if b"NVRM: Xid" not in raw and b"Linux version" not in raw:
            continue
        line = raw.decode("utf-8", "replace").rstrip("\n")
        stamp = line_time(line, now)
        if stamp is not None and stamp < booted - slack_seconds:
            continue
        if BOOT_BANNER.search(line):
            kept, after_banner = [], True
            continue
        if XID_LINE.search(line) and (stamp is not None or after_banner):
            kept.append(line)
    return kept


def _rotated(path: Path) -> list[Path]:
    """logrotate's older copies of `path` (name.1, name.2.gz, ...), oldest first."""
    numbered = []
    for candidate in path.parent.glob(f"{path.name}.*"):
        suffix = candidate.name[len(path.name) + 1:].removesuffix(".gz")
        if suffix.isdigit():
            numbered.append((int(suffix), candidate))
    return [candidate for _, candidate in sorted(numbered, reverse=True)]


def _written_since(path: Path, since: float) -> bool:
    try:
        return path.stat().st_mtime >= since
    except OSError:
        return False


def _lines(path: Path, limit_bytes: int) -> Iterator[bytes]:
    """The file's lines, at most the last `limit_bytes` of a plain file (the first of a compressed one)."""
    if path.name.endswith(".gz"):
        with gzip.open(path, "rb") as handle:
            read = 0
            for line in handle:
                read += len(line)
                if read > limit_bytes:
                    return
                yield line
        return
    with path.open("rb") as handle:
        size = handle.seek(0, os.SEEK_END)
        handle.seek(max(size - limit_bytes, 0))
        if size > limit_bytes:
            handle.readline()  # a partial line
        yield from handle


def _unreadable(path: Path, error: OSError) -> str:
    if isinstance(error, PermissionError):
        try:
            info = path.stat()
        except OSError:
            return f"{path}: permission denied"
        return (f"{path}: permission denied (owner {info.st_uid}:{info.st_gid}, mode {stat.S_IMODE(info.st_mode):04o}; "
                f"the check needs group {info.st_gid} among its supplementalGroups, or CAP_DAC_READ_SEARCH)")
    return f"{path}: {error.strerror or error}"


def read_host_log(directory: Path, booted: float, now: float,
                  files: thresholds.KernelLogFiles | None = None) -> KernelLog:
    """This boot's Xid lines from the node's text logs under `directory` (its /var/log, mounted)."""
    files = files or thresholds.kernel_log_files()
    if not directory.is_dir():
        return KernelLog(None, str(directory), (f"{directory}: not mounted (the node's /var/log, read-only)",))
    tried: list[str] = []
    for name in files.files:
        current = directory / name
        try:
            written = current.stat().st_mtime
        except FileNotFoundError:
            tried.append(f"{current}: absent")
            continue
        except OSError as error:
            tried.append(_unreadable(current, error))
            continue
        if written < booted - files.boot_slack_seconds:
            tried.append(f"{current}: not written since this boot (last at "
                         f"{datetime.datetime.fromtimestamp(written, datetime.timezone.utc):%Y-%m-%dT%H:%M:%SZ})")
            continue
        paths = [p for p in _rotated(current) if _written_since(p, booted - files.boot_slack_seconds)] + [current]

        def every_line(paths: list[Path] = paths) -> Iterator[bytes]:
            for path in paths:
                yield from _lines(path, files.max_bytes_per_file)

        try:
            kept = lines_of_this_boot(every_line(), booted, now, files.boot_slack_seconds)
        except OSError as error:
            tried.append(_unreadable(Path(error.filename) if error.filename else current, error))
            continue
        except (EOFError, gzip.BadGzipFile) as error:
            tried.append(f"{current}: a rotated copy is damaged ({error})")
            continue
        return KernelLog("".join(line + "\n" for line in kept), ", ".join(str(p) for p in paths), tuple(tried))
    journal = directory / files.journal_dir
    if any(journal.glob("*/*.journal")):
        tried.append(f"{journal}: systemd's binary journal only (a node image without rsyslog: Flatcar, Azure "
                     "Container Linux); this check reads text logs, not the journal's format")
    return KernelLog(None, str(directory), tuple(tried))


def read_kernel_log(kmsg: str = "/dev/kmsg", host_log_dir: Path | None = None, booted: float | None = None,
                    now: float | None = None) -> KernelLog:
    """This boot's kernel log from /dev/kmsg where readable, else from the host's text logs."""
    text, why = _read_kmsg(kmsg)
    if text is not None:
        return KernelLog(text, kmsg)
    if host_log_dir is None:
        return KernelLog(None, kmsg, (why,))
    try:
        booted = boot_time() if booted is None else booted
    except (OSError, ValueError) as error:
        return KernelLog(None, str(host_log_dir), (why, f"/proc/stat: no boot time ({error})"))
    found = read_host_log(host_log_dir, booted, time.time() if now is None else now)
    return KernelLog(found.text, found.source, (why, *found.tried))


def xid_checks(log: KernelLog, critical: frozenset[int], required: bool = False) -> list[CheckResult]:
    """Critical Xids of this boot fail the node; others warn. Without a readable log: a failure where
    the log is required (the gate and its re-checks), else a skip; either names what was tried."""
    if log.text is None:
        tried = "; ".join(log.tried) or log.source
        if required:
            return [CheckResult("xid", "fail", f"no kernel log of this boot is readable, so Xid errors cannot be "
                                f"ruled out: {tried}. Fix: mount the node's /var/log read-only at the check's host "
                                "log folder (--host-log-dir, $AKSGPU_HOST_LOG_DIR) readable by the check, or give it "
                                "/dev/kmsg (a privileged container)", details={"tried": list(log.tried)})]
        return [CheckResult("xid", "skip", f"the kernel log is not readable here: {tried}",
                            details={"tried": list(log.tried)})]
    events = parse_xids(log.text)
    where = {"source": log.source}
    bad = sorted({(pci, code) for pci, code in events if code in critical})
    if bad:
        listed = ", ".join(f"Xid {code} on {pci}" for pci, code in bad)
        return [CheckResult("xid", "fail", f"critical Xid events since boot: {listed} ({log.source})", value=len(bad),
                            details=where | {"events": [{"pci": p, "xid": c} for p, c in events]})]
    if events:
        codes = ", ".join(str(code) for code in sorted({code for _, code in events}))
        return [CheckResult("xid", "warn", f"non-critical Xid events since boot: {codes} ({log.source})",
                            value=len(events), details=where)]
    return [CheckResult("xid", "pass", f"no Xid events since boot ({log.source})", value=0, details=where)]
