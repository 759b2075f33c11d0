"""``tasks.fetch``: pinned source archives from an index (a local one here), laid out as repos."""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cheetah import bundled
from cheetah.tasks.fetch import (
    FetchError,
    PinnedPackage,
    fetch_packages,
    load_package_list,
)

PKG_INFO = "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\nRequires-Dist: six\n"


def sdist(files: dict[str, str], top: str = "tinypkg-1.0") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for rel, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


SRC_LAYOUT = {
    "PKG-INFO": PKG_INFO,
    "LICENSE": "MIT License\n",
    "pyproject.toml": "[project]\nname = 'tinypkg'\n",
    "src/tinypkg/__init__.py": "def double(x):\n    return 2 * x\n",
    "src/tinypkg.egg-info/PKG-INFO": PKG_INFO,
    "tests/test_double.py": "from tinypkg import double\n\n\ndef test_double():\n"
    "    assert double(2) == 4\n",
}


class Index:
    """A simple-API index on 127.0.0.1 serving ``files`` (name -> bytes) for one project,
    as PEP 691 JSON (``listed`` overrides the sha256 it lists)."""

    def __init__(self, files: dict[str, bytes], listed: dict[str, str] | None = None) -> None:
        self.files, self.listed, self.hits = files, listed or {}, []
        index = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # the http.server hook
                index.hits.append(self.path)
                if self.path == "/simple/tinypkg/":
                    body = json.dumps(
                        {
                            "files": [
                                {
                                    "filename": n,
                                    "url": f"../../files/{n}",
                                    "hashes": {
                                        "sha256": index.listed.get(n, hashlib.sha256(d).hexdigest())
                                    },
                                }
                                for n, d in index.files.items()
                            ]
                        }
                    ).encode()
                    kind = "application/vnd.pypi.simple.v1+json"
                elif self.path.startswith("/files/") and self.path[7:] in index.files:
                    body, kind = index.files[self.path[7:]], "application/octet-stream"
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def pin(data: bytes, **over) -> PinnedPackage:
    fields = {
        "name": "tinypkg",
        "version": "1.0",
        "filename": "tinypkg-1.0.tar.gz",
        "sha256": hashlib.sha256(data).hexdigest(),
        "license": "MIT",
    }
    return PinnedPackage(**(fields | over))


@pytest.fixture
def archive() -> bytes:
    return sdist(SRC_LAYOUT)


def fetch_served(archive: bytes, tmp_path: Path):
    """``fetch_packages`` of the archive's pin into ``tmp_path/repos``, from an index that
    serves it."""
    index = Index({"tinypkg-1.0.tar.gz": archive})
    try:
        return fetch_packages([pin(archive)], tmp_path / "repos", tmp_path / "cache", index.url)
    finally:
        index.close()


def test_a_src_layout_is_flattened_and_its_license_recorded(tmp_path: Path, archive: bytes):
    repos, failed = fetch_served(archive, tmp_path)
    assert failed == {} and len(repos) == 1
    root = tmp_path / "repos" / "tinypkg"
    assert (root / "tinypkg" / "__init__.py").is_file() and not (root / "src").exists()
    assert not list(root.glob("*.egg-info")) and (root / "tests" / "test_double.py").is_file()
    [entry] = json.loads((tmp_path / "repos" / "fetched.json").read_text())
    assert entry["license"] == "MIT" and entry["license_files"] == ["LICENSE"]
    assert entry["src_flattened"] is True and entry["sha256"] == hashlib.sha256(archive).hexdigest()


def test_a_file_whose_hash_differs_from_the_pin_is_refused(tmp_path: Path, archive: bytes):
    other = sdist({**SRC_LAYOUT, "src/tinypkg/__init__.py": "import os\nos.system('boom')\n"})
    index = Index({"tinypkg-1.0.tar.gz": other})  # the index serves (and lists) other bytes
    try:
        repos, failed = fetch_packages([pin(archive)], tmp_path / "repos", tmp_path / "cache",
                                       index.url)  # fmt: skip
        assert "does not match" in failed["tinypkg"] or "lists sha256" in failed["tinypkg"]
        # listed honestly but served differently: caught after the download, file deleted
        index.listed["tinypkg-1.0.tar.gz"] = hashlib.sha256(archive).hexdigest()
        repos, failed = fetch_packages([pin(archive)], tmp_path / "repos", tmp_path / "cache",
                                       index.url)  # fmt: skip
    finally:
        index.close()
    assert repos == [] and "does not match the pinned" in failed["tinypkg"]
    assert not any(p.is_file() for p in (tmp_path / "cache").rglob("*"))
    assert not (tmp_path / "repos" / "tinypkg").exists()


