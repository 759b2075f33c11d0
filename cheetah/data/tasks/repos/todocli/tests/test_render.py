from todocli.render import render_item, truncate
from todocli.store import Item


def test_truncate_keeps_short_text():
    assert truncate("short", 10) == "short"


def test_truncate_cuts_to_width():
    cut = truncate("a" * 50, 10)
    assert cut == "aaaaaaa..."
    assert len(cut) == 10


def test_render_item():
    item = Item(id=7, title="ship it", priority=1, tags=["work"])
    assert render_item(item) == "[ ]   7  P1  ship it #work"
