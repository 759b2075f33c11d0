"""Graphs as adjacency dicts: ``{node: [neighbour, ...]}`` or, weighted, ``{node: {nb: w}}``."""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Hashable, Mapping, Sequence

Node = Hashable


class CycleError(ValueError):
    """The graph has a cycle, so it has no topological order."""


def bfs_path(graph: Mapping[Node, Sequence[Node]], start: Node, goal: Node) -> list[Node] | None:
    """A shortest path (fewest edges) from ``start`` to ``goal``, or None if there is none."""
    if start == goal:
        return [start]
    parents: dict[Node, Node] = {start: start}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nb in graph.get(node, ()):
            if nb in parents:
                continue
            parents[nb] = node
            if nb == goal:
                path = [goal]
                while path[-1] != start:
                    path.append(parents[path[-1]])
                return path[::-1]
            queue.append(nb)
    return None


def topological_sort(graph: Mapping[Node, Sequence[Node]]) -> list[Node]:
    """Nodes ordered so every edge goes forward (Kahn's algorithm, ties by first seen)."""
    nodes: list[Node] = []
    indegree: dict[Node, int] = {}
    for node, nbs in graph.items():
        if node not in indegree:
            indegree[node] = 0
            nodes.append(node)
        for nb in nbs:
            if nb not in indegree:
                indegree[nb] = 0
                nodes.append(nb)
            indegree[nb] += 1
    ready = deque(n for n in nodes if indegree[n] == 0)
    order: list[Node] = []
    while ready:
        node = ready.popleft()
        order.append(node)
        for nb in graph.get(node, ()):
            indegree[nb] -= 1
            if indegree[nb] == 0:
                ready.append(nb)
    if len(order) != len(nodes):
        raise CycleError("graph has a cycle")
    return order


def dijkstra(graph: Mapping[Node, Mapping[Node, float]], start: Node) -> dict[Node, float]:
    """Shortest distance from ``start`` to every reachable node (non-negative weights)."""
    dist: dict[Node, float] = {start: 0.0}
    heap: list[tuple[float, int, Node]] = [(0.0, 0, start)]
    counter = 1
    while heap:
        d, _, node = heapq.heappop(heap)
        if d > dist.get(node, float("inf")):
            continue
        for nb, w in graph.get(node, {}).items():
            if w < 0:
                raise ValueError(f"negative edge weight {w} on {node!r} -> {nb!r}")
            nd = d + w
            if nd < dist.get(nb, float("inf")):
                dist[nb] = nd
                heapq.heappush(heap, (nd, counter, nb))
                counter += 1
    return dist


def connected_components(graph: Mapping[Node, Sequence[Node]]) -> list[set[Node]]:
    """Components of an undirected graph (each edge listed in one or both directions)."""
    adj: dict[Node, set[Node]] = {}
    for node, nbs in graph.items():
        adj.setdefault(node, set())
        for nb in nbs:
            adj[node].add(nb)
            adj.setdefault(nb, set()).add(node)
    seen: set[Node] = set()
    comps: list[set[Node]] = []
    for node in adj:
        if node in seen:
            continue
        comp = {node}
        stack = [node]
        while stack:
            for nb in adj[stack.pop()]:
                if nb not in comp:
                    comp.add(nb)
                    stack.append(nb)
        seen |= comp
        comps.append(comp)
    return comps
