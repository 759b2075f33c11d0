import pytest

from algos.graph import CycleError, bfs_path, connected_components, dijkstra, topological_sort


def test_bfs_path_shortest():
    g = {"a": ["b", "c"], "b": ["d"], "c": ["d"], "d": ["e"]}
    assert bfs_path(g, "a", "e") == ["a", "b", "d", "e"]


def test_bfs_path_unreachable():
    assert bfs_path({"a": ["b"], "c": []}, "a", "c") is None


def test_topological_sort_orders_edges():
    g = {"shirt": ["tie"], "tie": ["jacket"], "trousers": ["shoes", "jacket"]}
    order = topological_sort(g)
    for node, nbs in g.items():
        for nb in nbs:
            assert order.index(node) < order.index(nb)


def test_topological_sort_cycle():
    with pytest.raises(CycleError):
        topological_sort({"a": ["b"], "b": ["a"]})


def test_dijkstra_distances():
    g = {"a": {"b": 1, "c": 4}, "b": {"c": 2, "d": 5}, "c": {"d": 1}}
    assert dijkstra(g, "a") == {"a": 0, "b": 1, "c": 3, "d": 4}


def test_connected_components():
    comps = connected_components({1: [2], 3: [4], 4: [5], 6: []})
    assert sorted(map(sorted, comps)) == [[1, 2], [3, 4, 5], [6]]
