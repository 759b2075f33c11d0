"""Which earlier calls of a batch each call must wait for, in time linear in the calls.

The rule (``conflicts``): two calls conflict when they touch overlapping workspace paths
and at least one of them writes; a directory overlaps everything under it, ``'.'`` is the
whole workspace, and ``':name'`` paths (per-session state such as the todo list) overlap
only themselves. A call waits for every earlier call it conflicts with.

Comparing every pair is quadratic: a hostile batch of thousands of calls made the env
server spend seconds and gigabytes on the dependency lists alone. ``Planner`` gives each
call a short list of things to wait for whose transitive closure is exactly that set,
using a trie of the paths seen so far. Per trie node it keeps the last call that wrote
that path, and three groups: calls that read that exact path since, and calls that read or
wrote strictly below it. A call that needs a whole group waits for one *join* of it (done
when all its members are), made once and shared by every later call that needs the same
members. Joins never reach back past a later member: a group's newer members conflict with
the call that sealed its older ones, so they already wait for it (directly or through a
join). Each call touches the trie nodes on its paths only, so a batch costs
O(calls x path depth), and each call waits for O(path depth) things.

Deliberately left out: finding the *fewest* waits (a join or a last writer may already be
covered by another wait; waiting twice costs nothing).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cheetah.tools.base import Access

Wait = int  # an id: below the call count a call, else a join


def overlap(a: str, b: str) -> bool:
    if a.startswith(":") or b.startswith(":"):
        return a == b
    return a == b or a == "." or b == "." or a.startswith(b + "/") or b.startswith(a + "/")


def conflicts(x: Access, y: Access) -> bool:
    """Whether two calls must keep their message order (symmetric): the rule itself."""
    pairs = [(p, q) for p in x.writes for q in y.reads | y.writes]
    pairs += [(p, q) for p in y.writes for q in x.reads]
    return any(overlap(p, q) for p, q in pairs)


@dataclass
class _Group:
    """Calls of one kind at one node: those added since the last seal, and the join that
    stands for the ones before (None: none yet, or all covered by a later write)."""

    open: list[Wait] = field(default_factory=list)
    sealed: Wait | None = None


@dataclass
class _Node:
    children: dict[str, _Node] = field(default_factory=dict)
    write: Wait | None = None  # the last call that wrote exactly this path
    reads: _Group = field(default_factory=_Group)  # reads of exactly this path since
    below_writes: _Group = field(default_factory=_Group)  # writes strictly below
    below_reads: _Group = field(default_factory=_Group)  # reads strictly below


class Planner:
    """Feed it the calls' accesses in message order; ``add`` returns what each must wait for.
    ``joins[j - first_join]`` lists the members of join ``j`` (calls or earlier joins)."""

    def __init__(self, calls: int) -> None:
        self.calls = calls
        self.joins: list[list[Wait]] = []
        self._root = _Node()
        self._named: dict[str, _Node] = {}  # ':name' paths: no ancestors, no descendants
        self._next_call = 0

    def add(self, access: Access) -> list[Wait]:
        me = self._next_call
        self._next_call += 1
        waits: set[Wait] = set()
        for path in access.reads:
            chain = self._chain(path)
            for node in chain:  # the path and its ancestors: their last writes
                _add(waits, node.write)
            waits.update(self._all(chain[-1].below_writes))
        for path in access.writes:
            chain = self._chain(path)
            for node in chain:
                _add(waits, node.write)
                waits.update(self._all(node.reads))
            waits.update(self._all(chain[-1].below_writes))
            waits.update(self._all(chain[-1].below_reads))
        for path in access.reads:
            chain = self._chain(path)
            chain[-1].reads.open.append(me)
            for node in chain[:-1]:
                node.below_reads.open.append(me)
        for path in access.writes:
            chain = self._chain(path)
            node = chain[-1]
            node.write, node.reads, node.below_reads, node.below_writes = (
                me,
                _Group(),
                _Group(),
                _Group(),
            )
            for parent in chain[:-1]:
                parent.below_writes.open.append(me)
        waits.discard(me)
        return sorted(waits)

    def _chain(self, path: str) -> list[_Node]:
        """The trie nodes from the workspace root down to ``path`` (made as needed)."""
        if path.startswith(":"):
            return [self._named.setdefault(path, _Node())]
        node, chain = self._root, [self._root]
        if path != ".":
            for part in path.split("/"):
                node = node.children.setdefault(part, _Node())
                chain.append(node)
        return chain

    def _all(self, group: _Group) -> list[Wait]:
        """One wait that covers every member of ``group``: the open ones are sealed into a
        join (or stand alone when there is one), replacing the older join they cover."""
        if group.open:
            if len(group.open) == 1:
                group.sealed = group.open[0]
            else:
                self.joins.append(group.open)
                group.sealed = self.calls + len(self.joins) - 1
            group.open = []
        return [] if group.sealed is None else [group.sealed]


def _add(waits: set[Wait], wait: Wait | None) -> None:
    if wait is not None:
        waits.add(wait)
