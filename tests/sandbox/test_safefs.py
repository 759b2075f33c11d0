"""SafeRoot on a plain directory, through openat2 and through the per-component fallback."""

from __future__ import annotations

import io
import os

import pytest

from cheetah.core import safefs
from cheetah.core.safefs import NotFound, NotRegular, SafeRoot, read_tree
from cheetah.core.workspace import PathError, TreeTooLarge
from cheetah.tools.read_file import _lines


@pytest.fixture(params=["openat2", "per-component"])
def tree(request, tmp_path, monkeypatch):
    if request.param == "openat2" and not safefs.HAVE_OPENAT2:
        pytest.skip("this kernel has no openat2")
    monkeypatch.setattr(safefs, "HAVE_OPENAT2", request.param == "openat2")
    root = tmp_path / "root"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("x = 1\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    os.symlink(outside, root / "out")
    os.symlink(outside / "secret.txt", root / "src" / "link.txt")
    os.symlink("app.py", root / "src" / "inner")
    os.mkfifo(root / "fifo")
    return SafeRoot(root), outside


def test_reads_regular_files_within_their_limit(tree):
    files, _ = tree
    assert files.read("src/app.py", 100) == (b"x = 1\n", 6)
    assert files.read("./src//app.py", 3) == (b"x =", 6)
    assert files.kind("src") == "dir" and files.kind("fifo") == "other"
    assert files.kind("src/link.txt") == "link" and files.kind("nope") is None


@pytest.mark.parametrize("path", ["out/secret.txt", "src/link.txt", "src/inner", "out"])
def test_links_are_never_followed(tree, path):
    files, outside = tree
    with pytest.raises(NotRegular, match=r"symbolic link|not a regular file|directory"):
        files.read(path, 100)
    with pytest.raises(PathError):
        files.write(f"{path}/new.txt" if path == "out" else path, b"owned")
    assert sorted(os.listdir(outside)) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "secret"


@pytest.mark.parametrize("path", ["../x", "a/../../x", "/etc/passwd", "~/x", "", "a\x00b"])
def test_bad_paths_are_refused_before_any_access(tree, path):
    files, _ = tree
    with pytest.raises(PathError):
        files.read(path, 10)


def test_fifo_is_refused_without_blocking(tree):
    files, _ = tree
    with pytest.raises(NotRegular, match="not a regular file"):
        files.read("fifo", 10)
    with pytest.raises(NotRegular):
        files.write("fifo", b"x")


def test_write_makes_dirs_and_rewrites_in_place(tree):
    files, _ = tree
    files.write("new/deep/f.txt", b"one")
    assert files.read("new/deep/f.txt", 10) == (b"one", 3)
    ino = files.lstat("src/app.py").st_ino
    files.write("src/app.py", b"y = 2\n")
    assert files.lstat("src/app.py").st_ino == ino
    files.unlink("src/link.txt")  # removes the link, not its target
    assert files.kind("src/link.txt") is None
    files.unlink("missing")  # nothing there is fine
    with pytest.raises(NotRegular):
        files.unlink("src")


def test_list_and_walk_never_enter_links(tree):
    files, _ = tree
    kinds = {e.name: (e.kind, e.link) for e in files.list(".")}
    assert kinds["out"][0] == "link" and kinds["out"][1].endswith("outside")
    walked = {rel: e.kind for rel, e in files.walk()}
    assert walked == {"fifo": "other", "out": "link", "src/app.py": "file", "src/inner": "link",
                      "src/link.txt": "link"}  # fmt: skip
    with pytest.raises(NotFound):
        files.list("nope")


def test_read_tree_skips_links_and_caps_before_reading(tree):
    files, _ = tree
    assert read_tree(files.root) == {"src/app.py": b"x = 1\n"}
    with open(files.root / "sparse.bin", "wb") as fh:
        fh.truncate(100 << 20)
    with pytest.raises(TreeTooLarge):
        read_tree(files.root, max_bytes=1 << 20)


def test_walk_stops_at_the_depth_cap(tmp_path):
    deep = tmp_path / "/".join(["d"] * 80)
    deep.mkdir(parents=True)
    (deep / "f.txt").write_text("x")
    assert list(SafeRoot(tmp_path).walk()) == []
    assert len(list(SafeRoot(tmp_path).walk(max_depth=100))) == 1


def test_long_lines_are_read_a_bounded_piece_at_a_time():
    fh = io.BytesIO(b"short\n" + b"x" * 100_000 + b"\nlast")
    got = list(_lines(fh, 1000))
    assert got == [(b"short\n", 0), (b"x" * 1000, 99_001), (b"last", 0)]
