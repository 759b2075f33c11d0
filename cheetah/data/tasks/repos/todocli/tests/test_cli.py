import io

from todocli.cli import run


def call(tmp_path, *argv):
    out = io.StringIO()
    code = run(["--file", str(tmp_path / "t.json"), *argv], out=out)
    return code, out.getvalue()


def test_add_then_list(tmp_path):
    assert call(tmp_path, "add", "buy milk", "-p", "2")[0] == 0
    code, out = call(tmp_path, "list")
    assert code == 0
    assert "buy milk" in out
    assert "0/1 done" in out


def test_done_hides_item_unless_all(tmp_path):
    call(tmp_path, "add", "a")
    call(tmp_path, "done", "1")
    assert "nothing to do" in call(tmp_path, "list")[1]
    assert "[x]" in call(tmp_path, "list", "--all")[1]


def test_unknown_id_fails(tmp_path):
    assert call(tmp_path, "done", "9")[0] == 1


def test_remove(tmp_path):
    call(tmp_path, "add", "a")
    assert call(tmp_path, "remove", "1") == (0, "removed 1\n")
