import math

import pytest

from shapes.vector import Vec2, nearest_index


def test_add_and_sub():
    assert Vec2(1, 2) + Vec2(3, 5) == Vec2(4, 7)
    assert Vec2(1, 2) - Vec2(3, 5) == Vec2(-2, -3)


def test_scaled():
    assert Vec2(2, -3).scaled(4) == Vec2(8, -12)


def test_dot_and_cross():
    assert Vec2(2, 3).dot(Vec2(4, 5)) == 23
    assert Vec2(2, 3).cross(Vec2(4, 5)) == -2
    assert Vec2(4, 5).cross(Vec2(2, 3)) == 2


def test_lengths():
    assert Vec2(3, 4).length_sq() == 25
    assert Vec2(3, 4).length() == 5
    assert Vec2(-6, 8).length() == 10


def test_is_zero():
    assert Vec2(0, 0).is_zero()
    assert not Vec2(0, 2).is_zero()
    assert not Vec2(2, 0).is_zero()


def test_normalized():
    assert Vec2(0, -5).normalized() == Vec2(0, -1)
    assert Vec2(3, 4).normalized() == Vec2(0.6, 0.8)
    with pytest.raises(ValueError):
        Vec2(0, 0).normalized()


def test_distances():
    a, b = Vec2(1, 1), Vec2(4, 5)
    assert a.distance_to(b) == 5
    assert b.distance_to(a) == 5
    assert a.manhattan_to(b) == 7
    assert Vec2(-2, 3).manhattan_to(Vec2(1, -1)) == 7


def test_lerp():
    a, b = Vec2(2, 4), Vec2(6, 12)
    assert a.lerp(b, 0) == a
    assert a.lerp(b, 1) == b
    assert a.lerp(b, 0.25) == Vec2(3, 6)


def test_project_onto():
    assert Vec2(3, 4).project_onto(Vec2(2, 0)) == Vec2(3, 0)
    assert Vec2(2, 0).project_onto(Vec2(1, 1)) == Vec2(1, 1)
    assert Vec2(3, 1).project_onto(Vec2(2, 4)) == Vec2(1, 2)
    with pytest.raises(ValueError):
        Vec2(1, 1).project_onto(Vec2(0, 0))


@pytest.mark.parametrize(
    "x, y, q",
    [
        (0, 0, 0),
        (1, 1, 1),
        (-1, 1, 2),
        (-1, -1, 3),
        (1, -1, 4),
        (1, 0, 1),
        (0, 1, 2),
        (-1, 0, 3),
        (0, -1, 4),
    ],
)
def test_quadrant(x, y, q):
    assert Vec2(x, y).quadrant() == q


def test_parallel_and_direction():
    assert Vec2(1, 2).is_parallel(Vec2(-2, -4))
    assert not Vec2(1, 2).is_parallel(Vec2(2, 1))
    assert Vec2(1, 2).same_direction(Vec2(2, 4))
    assert not Vec2(1, 2).same_direction(Vec2(-2, -4))
    assert not Vec2(1, 2).same_direction(Vec2(0, 0))
    assert not Vec2(1, 2).same_direction(Vec2(2, 1))


def test_nearest_index_prefers_first_on_ties():
    pts = [Vec2(5, 5), Vec2(1, 0), Vec2(0, 1), Vec2(3, 3)]
    assert nearest_index(pts, Vec2(0, 0)) == 1
    assert nearest_index(pts, Vec2(4, 4)) == 0
    assert nearest_index(pts, Vec2(3, 2)) == 3
    assert nearest_index([], Vec2(0, 0)) == -1


def test_nearest_index_single_point():
    assert nearest_index([Vec2(9, 9)], Vec2(0, 0)) == 0
    assert math.isclose(Vec2(9, 9).distance_to(Vec2(0, 0)), 9 * math.sqrt(2))
