"""Fetch real code, pinned: source archives from the package index, laid out as repos.

A package list (TOML, ``[[package]]`` tables: ``name``, ``version``, ``filename``,
``sha256``, ``license``; optional ``test_requires``, and ``test_command``/``test_paths`` when
the generator cannot find how the tests run by itself: ``tasks/suite_layout.py``) names each
source archive exactly. A ``name`` must be a project
name (PEP 508: no separator, no ``..``), and each repo (and env) folder is proved to resolve
directly inside ``out`` (``envs``) before it is replaced, so a list or a planted link never
makes fetch remove or write anything outside them. ``fetch_packages``:

1. finds the archive in the index's simple API (PEP 691 JSON, or the HTML page of a mirror
   that serves only that) under ``{index_url}/{name}/``;
2. looks for it in the cache folder first, as ``CACHE/<sha256>/<filename>`` (where fetch
   downloads to) or laid flat as ``CACHE/<filename>`` (archives copied in by hand, e.g. for a
   machine without the index); a file there with the pinned hash is used without the network
   (so a second fetch works offline), one with another hash is never used;
3. refuses a file whose sha256 differs from the pinned one (it is deleted, never
   extracted) and says so; an index it cannot reach is a ``FetchError`` that says the
   machine may be offline;
4. extracts it with the env server's hostile-tarball rules (``tasks.checkout``), takes the
   single top folder as the root, flattens a ``src/`` layout (``src/pkg`` becomes ``pkg``,
   so a repo's tests import the code in the tree without an install) and drops
   ``*.egg-info``;
5. builds the repo's Python environment (``tasks/envs.py``: pytest, its runtime
   requirements, the list's ``test_requires``), when asked to;
6. records what it laid out in ``fetched.json`` beside the repos: name, version, archive,
   sha256, license, the license files found, whether ``src/`` was flattened, its env, and the
   list's ``test_command``/``test_paths`` (``tasks curriculum`` reads them from there).

Shipped lists are the ``packages*.toml`` files in ``cheetah/data`` (``shipped_lists``):
``packages.toml``, the default, and ``packages-generality.toml``, the held-out-style list of
the generality benchmark (``bench/generality.py``).

The bundled list (``cheetah/data/packages.toml``) holds permissively licensed, pure-Python
packages whose source archives carry their test suites; pip and the packages pip vendors
are left out. Its entries were written from PyPI's JSON API (the latest source archive of
each project on the day the list says) and kept only where the repo's own suite passes.

Deliberately left out: wheels (no tests inside), zip source archives (PEP 625 makes
``.tar.gz`` the one sdist format) and resolving versions of the archives (a list pins
exact files; an env's requirements are resolved by pip when it is built).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tomllib
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from cheetah import bundled
from cheetah.sandbox.snapshot import SnapshotError
from cheetah.tasks.checkout import materialize
from cheetah.tasks.envs import EnvBuildError, build_env, env_requirements
from cheetah.tasks.fetched import normalize
from cheetah.tasks.schema import Snapshot

DEFAULT_INDEX = "https://pypi.org/simple"
TIMEOUT_S = 60.0
MAX_ARCHIVE_BYTES = 64 * 1024 * 1024
_LICENSE_FILE = re.compile(r"^(LICEN[CS]E|COPYING|NOTICE)", re.IGNORECASE)
_HREF = re.compile(r'href="([^"]+)"')
# A project name (PEP 508): no separator, no "..", so its repo folder is one name under --out.
_PROJECT_NAME = re.compile(r"[A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9]", re.IGNORECASE)


class FetchError(RuntimeError):
    """A package could not be fetched: the message names the package and why."""


class PinnedPackage(BaseModel):
    """One source archive, exactly: ``filename`` in the index's ``name`` page, ``sha256``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, description="the project's name in the index")
    version: str = Field(min_length=1)
    filename: str = Field(description="the source archive (.tar.gz) in the index")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    license: str = Field(min_length=1, description="SPDX expression or the index's words")
    test_requires: list[str] = Field(
        default_factory=list,
        description="what the repo's tests need beyond pytest and its own Requires-Dist",
    )
    test_command: str | None = Field(
        None, description="a pytest command for its tests, when detection does not find one"
    )
    test_paths: list[str] = Field(
        default_factory=list, description="test files or folders given to pytest"
    )

    @field_validator("name")
    @classmethod
    def _project_name(cls, v: str) -> str:
        if not _PROJECT_NAME.fullmatch(v):
            raise ValueError(
                f"{v!r} is not a project name (letters, digits and '.', '_', '-' inside; no path)"
            )
        return v

    @field_validator("filename")
    @classmethod
    def _tar_gz(cls, v: str) -> str:
        if not v.endswith(".tar.gz") or "/" in v:
            raise ValueError(f"{v!r} is not a .tar.gz file name")
        return v

    @property
    def repo_name(self) -> str:
        """The folder the repo is laid out in (the normalized project name)."""
        return normalize(self.name)


class PackageList(BaseModel):
    model_config = ConfigDict(extra="forbid")

    package: list[PinnedPackage] = Field(min_length=1)


