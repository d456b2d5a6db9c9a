"""Where a project made by `aksgpu new` installs aksgpu from: the `--aksgpu-source` option.

aksgpu is not on PyPI, and `aksgpu[policy]==X` in requirements.txt would install whatever
someone registers under that name there, into deploy jobs that hold Azure credentials
(dependency confusion). So the generated requirements.txt names a source that exists and cannot
change under the pin:
- a local wheel file: copied into the project's vendor/ folder and installed by that relative
  path (pip resolves it against its working folder: the project folder, where CI and Pulumi run
  it). The wheel is committed with the project, so git pins its content; its sha256 is written
  beside it for review. (pip's `--hash` would switch on hash-checking for every dependency too,
  and a `#sha256=` fragment needs an absolute file: URL, which does not exist on a CI runner.)
- a https URL of a wheel with its `#sha256=` fragment: pip checks the download against it, and
  a fragment does not switch on hash-checking mode for the dependencies;
- a git URL at a full commit hash (`git+https://HOST/PATH@<40 hex>`); a branch or tag can move;
- a private index: `index+https://HOST/.../simple/`, pinned by the running aksgpu's version with
  `--index-url` (the index replaces PyPI for every package, so it must serve or proxy the
  dependencies). Without hashes this trusts that index not to serve a different file.
pip: https://pip.pypa.io/en/stable/topics/secure-installs/ (hash-checking mode: "all
requirements and all their dependencies" need hashes once one `--hash` is given; URL fragment
hashes), https://pip.pypa.io/en/stable/topics/vcs-support/ (git URLs at a commit),
https://pip.pypa.io/en/stable/reference/requirements-file-format/ (paths, --index-url); checked
2026-11-27.

By default the source is where the running aksgpu was installed from, as pip recorded it
(PEP 610, direct_url.json): a wheel file or URL, or a git URL at a commit.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from aksgpu.errors import MISSING, Problem, UserError

OPTION = "--aksgpu-source"
VENDOR = "vendor"  # the project folder a local wheel is copied into
REQUIREMENT = "aksgpu[policy]"
_COMMIT = re.compile(r"[0-9a-f]{40}")
_SHA256 = re.compile(r"sha256=([0-9a-f]{64})")
FORMS = ("a wheel file (PATH/aksgpu-X-py3-none-any.whl), a https wheel URL ending in #sha256=<64 hex>, "
         "git+https://HOST/PATH@<40-hex commit>, or index+https://HOST/.../simple/")


@dataclass(frozen=True)
class InstallSource:
    """What requirements.txt says about aksgpu, and the wheel to copy into the project, if any."""

    kind: str  # wheel-file | wheel-url | git | index
    lines: tuple[str, ...]  # requirements.txt lines, comments included
    wheel: Path | None = None  # a local wheel to copy into VENDOR


def _bad(value: str, rule: str, fix: str) -> UserError:
    return UserError(problems=[Problem(OPTION, value, rule, fix)], source="the command line")


def parse_source(value: str, version: str, cwd: Path | None = None) -> InstallSource:
    """The requirements.txt lines for `--aksgpu-source VALUE`; `version` is the running aksgpu's."""
    text = value.strip()
    if text.startswith("index+"):
        return _index(value, text.removeprefix("index+"), version)
    if text.startswith("git+"):
        return _git(value, text)
    if text.startswith(("https://", "http://")):
        return _wheel_url(value, text)
    if re.match(r"^[a-z][a-z0-9+.-]*://", text):
        raise _bad(value, f"the source must be one of: {FORMS}", "name one of those forms")
    return _wheel_file(value, Path(text).expanduser() if cwd is None else cwd / Path(text).expanduser())


def _index(value: str, url: str, version: str) -> InstallSource:
    if not url.startswith("https://") or not urlsplit(url).netloc:
        raise _bad(value, "an index source is index+ followed by the https URL of a package index (PEP 503 simple "
                   "API)", "write index+https://HOST/.../simple/")
    if "+" in version or "dev" in version:
        raise _bad(value, f"this aksgpu is version {version}, a development build no index publishes",
                   "install a released aksgpu from that index and run `aksgpu new` with it, or name the wheel")
    return InstallSource("index", (
        "# aksgpu from this private index, by version. --index-url (not --extra-index-url) makes it the only",
        "# index for every package, so no public package of the same name can be chosen instead; it must serve",
        "# (or proxy) aksgpu's dependencies too. A version pin trusts the index not to replace the file:",
        "# pin the wheel by URL and #sha256= instead where it can.",
        f"--index-url {url}",
        f"{REQUIREMENT}=={version}"))


