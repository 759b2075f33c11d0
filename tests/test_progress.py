from cheetah.progress import Pace


def test_pace_waits_for_its_interval_unless_final() -> None:
    slow = Pace(seconds=3600)
    assert not slow.due()
    assert slow.due(final=True)
    assert not slow.due()


def test_pace_with_no_interval_is_always_due() -> None:
    fast = Pace(seconds=0)
    assert fast.due() and fast.due()