@dataclass
class FetchedRepo:
    """What ``fetched.json`` records for one repo."""

    name: str
    version: str
    path: str
    archive: str
    sha256: str
    license: str
    license_files: list[str]
    src_flattened: bool
    env: str | None = None  # its Python environment (tasks/envs.py), when one was built
    test_command: str | None = None  # the list's, for tasks curriculum (tasks/suite_layout.py)
    test_paths: list[str] = field(default_factory=list)


def load_package_list(path: Path) -> list[PinnedPackage]:
    """The list at ``path``; a ``FetchError`` naming the file and the field if it is wrong."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise FetchError(f"cannot read the package list {path}: {e}") from None
    try:
        packages = PackageList.model_validate(data).package
    except ValidationError as e:
        where = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors()
        )
        raise FetchError(f"package list {path}: {where}") from None
    seen: set[str] = set()
    for p in packages:
        if p.repo_name in seen:
            raise FetchError(f"package list {path}: {p.name} is listed twice")
        seen.add(p.repo_name)
    return packages


def shipped_lists() -> list[Path]:
    """The package lists that ship in ``cheetah/data`` (``packages*.toml``), the default first."""
    return sorted(bundled.DATA.glob("packages*.toml"), key=lambda p: (p.name != "packages.toml", p))


def select(
    packages: list[PinnedPackage], names: list[str], *, from_shipped: bool
) -> tuple[list[PinnedPackage], dict[str, list[Path]]]:
    """The packages called ``names`` (project or repo names) in ``packages``; a name that is
    not there is taken from the first shipped list that holds it when ``from_shipped``. Also
    returns the names still not found, each with the shipped lists that hold it (maybe none)."""
    wanted = {normalize(n): n for n in names}
    chosen = [p for p in packages if p.repo_name in wanted]
    missing = set(wanted) - {p.repo_name for p in chosen}
    holding: dict[str, list[Path]] = {wanted[m]: [] for m in missing}
    for path in shipped_lists() if missing else []:
        for p in load_package_list(path):
            if p.repo_name not in missing:
                continue
            if from_shipped and not holding[wanted[p.repo_name]]:
                chosen.append(p)
            holding[wanted[p.repo_name]].append(path)
    if from_shipped:
        holding = {n: paths for n, paths in holding.items() if not paths}
    return chosen, holding


def _open(url: str, accept: str | None = None):
    req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        return urllib.request.urlopen(req, timeout=TIMEOUT_S)
    except urllib.error.HTTPError as e:
        raise FetchError(f"{url}: the index answered {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise FetchError(
            f"cannot reach the package index at {url} ({reason}); this machine may be "
            "offline: fetch where the index is reachable, or pass --cache with the archives"
        ) from None


def index_files(index_url: str, name: str) -> dict[str, tuple[str, str | None]]:
    """``filename -> (absolute url, sha256 or None)`` from the index's page for ``name``."""
    page = f"{index_url.rstrip('/')}/{name}/"
    with _open(page, "application/vnd.pypi.simple.v1+json, text/html;q=0.1") as resp:
        kind = resp.headers.get("Content-Type", "")
        body = resp.read()
    out: dict[str, tuple[str, str | None]] = {}
    if "json" in kind:
        for f in json.loads(body).get("files", []):
            url = urllib.parse.urljoin(page, f["url"])
            out[f["filename"]] = (url, f.get("hashes", {}).get("sha256"))
        return out
    for href in _HREF.findall(body.decode("utf-8", "replace")):
        url, _, frag = urllib.parse.urljoin(page, href).partition("#")
        filename = urllib.parse.unquote(url.rsplit("/", 1)[-1])
        out[filename] = (url, frag.removeprefix("sha256=") if frag.startswith("sha256=") else None)
    return out