def test_offline_is_a_clear_error_and_a_cached_archive_needs_no_network(
    tmp_path: Path, archive: bytes
):
    index = Index({"tinypkg-1.0.tar.gz": archive})
    url = index.url
    fetch_packages([pin(archive)], tmp_path / "repos", tmp_path / "cache", url)
    index.close()  # nothing answers at that address now
    repos, failed = fetch_packages([pin(archive)], tmp_path / "again", tmp_path / "cache", url)
    assert failed == {} and len(repos) == 1  # from the cache
    repos, failed = fetch_packages([pin(archive)], tmp_path / "r3", tmp_path / "empty", url)
    assert repos == [] and "cannot reach the package index" in failed["tinypkg"]
    assert "offline" in failed["tinypkg"]


def test_package_lists_are_checked(tmp_path: Path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[[package]]\nname = "x"\nversion = "1"\nfilename = "x.zip"\nsha256 = "00"\n')
    with pytest.raises(FetchError) as e:
        load_package_list(bad)
    assert "package.0.filename" in str(e.value) and "package.0.sha256" in str(e.value)
    assert "license" in str(e.value)


PIP_AND_VENDORED = {
    "pip", "cachecontrol", "certifi", "dependency-groups", "distlib", "distro", "idna",
    "msgpack", "packaging", "platformdirs", "pygments", "pyproject-hooks", "requests",
    "resolvelib", "rich", "setuptools", "tomli", "tomli-w", "truststore", "urllib3",
}  # fmt: skip


def test_the_bundled_list_is_permissive_pure_python_and_leaves_out_pip():
    packages = load_package_list(bundled.DATA / "packages.toml")
    assert len(packages) >= 30
    names = {p.repo_name for p in packages}
    assert len(names) == len(packages) and not names & PIP_AND_VENDORED
    permissive = re.compile(r"MIT|BSD|Apache|PSF|ISC|Python Software Foundation")
    assert all(permissive.search(p.license) and "GPL" not in p.license for p in packages)


def test_tasks_name_a_fetched_repo_by_package_and_version(
    tmp_path: Path, archive: bytes, monkeypatch
):
    from cheetah.sandbox.snapshot import SnapshotError
    from cheetah.tasks.checkout import materialize
    from cheetah.tasks.schema import Snapshot

    index = Index({"tinypkg-1.0.tar.gz": archive})
    try:
        fetch_packages([pin(archive)], tmp_path / "repos", tmp_path / "cache", index.url)
    finally:
        index.close()
    monkeypatch.setenv("CHEETAH_REPOS_DIR", str(tmp_path / "repos"))
    patch = "--- a/tinypkg/__init__.py\n+++ b/tinypkg/__init__.py\n@@ -1,2 +1,2 @@\n"
    patch += " def double(x):\n-    return 2 * x\n+    return 3 * x\n"
    repo = materialize(Snapshot(package="tinypkg==1.0", patch=patch), tmp_path / "task")
    assert "3 * x" in (repo / "tinypkg" / "__init__.py").read_text()
    with pytest.raises(SnapshotError, match=r"1\.0 is fetched, not 2\.0"):
        materialize(Snapshot(package="tinypkg==2.0"), tmp_path / "t2")
    with pytest.raises(SnapshotError, match="not fetched: run `cheetah tasks fetch --only other`"):
        materialize(Snapshot(package="other==1.0"), tmp_path / "t3")
    from cheetah.tasks.fetched import unfetched

    assert unfetched({"tinypkg==1.0"}) is None
    problem = unfetched({"tinypkg==1.0", "other==1.0", "tinypkg==2.0"})
    assert problem is not None and problem.startswith("not fetched: other==1.0, tinypkg==2.0;")
    assert "`cheetah tasks fetch --only other tinypkg`" in problem


def _list_file(path: Path, name: str, data: bytes) -> Path:
    sha = hashlib.sha256(data).hexdigest()
    path.write_text(
        f'[[package]]\nname = "{name}"\nversion = "1.0"\nfilename = "tinypkg-1.0.tar.gz"\n'
        f'sha256 = "{sha}"\nlicense = "MIT"\n'
    )
    return path


@pytest.mark.parametrize("name", ["../victim", "{victim}", "x/../../victim", "..", "a\\n"])
def test_a_package_name_that_is_a_path_is_refused_before_anything_is_removed(
    tmp_path: Path, archive: bytes, name: str
):
    """Attack (issue 44): a list whose ``name`` is a path made fetch delete that folder and
    extract the archive there, outside --out (the archive came from the cache, no index)."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    index = Index({"tinypkg-1.0.tar.gz": archive})
    try:  # the archive is cached: a later fetch of it needs no index
        fetch_packages([pin(archive)], tmp_path / "first", tmp_path / "cache", index.url)
    finally:
        index.close()
    listed = _list_file(tmp_path / "list.toml", name.format(victim=victim), archive)
    with pytest.raises(FetchError, match=r"package\.0\.name: .*is not a project name"):
        packages = load_package_list(listed)
        fetch_packages(packages, tmp_path / "repos", tmp_path / "cache", "http://127.0.0.1:9")
    assert [p.name for p in victim.iterdir()] == ["keep.txt"]


def test_a_repo_folder_that_links_out_of_out_is_refused(tmp_path: Path, archive: bytes):
    """Attack: a link planted at ``--out/<name>`` must not lead fetch to write through it."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    (tmp_path / "repos").mkdir()
    (tmp_path / "repos" / "tinypkg").symlink_to(victim)
    repos, failed = fetch_served(archive, tmp_path)
    assert repos == [] and "is not a folder inside" in failed["tinypkg"]
    assert [p.name for p in victim.iterdir()] == ["keep.txt"]


def test_an_archive_laid_flat_in_the_cache_is_used_when_its_hash_matches(
    tmp_path: Path, archive: bytes
):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "tinypkg-1.0.tar.gz").write_bytes(archive)  # copied in by hand, no <sha256>/
    offline = "http://127.0.0.1:9/simple"  # nothing answers there
    repos, failed = fetch_packages([pin(archive)], tmp_path / "repos", cache, offline)
    assert failed == {} and len(repos) == 1
    (cache / "tinypkg-1.0.tar.gz").write_bytes(sdist({"PKG-INFO": PKG_INFO}))  # other bytes
    repos, failed = fetch_packages([pin(archive)], tmp_path / "again", cache, offline)
    why = failed["tinypkg"]
    assert repos == [] and f"not in the cache ({cache / pin(archive).sha256}" in why
    assert "another sha256, not used" in why and "offline" in why


