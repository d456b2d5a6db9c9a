"""Writing files a person keeps (stack files, environments.yaml, CI files, backups) safely.

Every write goes to a temporary file in the same folder, is flushed to disk, and is renamed
over the target in one step: Ctrl-C, a full disk or a crash leaves either the old file or the
new one, never a half-written or empty file. A failure is a UserError that names the file.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from aksgpu.errors import UserError

_NEW_FILE_MODE = 0o666


@contextlib.contextmanager
def locked_for_writing(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on `folder` (the project's) while a writer reads, changes and writes
    the files in it: two `aksgpu init` at once then each add their environment, one after the
    other, where without it the second's write would drop the first's. POSIX flock on the folder
    itself, so no lock file is left behind (advisory; released when the process ends, even killed);
    where fcntl is missing (Windows) there is no lock."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    try:
        handle = os.open(folder, os.O_RDONLY)
    except OSError as error:
        raise UserError(f"cannot open {folder} to lock it: {error.strerror}. "
                        "Fix: check that the folder exists and is readable.") from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)  # closing releases the lock


def refuse_symlink_loop(path: Path) -> None:
    """A UserError naming `path` when it is a symbolic link that leads nowhere (to itself, in a loop,
    or to a missing file), rather than the internal error Path.resolve raises on a loop."""
    if not path.is_symlink():
        return
    try:
        path.resolve(strict=True)
    except (OSError, RuntimeError):
        target = os.readlink(path)
        raise UserError(f"{path} is a symbolic link to {target}, which leads in a loop or to nothing. "
                        "Fix: remove the link, or point it at a real file.") from None


def write_text_atomically(path: Path, text: str, mode: int | None = None) -> None:
    """Replace (or create) `path` with `text`, UTF-8, all or nothing.

    `mode`: the file's permissions (default: an existing file's, else 0666 less the umask). A
    symbolic link is followed (the file it points to is replaced, the link stays). What is not a
    regular file (/dev/null, a pipe, /dev/stdout) is written to as it is: renaming over it would
    replace the device itself.
    """
    temporary: str | None = None
    refuse_symlink_loop(path)
    try:
        path = path.resolve() if path.is_symlink() else path
        if path.exists() and not path.is_file():
            if path.is_dir():
                raise IsADirectoryError(21, "it is a folder", str(path))
            with path.open("w", encoding="utf-8", newline="") as stream:
                stream.write(text)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        if mode is None:
            mode = path.stat().st_mode & 0o7777 if path.exists() else _NEW_FILE_MODE & ~_current_umask()
        # mkstemp creates the file with mode 0600, so a secret is never readable by others, even briefly.
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
        temporary = None
    except (OSError, UnicodeEncodeError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise UserError(f"cannot write {path}: {reason}. The file is as it was. "
                        "Fix: check that the folder exists, is writable and has free space.") from None
    finally:
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)


def read_text_if_exists(path: Path) -> str | None:
    """The UTF-8 text of `path`, or None when there is no such file; problems are UserErrors."""
    refuse_symlink_loop(path)
    if not path.is_file():
        return None
    try:
        return path.read_bytes().decode("utf-8")
    except OSError as error:
        raise UserError(f"cannot read {path}: {error.strerror}. Fix: check its permissions.") from None
    except UnicodeDecodeError as error:
        raise UserError(f"{path} is not UTF-8 text (byte {error.start}). Fix: save it as UTF-8, or move it away "
                        "so aksgpu can write it afresh.") from None


def _current_umask() -> int:
    # os.umask can only be read by setting it; set it back at once.
    mask = os.umask(0)
    os.umask(mask)
    return mask
