"""Where a run's time goes: phases add up, survive a resume, and sort slowest first."""

from __future__ import annotations

import pytest

from cheetah.rl.store import RunStore
from cheetah.rl.timing import PhaseClock, breakdown, table


def test_phases_add_up_survive_a_new_process_and_sort_slowest_first(tmp_path):
    store = RunStore(tmp_path / "run.sqlite")
    clock = PhaseClock(store)
    with clock.phase("stage:base"):
        pass
    clock.add("rl:trainer_steps", 5.0)
    clock.add("rl:trainer_steps", 2.5)
    with pytest.raises(RuntimeError), clock.phase("sft:steps"):
        raise RuntimeError("a failed phase still counts")
    again = PhaseClock(store)  # a resumed run's process
    assert again.seconds["rl:trainer_steps"] == 7.5
    assert set(again.seconds) == {"stage:base", "rl:trainer_steps", "sft:steps"}
    assert again.wall_s() >= 0.0
    b = breakdown({"a": 2.0, "b": 6.0}, 10.0)
    assert [p["phase"] for p in b["phases"]] == ["b", "a", "other"]
    assert [p["share"] for p in b["phases"]] == [0.6, 0.2, 0.2] and b["slowest"] == "b"
    assert "b" in table(b).splitlines()[1]
    store.close()