def _git(value: str, text: str) -> InstallSource:
    url, _, ref = text.removeprefix("git+").rpartition("@")
    if not text.startswith("git+https://") or not url or "://" not in url or not _COMMIT.fullmatch(ref):
        raise _bad(value, "a git source is git+https://HOST/PATH@COMMIT with the full 40-hex commit hash (a branch "
                   "or tag can move to other code)", "take the commit with `git rev-parse HEAD` in the clone "
                   "and write git+https://HOST/PATH@<that hash>")
    return InstallSource("git", (
        "# aksgpu from its git repository at one commit (a commit cannot change; a branch or tag could).",
        f"{REQUIREMENT} @ {text}"))


def _wheel_url(value: str, text: str) -> InstallSource:
    parts = urlsplit(text)
    found = _SHA256.fullmatch(parts.fragment)
    if parts.scheme != "https" or not parts.netloc or not parts.path.endswith(".whl") or found is None:
        raise _bad(value, "a wheel URL is https, ends in .whl and carries the wheel's hash as #sha256=<64 hex> "
                   "(pip checks the download against it)", "append #sha256=$(sha256sum WHEEL | cut -c1-64) to "
                   "the https URL of the wheel, or name the wheel file")
    return InstallSource("wheel-url", (
        "# aksgpu's wheel; pip checks the download against the sha256 after #.",
        f"{REQUIREMENT} @ {text}"))


def _wheel_file(value: str, path: Path) -> InstallSource:
    if path.suffix != ".whl" or not path.name.startswith("aksgpu-") or not path.is_file():
        rule = "is not a file" if path.suffix == ".whl" and not path.is_file() else f"must be one of: {FORMS}"
        raise _bad(value, f"the source {rule}", "build the wheel in aksgpu's clone (`pip wheel --no-deps -w dist .`) "
                   "and name the file, or name one of the other forms")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return InstallSource("wheel-file", (
        f"# aksgpu's wheel, committed in {VENDOR}/ (sha256 {digest}). pip resolves the path against the",
        "# folder it runs in: run it in this folder, as CI and Pulumi do.",
        f"./{VENDOR}/{path.name}[policy]"), wheel=path)


def installed_source() -> str | None:
    """Where pip installed the running aksgpu from, as a --aksgpu-source value; None when that is
    no usable source (an editable checkout, an index, or unknown)."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        recorded = distribution("aksgpu").read_text("direct_url.json")
    except PackageNotFoundError:
        return None
    if not recorded:
        return None
    try:
        direct = json.loads(recorded)
    except ValueError:
        return None
    url = str(direct.get("url", ""))
    vcs = direct.get("vcs_info") or {}
    if vcs.get("vcs") == "git" and vcs.get("commit_id"):
        return f"git+{url}@{vcs['commit_id']}"
    archive = direct.get("archive_info")
    if archive is None or not url.endswith(".whl"):
        return None
    if url.startswith("file://"):
        return unquote(urlsplit(url).path)
    hashes = archive.get("hashes") or {}
    if "sha256" in hashes:
        return f"{url}#sha256={hashes['sha256']}"
    return None


def resolve_source(value: str | None, version: str) -> InstallSource:
    """`value`, or by default where this aksgpu was installed from."""
    if value is not None:
        return parse_source(value, version)
    found = installed_source()
    if found is None:
        raise UserError(problems=[Problem(
            OPTION, MISSING, "the new project's requirements.txt must name where aksgpu comes from (aksgpu is not on "
            "PyPI), and this aksgpu was not installed from a wheel or a git commit to use by default",
            f"pass {OPTION} with {FORMS}")], source="the command line")
    try:
        return parse_source(found, version)
    except UserError as error:  # the wheel it was installed from is gone, say
        raise UserError(f"{error} (the default {OPTION}: where this aksgpu was installed from)",
                        problems=error.problems, source=error.source) from None


def vendor_wheel(source: InstallSource, project: Path) -> Path | None:
    """Copy a local wheel into the project's vendor/ folder; its path relative to `project`."""
    if source.wheel is None:
        return None
    (project / VENDOR).mkdir(exist_ok=True)
    shutil.copyfile(source.wheel, project / VENDOR / source.wheel.name)
    return Path(VENDOR) / source.wheel.name
