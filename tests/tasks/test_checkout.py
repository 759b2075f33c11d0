import subprocess
import tarfile

import pytest

from cheetah.tasks.checkout import SnapshotError, materialize
from cheetah.tasks.patch import diff_texts
from cheetah.tasks.schema import Snapshot


def test_dir_copy_skips_caches_and_applies_patch(calc_repo, tmp_path):
    (calc_repo / "calc" / "__pycache__").mkdir()
    (calc_repo / "calc" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    patch = diff_texts("NOTES.md", None, "hi\n")
    dest = materialize(Snapshot(dir=str(calc_repo), patch=patch), tmp_path / "out")
    assert (dest / "calc" / "ops.py").is_file()
    assert (dest / "NOTES.md").read_text() == "hi\n"
    assert not (dest / "calc" / "__pycache__").exists()


def test_tarball_with_one_top_folder_and_subdir(calc_repo, tmp_path):
    tar = tmp_path / "repo.tar.gz"
    with tarfile.open(tar, "w:gz") as tf:
        tf.add(calc_repo, arcname="calc-1.0")
    dest = materialize(Snapshot(tar=str(tar)), tmp_path / "a")
    assert (dest / "calc" / "ops.py").is_file()
    sub = materialize(Snapshot(tar=str(tar), subdir="calc"), tmp_path / "b")
    assert (sub / "ops.py").is_file()


def git(cwd, *args):
    subprocess.run(
        ["git", "-c", "user.email=t@t", "-c", "user.name=t", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )


def test_git_checkout_of_a_commit(calc_repo, tmp_path):
    git(calc_repo, "init", "-q")
    git(calc_repo, "add", ".")
    git(calc_repo, "commit", "-q", "-m", "one")
    first = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=calc_repo, capture_output=True, text=True
    ).stdout.strip()
    (calc_repo / "calc" / "ops.py").write_text("# changed\n")
    git(calc_repo, "commit", "-q", "-am", "two")
    dest = materialize(Snapshot(git=str(calc_repo), commit=first), tmp_path / "c")
    assert "def add" in (dest / "calc" / "ops.py").read_text()


def test_errors_are_clear(calc_repo, tmp_path):
    with pytest.raises(SnapshotError, match="does not exist"):
        materialize(Snapshot(dir=str(tmp_path / "nope")), tmp_path / "d1")
    git(calc_repo, "init", "-q")
    git(calc_repo, "add", ".")
    git(calc_repo, "commit", "-q", "-m", "one")
    with pytest.raises(SnapshotError, match="git checkout failed"):
        materialize(Snapshot(git=str(calc_repo), commit="deadbeef" * 5), tmp_path / "d2")
    bad_patch = diff_texts("calc/ops.py", "not the content\n", "x\n")
    with pytest.raises(SnapshotError, match="snapshot patch does not apply"):
        materialize(Snapshot(dir=str(calc_repo), patch=bad_patch), tmp_path / "d3")
