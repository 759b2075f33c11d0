import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cheetah.core.safefs import read_tree
from cheetah.tasks.patch import PatchError, apply_patch, diff_texts, diff_trees


def test_modify_create_delete(tmp_path):
    (tmp_path / "a.py").write_text("one\ntwo\nthree\n")
    (tmp_path / "gone.py").write_text("bye\n")
    patch = (
        diff_texts("a.py", "one\ntwo\nthree\n", "one\n2\nthree\n")
        + diff_texts("pkg/new.py", None, "hello\n")
        + diff_texts("gone.py", "bye\n", None)
    )
    changed = apply_patch(tmp_path, patch)
    assert changed == ["a.py", "gone.py", "pkg/new.py"]
    assert (tmp_path / "a.py").read_text() == "one\n2\nthree\n"
    assert (tmp_path / "pkg" / "new.py").read_text() == "hello\n"
    assert not (tmp_path / "gone.py").exists()


def test_no_newline_at_end_of_file(tmp_path):
    (tmp_path / "f").write_text("a\nb")
    patch = diff_texts("f", "a\nb", "a\nc")
    assert "\\ No newline at end of file" in patch
    apply_patch(tmp_path, patch)
    assert (tmp_path / "f").read_text() == "a\nc"


def test_hunk_found_when_lines_moved(tmp_path):
    before = "".join(f"line {i}\n" for i in range(30))
    after = before.replace("line 20\n", "LINE 20\n")
    patch = diff_texts("f", before, after)
    (tmp_path / "f").write_text("extra\nextra\n" + before)
    apply_patch(tmp_path, patch)
    assert "LINE 20" in (tmp_path / "f").read_text()


def test_failure_names_file_and_hunk_and_writes_nothing(tmp_path):
    (tmp_path / "a").write_text("x\n")
    (tmp_path / "b").write_text("totally different\n")
    patch = diff_texts("a", "x\n", "y\n") + diff_texts("b", "q\n", "r\n")
    with pytest.raises(PatchError, match=r"b: hunk 1 \(line 1\) does not apply"):
        apply_patch(tmp_path, patch)
    assert (tmp_path / "a").read_text() == "x\n"  # all or nothing


def test_git_style_patch_with_headers(tmp_path):
    (tmp_path / "m.py").write_text("def f():\n    return 1\n")
    patch = (
        "diff --git a/m.py b/m.py\nindex 111..222 100644\n--- a/m.py\n+++ b/m.py\n"
        "@@ -1,2 +1,2 @@\n def f():\n-    return 1\n+    return 2\n"
    )
    apply_patch(tmp_path, patch)
    assert (tmp_path / "m.py").read_text() == "def f():\n    return 2\n"


def test_rejects_paths_leaving_the_root(tmp_path):
    with pytest.raises(PatchError, match="leaves the repository"):
        apply_patch(tmp_path, diff_texts("../evil", None, "x\n"))
    with pytest.raises(PatchError, match="no file sections"):
        apply_patch(tmp_path, "just text\n")


def test_diff_trees_ignores_caches(tmp_path):
    (tmp_path / "a.py").write_text("1\n")
    before = read_tree(tmp_path)
    (tmp_path / "a.py").write_text("2\n")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    diff = diff_trees(before, read_tree(tmp_path))
    assert "-1\n+2" in diff
    assert "pycache" not in diff


lines = st.lists(st.sampled_from(["a", "b", "c", "", "  d", "e e"]), max_size=12)


@settings(max_examples=60, deadline=None)
@given(lines, lines, st.booleans(), st.booleans())
def test_diff_then_apply_roundtrips(tmp_path_factory, a, b, nl_a, nl_b):
    before = "\n".join(a) + ("\n" if nl_a and a else "")
    after = "\n".join(b) + ("\n" if nl_b and b else "")
    root = tmp_path_factory.mktemp("rt")
    (root / "f.txt").write_text(before)
    patch = diff_texts("f.txt", before, after)
    if patch:
        apply_patch(root, patch)
    assert (root / "f.txt").read_text() == after
