import pytest

from todocli.store import Store, TodoError


def test_add_assigns_increasing_ids():
    s = Store()
    assert s.add("a").id == 1
    assert s.add("b").id == 2


def test_ids_are_not_reused_after_remove_of_middle():
    s = Store()
    s.add("a")
    s.add("b")
    s.add("c")
    s.remove(2)
    assert s.add("d").id == 4


def test_add_rejects_bad_priority_and_empty_title():
    s = Store()
    with pytest.raises(TodoError):
        s.add("x", priority=0)
    with pytest.raises(TodoError):
        s.add("   ")


def test_pending_sorted_by_priority_then_id():
    s = Store()
    s.add("low", 5)
    s.add("high", 1)
    s.add("high too", 1)
    s.complete(2)
    assert [i.title for i in s.pending()] == ["high too", "low"]


def test_pending_filters_by_tag():
    s = Store()
    s.add("a", tags=["work"])
    s.add("b", tags=["home"])
    assert [i.title for i in s.pending("home")] == ["b"]


def test_save_and_load_roundtrip(tmp_path):
    path = tmp_path / "todo.json"
    s = Store()
    s.add("write", 2, ["work", "work"])
    s.save(path)
    loaded = Store.load(path)
    assert loaded.items == s.items
    assert loaded.items[0].tags == ["work"]


def test_unknown_id():
    with pytest.raises(TodoError):
        Store().complete(7)
