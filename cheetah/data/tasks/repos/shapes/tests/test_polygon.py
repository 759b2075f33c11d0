import pytest

from shapes.polygon import (
    contains_point,
    convex_hull,
    is_convex,
    on_segment,
    orientation,
    polygon_area,
    polygon_centroid,
    segments_intersect,
    signed_area,
)
from shapes.vector import Vec2

SQUARE = [Vec2(0, 0), Vec2(4, 0), Vec2(4, 4), Vec2(0, 4)]
L_SHAPE = [Vec2(0, 0), Vec2(4, 0), Vec2(4, 2), Vec2(2, 2), Vec2(2, 4), Vec2(0, 4)]


def test_orientation():
    a, b = Vec2(0, 0), Vec2(2, 0)
    assert orientation(a, b, Vec2(1, 1)) == 1
    assert orientation(a, b, Vec2(1, -1)) == -1
    assert orientation(a, b, Vec2(5, 0)) == 0


def test_on_segment():
    a, b = Vec2(0, 0), Vec2(4, 2)
    assert on_segment(Vec2(2, 1), a, b)
    assert on_segment(a, a, b)
    assert on_segment(b, a, b)
    assert on_segment(Vec2(2, 1), b, a)
    assert not on_segment(Vec2(6, 3), a, b)
    assert not on_segment(Vec2(-2, -1), a, b)
    assert not on_segment(Vec2(2, 2), a, b)


def test_on_vertical_segment_checks_y_range():
    a, b = Vec2(1, 0), Vec2(1, 4)
    assert on_segment(Vec2(1, 4), a, b)
    assert on_segment(Vec2(1, 0), b, a)
    assert not on_segment(Vec2(1, 5), a, b)
    assert not on_segment(Vec2(1, -1), a, b)


def test_segments_crossing():
    assert segments_intersect(Vec2(0, 0), Vec2(4, 4), Vec2(0, 4), Vec2(4, 0))
    assert not segments_intersect(Vec2(0, 0), Vec2(1, 1), Vec2(0, 4), Vec2(4, 0))
    assert not segments_intersect(Vec2(0, 0), Vec2(4, 0), Vec2(0, 1), Vec2(4, 1))


@pytest.mark.parametrize(
    "a, b, c, d",
    [
        ((0, 0), (4, 0), (4, 0), (6, 3)),  # c touches the end of ab
        ((0, 0), (4, 0), (6, 3), (2, 0)),  # d lies inside ab
        ((2, 0), (2, 3), (0, 0), (4, 0)),  # a lies on cd
        ((2, 3), (2, 0), (0, 0), (4, 0)),  # b lies on cd
        ((0, 0), (4, 0), (2, 0), (6, 0)),  # collinear overlap
    ],
)
def test_segments_touching(a, b, c, d):
    assert segments_intersect(Vec2(*a), Vec2(*b), Vec2(*c), Vec2(*d))


def test_collinear_disjoint_segments():
    assert not segments_intersect(Vec2(0, 0), Vec2(2, 0), Vec2(3, 0), Vec2(5, 0))
    assert not segments_intersect(Vec2(3, 0), Vec2(5, 0), Vec2(0, 0), Vec2(2, 0))


def test_areas():
    assert signed_area(SQUARE) == 16
    assert signed_area(SQUARE[::-1]) == -16
    assert polygon_area(SQUARE[::-1]) == 16
    assert polygon_area(L_SHAPE) == 12
    assert polygon_area([Vec2(0, 0), Vec2(3, 0), Vec2(0, 2)]) == 3


def test_polygon_centroid():
    assert polygon_centroid(SQUARE) == Vec2(2, 2)
    assert polygon_centroid(SQUARE[::-1]) == Vec2(2, 2)
    assert polygon_centroid([Vec2(0, 0), Vec2(6, 0), Vec2(0, 3)]) == Vec2(2, 1)
    assert polygon_centroid([Vec2(2, 2), Vec2(8, 2), Vec2(8, 5), Vec2(2, 5)]) == Vec2(5, 3.5)
    with pytest.raises(ValueError):
        polygon_centroid([Vec2(0, 0), Vec2(1, 1), Vec2(2, 2)])