def _sha256(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def cache_places(pkg: PinnedPackage, cache: Path) -> list[Path]:
    """Where ``download`` looks for the archive before the network, in order."""
    return [cache / pkg.sha256 / pkg.filename, cache / pkg.filename]


def download(pkg: PinnedPackage, cache: Path, index_url: str = DEFAULT_INDEX) -> Path:
    """The archive in ``cache`` (downloaded unless a file with the pinned hash is in one of
    ``cache_places``)."""
    dest = cache / pkg.sha256 / pkg.filename
    wrong = []
    for place in cache_places(pkg, cache):
        if place.is_file():
            if _sha256(place) == pkg.sha256:
                return place
            wrong.append(str(place))
    try:
        files = index_files(index_url, pkg.name)
    except FetchError as e:
        looked = " or ".join(str(p) for p in cache_places(pkg, cache))
        bad = f" ({', '.join(wrong)}: another sha256, not used)" if wrong else ""
        raise FetchError(f"{pkg.filename}: not in the cache ({looked}){bad}; {e}") from None
    if pkg.filename not in files:
        raise FetchError(f"{pkg.name}: the index has no file {pkg.filename}")
    url, listed = files[pkg.filename]
    if listed and listed != pkg.sha256:
        raise FetchError(
            f"{pkg.filename}: the index lists sha256 {listed}, the pinned one is {pkg.sha256}; "
            "not downloaded"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    with _open(url) as resp, part.open("wb") as out:
        size = 0
        while block := resp.read(1 << 20):
            size += len(block)
            if size > MAX_ARCHIVE_BYTES:
                part.unlink()
                raise FetchError(f"{pkg.filename}: larger than {MAX_ARCHIVE_BYTES} bytes")
            out.write(block)
    got = _sha256(part)
    if got != pkg.sha256:
        part.unlink()
        raise FetchError(
            f"{pkg.filename}: sha256 {got} does not match the pinned {pkg.sha256}; "
            "the file is deleted, nothing is extracted"
        )
    os.replace(part, dest)
    return dest


def flatten_src(root: Path) -> bool:
    """Move ``src/*`` up to ``root`` (a src layout); False if there is no ``src/`` folder
    holding Python code. A name in both places is an error (the layout is ambiguous)."""
    src = root / "src"
    if not src.is_dir() or not any(
        (c.is_dir() and (c / "__init__.py").is_file()) or c.suffix == ".py" for c in src.iterdir()
    ):
        return False
    clash = [c.name for c in src.iterdir() if (root / c.name).exists()]
    if clash:
        raise FetchError(f"{root.name}: src/ and the root both hold {', '.join(sorted(clash))}")
    for child in list(src.iterdir()):
        child.rename(root / child.name)
    src.rmdir()
    return True


def lay_out(pkg: PinnedPackage, archive: Path, dest: Path) -> FetchedRepo:
    """Extract ``archive`` as the repo ``dest`` (replaced if it exists)."""
    if dest.exists():
        shutil.rmtree(dest)
    try:
        materialize(Snapshot(tar=str(archive)), dest)
    except SnapshotError as e:
        shutil.rmtree(dest, ignore_errors=True)
        raise FetchError(f"{pkg.filename}: {e}") from None
    for junk in [*dest.glob("*.egg-info"), *dest.glob("src/*.egg-info")]:
        shutil.rmtree(junk)
    flattened = flatten_src(dest)
    return FetchedRepo(
        name=pkg.repo_name,
        version=pkg.version,
        path=str(dest),
        archive=pkg.filename,
        sha256=pkg.sha256,
        license=pkg.license,
        license_files=sorted(p.name for p in dest.iterdir() if _LICENSE_FILE.match(p.name)),
        src_flattened=flattened,
        test_command=pkg.test_command,
        test_paths=list(pkg.test_paths),
    )


def inside(root: Path, name: str) -> Path:
    """``root / name``, proved (resolved, links followed) to be a folder directly in ``root``,
    else a ``FetchError``: a repo or env folder is removed and rewritten, so it must never be
    a path or a link that leads out of ``--out`` / ``--envs``."""
    dest = root / name
    if dest.resolve() != root.resolve() / name:
        raise FetchError(f"{name}: {dest} is not a folder inside {root}; nothing is removed")
    return dest


def fetch_packages(
    packages: list[PinnedPackage],
    out: Path,
    cache: Path,
    index_url: str = DEFAULT_INDEX,
    on_done: Callable[[PinnedPackage, FetchedRepo | None, str | None], None] | None = None,
    envs: Path | None = None,
) -> tuple[list[FetchedRepo], dict[str, str]]:
    """Fetch and lay out every package under ``out`` (and build its Python environment under
    ``envs``, when given); returns the repos and, by name, the packages that failed and why
    (the others are still laid out). Writes ``out/fetched.json`` (the repos of this call and
    earlier ones still on disk)."""
    out.mkdir(parents=True, exist_ok=True)
    manifest_path = out / "fetched.json"
    manifest: dict[str, dict] = {}
    if manifest_path.is_file():
        try:
            manifest = {r["name"]: r for r in json.loads(manifest_path.read_text())}
        except (ValueError, KeyError, TypeError):
            manifest = {}  # rewritten below from what this call lays out
    repos, failed = [], {}
    for pkg in packages:
        try:
            dest = inside(out, pkg.repo_name)
            repo = lay_out(pkg, download(pkg, cache, index_url), dest)
            if envs is not None:
                reqs = env_requirements(Path(repo.path), pkg.test_requires)
                pip_index = None if index_url == DEFAULT_INDEX else index_url  # else pip.conf's
                repo.env = str(build_env(inside(envs, pkg.repo_name), reqs, pip_index))
        except (FetchError, EnvBuildError) as e:
            failed[pkg.name] = str(e)
            if on_done:
                on_done(pkg, None, str(e))
            continue
        repos.append(repo)
        manifest[repo.name] = asdict(repo)
        if on_done:
            on_done(pkg, repo, None)
    kept = [r for name, r in sorted(manifest.items()) if (out / name).is_dir()]
    tmp = manifest_path.with_suffix(".json.part")
    tmp.write_text(json.dumps(kept, indent=1) + "\n")
    os.replace(tmp, manifest_path)
    return repos, failed
