import os

import pytest

from cheetah.core.workspace import PathError, resolve_path
from tests.conftest import call_tool


def test_relative_paths_resolve_inside(ws):
    (ws.root / "a").mkdir()
    assert resolve_path(ws.root, "a/../a/b.py") == ws.root / "a" / "b.py"
    assert resolve_path(ws.root, ".") == ws.root


@pytest.mark.parametrize("bad", ["../x", "a/../../x", "/etc/passwd", "~/x", "", "a\x00b"])
def test_escapes_are_refused(ws, bad):
    with pytest.raises(PathError):
        resolve_path(ws.root, bad)


def test_symlink_out_is_refused_and_in_is_allowed(ws, tmp_path):
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    os.symlink(outside, ws.root / "link")
    (ws.root / "real.txt").write_text("ok\n")
    os.symlink(ws.root / "real.txt", ws.root / "inner")
    with pytest.raises(PathError, match="outside the workspace"):
        resolve_path(ws.root, "link")
    assert resolve_path(ws.root, "inner") == ws.root / "real.txt"


@pytest.mark.parametrize(
    "tool,args",
    [
        ("read_file", {"path": "../secret.txt"}),
        ("read_file", {"path": "/etc/passwd"}),
        ("list_dir", {"path": ".."}),
        ("grep", {"pattern": "secret", "path": "link"}),
        ("edit_file", {"path": "link", "old_str": "secret", "new_str": "x"}),
        ("edit_file", {"path": "../new.txt", "new_str": "x"}),
        ("run_terminal", {"command": "pwd", "cwd": ".."}),
        ("lint", {"paths": "../secret.txt"}),
    ],
)
async def test_every_tool_refuses_escapes(ws, tmp_path, tool, args):
    (tmp_path / "secret.txt").write_text("secret")
    os.symlink(tmp_path / "secret.txt", ws.root / "link")
    r = await call_tool(ws, tool, **args)
    assert r.is_error
    assert "secret" not in r.output.replace("secret.txt", "").replace("'secret'", "")
    assert (tmp_path / "secret.txt").read_text() == "secret"
    assert not (tmp_path / "new.txt").exists()