def test_the_list_says_how_tests_run_and_fetched_json_keeps_it(tmp_path: Path, archive: bytes):
    index = Index({"tinypkg-1.0.tar.gz": archive})
    try:
        said = pin(archive, test_command="python -m pytest -x", test_paths=["tests"])
        fetch_packages([said], tmp_path / "repos", tmp_path / "cache", index.url)
    finally:
        index.close()
    [entry] = json.loads((tmp_path / "repos" / "fetched.json").read_text())
    assert entry["test_command"] == "python -m pytest -x" and entry["test_paths"] == ["tests"]


def test_only_finds_a_name_in_any_shipped_list(tmp_path: Path, capsys):
    from cheetah.cli import main
    from cheetah.tasks.fetch import select, shipped_lists

    default, generality = bundled.DATA / "packages.toml", bundled.DATA / "packages-generality.toml"
    assert shipped_lists()[0] == default and generality in shipped_lists()
    packages = load_package_list(default)
    chosen, unknown = select(packages, ["toposort", "six"], from_shipped=True)
    assert sorted(p.name for p in chosen) == ["six", "toposort"] and unknown == {}
    chosen, unknown = select(packages, ["toposort", "no-such"], from_shipped=False)
    assert chosen == [] and unknown == {"toposort": [generality], "no-such": []}
    mine = _list_file(tmp_path / "mine.toml", "tinypkg", b"x")
    assert main(["tasks", "fetch", "--list", str(mine), "--only", "toposort"]) == 2
    err = capsys.readouterr().err
    assert f"toposort is not in {mine}; it is in {generality} (pass --list)" in err


def test_the_generality_list_is_permissive_and_apart_from_the_bundled_one():
    packages = load_package_list(bundled.DATA / "packages-generality.toml")
    names = {p.repo_name for p in packages}
    assert len(packages) >= 20 and not names & PIP_AND_VENDORED
    assert not names & {p.repo_name for p in load_package_list(bundled.DATA / "packages.toml")}
    assert all(not p.test_command and not p.test_paths for p in packages)  # no hand edits
    permissive = re.compile(r"MIT|BSD|Apache|PSF|ISC|MPL 2\.0")
    assert all(permissive.search(p.license) and "GPL" not in p.license for p in packages)
