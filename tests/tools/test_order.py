"""The batch planner waits for exactly the earlier conflicting calls, and stays linear.

Checked against the rule itself (``conflicts``, compared pair by pair) on random batches:
a call's waits, followed through joins and through the waits of the calls they name, must
reach every earlier call it conflicts with and nothing after it (no deadlock). The size
test is the attack from the security review: thousands of small conflicting calls.
"""

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from cheetah.core.wire import ToolCall
from cheetah.tools import default_tools
from cheetah.tools.base import Access, ToolContext
from cheetah.tools.batch import run_batch
from cheetah.tools.order import Planner, conflicts

PATHS = [".", "a", "a/b", "a/b/c", "a/bc", "a/c", "b", "b/a", ":todo", ":other", "/a", ".."]
ACCESS = st.builds(
    Access,
    reads=st.frozensets(st.sampled_from(PATHS), max_size=2),
    writes=st.frozensets(st.sampled_from(PATHS), max_size=2),
)


def _reach(accesses: list[Access]) -> list[set[int]]:
    """For each call, the calls it transitively waits for, through joins."""
    n = len(accesses)
    planner = Planner(n)
    waits = [planner.add(a) for a in accesses]
    memo: dict[int, set[int]] = {}

    def closure(node: int) -> set[int]:
        if node not in memo:
            direct = waits[node] if node < n else planner.joins[node - n]
            out: set[int] = set()
            for w in direct:
                if w < n:
                    out.add(w)
                out |= closure(w)
            memo[node] = out
        return memo[node]

    return [closure(i) for i in range(n)]


@settings(max_examples=400, deadline=None)
@given(st.lists(ACCESS, max_size=14))
def test_waits_reach_exactly_the_earlier_conflicting_calls(accesses):
    reach = _reach(accesses)
    for i, a in enumerate(accesses):
        must = {j for j in range(i) if conflicts(accesses[j], a)}
        assert must <= reach[i], (i, must - reach[i])
        assert all(j < i for j in reach[i])  # only earlier calls: no cycle
        # A call waiting (transitively) for one it does not conflict with is allowed only
        # when a conflicting call in between already waits for it: the rule's own order.
        for j in reach[i] - must:
            assert any(j in reach[k] for k in must), (i, j)


def test_independent_reads_wait_for_nothing():
    planner = Planner(3)
    for _ in range(3):
        assert planner.add(Access(reads=frozenset({"a.py", "."}))) == []


def test_a_hostile_batch_costs_linear_work():
    """20,000 alternating reads of '.' and writes of distinct files (the pattern that made
    each call depend on all earlier ones): every call waits for at most a few things, and
    the joins together list each call a bounded number of times."""
    n = 20_000
    accesses = [
        Access(reads=frozenset({"."})) if i % 2 else Access(writes=frozenset({f"d/f{i}.py"}))
        for i in range(n)
    ]
    planner = Planner(n)
    waits = [planner.add(a) for a in accesses]
    assert max(len(w) for w in waits) <= 4
    assert sum(len(j) for j in planner.joins) <= 4 * n


async def test_run_batch_keeps_order_through_joins(ws):
    """Reads of '.' (grep), then writes, then reads again: run for real, each write sees the
    reads before it finished, and a later read sees every write before it."""
    (ws.root / "d").mkdir()
    calls = []
    for i in range(30):
        calls.append(ToolCall(index=len(calls) + 1, name="grep", args={"pattern": "zzz"}))
        body = f"<path>d/f{i}.py</path><new_str>zzz{i}\n</new_str>"
        calls.append(ToolCall(index=len(calls) + 1, name="edit_file", args=_args(body)))
    results = await run_batch(calls, ToolContext(workspace=ws), default_tools())
    greps = [r for r in results if r.name == "grep"]
    for k, r in enumerate(greps):
        assert r.output.count("zzz") == k or (k == 0 and "No matches" in r.output), r.output
    assert not any(r.is_error for r in results if r.name == "edit_file")


def _args(body: str) -> dict[str, str]:
    from cheetah.harness.protocol import parse_message

    [call] = parse_message(f'<tool name="edit_file">{body}</tool>')
    return call.args


async def test_many_calls_finish_without_quadratic_memory(ws):
    """4,500 conflicting calls (the batch that OOM-killed the env server) run to the end."""
    calls = [  # refused at their arguments, so the ordering is all the work
        ToolCall(index=i + 1, name="edit_file", args={"path": f"f{i}.py", "x": ""})
        if i % 3
        else ToolCall(index=i + 1, name="read_file", args={"path": ".", "x": ""})
        for i in range(4500)
    ]
    results = await asyncio.wait_for(
        run_batch(calls, ToolContext(workspace=ws), default_tools()), timeout=240
    )
    assert len(results) == 4500