def test_is_convex():
    assert is_convex(SQUARE)
    assert is_convex(SQUARE[::-1])
    assert is_convex([Vec2(0, 0), Vec2(2, 0), Vec2(4, 0), Vec2(4, 4), Vec2(0, 4)])
    assert is_convex([Vec2(0, 0), Vec2(3, 0), Vec2(0, 3)])
    assert not is_convex(L_SHAPE)
    assert not is_convex([Vec2(0, 0), Vec2(1, 1), Vec2(2, 2)])
    assert not is_convex([Vec2(0, 0), Vec2(1, 1)])


def test_contains_point_inside_outside_and_boundary():
    assert contains_point(SQUARE, Vec2(1, 1))
    assert contains_point(SQUARE, Vec2(0, 2))
    assert contains_point(SQUARE, Vec2(4, 4))
    assert not contains_point(SQUARE, Vec2(5, 2))
    assert not contains_point(SQUARE, Vec2(-1, 2))
    assert not contains_point(SQUARE, Vec2(2, 5))


def test_contains_point_with_ray_along_an_edge():
    assert not contains_point(SQUARE, Vec2(-1, 0))
    assert not contains_point(SQUARE, Vec2(-1, 4))
    assert contains_point(L_SHAPE, Vec2(1, 2))
    assert not contains_point(L_SHAPE, Vec2(-1, 2))


def test_contains_point_concave():
    assert contains_point(L_SHAPE, Vec2(1, 3))
    assert contains_point(L_SHAPE, Vec2(3, 1))
    assert not contains_point(L_SHAPE, Vec2(3, 3))
    assert not contains_point(L_SHAPE, Vec2(-1, 3))
    assert not contains_point(L_SHAPE, Vec2(-1, 1))


def test_contains_point_slanted_edges():
    tri = [Vec2(0, 0), Vec2(8, 0), Vec2(0, 8)]
    assert contains_point(tri, Vec2(1, 6))
    assert contains_point(tri, Vec2(5, 2))
    assert not contains_point(tri, Vec2(5, 4))
    assert not contains_point(tri, Vec2(7, 2))
    kite = [Vec2(4, 0), Vec2(8, 4), Vec2(4, 8), Vec2(2, 4)]
    assert contains_point(kite, Vec2(6, 3))
    assert contains_point(kite, Vec2(3, 5))
    assert not contains_point(kite, Vec2(2, 1))
    assert not contains_point(kite, Vec2(7, 6))


def test_convex_hull():
    pts = [Vec2(0, 0), Vec2(4, 0), Vec2(4, 4), Vec2(0, 4), Vec2(2, 2), Vec2(1, 3), Vec2(2, 0)]
    assert convex_hull(pts) == [Vec2(0, 0), Vec2(4, 0), Vec2(4, 4), Vec2(0, 4)]


def test_convex_hull_small_inputs():
    assert convex_hull([]) == []
    assert convex_hull([Vec2(1, 1), Vec2(1, 1)]) == [Vec2(1, 1)]
    assert convex_hull([Vec2(3, 0), Vec2(1, 1)]) == [Vec2(1, 1), Vec2(3, 0)]
    tri = [Vec2(0, 0), Vec2(0, 3), Vec2(3, 0)]
    assert convex_hull(tri) == [Vec2(0, 0), Vec2(3, 0), Vec2(0, 3)]


def test_convex_hull_collinear_points():
    line = [Vec2(0, 0), Vec2(1, 1), Vec2(2, 2), Vec2(3, 3)]
    assert convex_hull(line) == [Vec2(0, 0), Vec2(3, 3)]
