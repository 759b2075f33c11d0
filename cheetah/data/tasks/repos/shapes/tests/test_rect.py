import pytest

from shapes.rect import Rect, bounding_box
from shapes.vector import Vec2


def test_construction_rejects_inverted_rectangles():
    with pytest.raises(ValueError):
        Rect(2, 0, 1, 5)
    with pytest.raises(ValueError):
        Rect(0, 5, 1, 4)
    assert Rect(1, 1, 1, 1).width == 0


def test_size_area_perimeter():
    r = Rect(1, 2, 5, 8)
    assert r.width == 4
    assert r.height == 6
    assert r.area() == 24
    assert r.perimeter() == 20


def test_center():
    assert Rect(1, 2, 5, 8).center() == Vec2(3, 5)
    assert Rect(-4, -2, 0, 0).center() == Vec2(-2, -1)


def test_aspect_ratio():
    assert Rect(0, 0, 6, 3).aspect_ratio() == 2
    assert Rect(0, 0, 3, 6).aspect_ratio() == 0.5
    with pytest.raises(ValueError):
        Rect(0, 0, 4, 0).aspect_ratio()


def test_contains_point_is_closed():
    r = Rect(0, 0, 4, 3)
    for p in [Vec2(0, 0), Vec2(4, 3), Vec2(4, 0), Vec2(0, 3), Vec2(2, 1)]:
        assert r.contains_point(p)
    for p in [Vec2(-1, 1), Vec2(5, 1), Vec2(2, -1), Vec2(2, 4)]:
        assert not r.contains_point(p)


def test_contains_pixel_is_half_open():
    r = Rect(0, 0, 4, 3)
    assert r.contains_pixel(Vec2(0, 0))
    assert r.contains_pixel(Vec2(3, 2))
    assert not r.contains_pixel(Vec2(4, 1))
    assert not r.contains_pixel(Vec2(1, 3))
    assert not r.contains_pixel(Vec2(-1, 1))
    assert not r.contains_pixel(Vec2(1, -1))


def test_intersects_needs_positive_area():
    a = Rect(0, 0, 4, 4)
    assert a.intersects(Rect(3, 3, 6, 6))
    assert Rect(3, 3, 6, 6).intersects(a)
    assert not a.intersects(Rect(4, 0, 6, 4))
    assert not Rect(4, 0, 6, 4).intersects(a)
    assert not a.intersects(Rect(0, 4, 4, 6))
    assert not Rect(0, 4, 4, 6).intersects(a)


def test_intersection():
    a = Rect(0, 0, 4, 4)
    assert a.intersection(Rect(2, 1, 6, 3)) == Rect(2, 1, 4, 3)
    assert a.intersection(Rect(4, 1, 6, 3)) == Rect(4, 1, 4, 3)
    assert a.intersection(Rect(1, 4, 2, 9)) == Rect(1, 4, 2, 4)
    assert a.intersection(Rect(5, 1, 6, 3)) is None
    assert a.intersection(Rect(1, 5, 2, 9)) is None


def test_touches():
    a = Rect(0, 0, 4, 4)
    assert a.touches(Rect(4, 4, 5, 5))
    assert a.touches(Rect(4, 1, 5, 2))
    assert not a.touches(Rect(3, 3, 5, 5))
    assert not a.touches(Rect(5, 5, 6, 6))


def test_iou():
    a = Rect(0, 0, 4, 4)
    assert a.iou(Rect(2, 0, 6, 4)) == 8 / 24
    assert a.iou(a) == 1
    assert a.iou(Rect(5, 5, 6, 6)) == 0
    assert Rect(1, 1, 1, 1).iou(Rect(1, 1, 1, 1)) == 0


def test_expanded_and_shrunk():
    r = Rect(0, 0, 4, 2)
    assert r.expanded(1) == Rect(-1, -1, 5, 3)
    assert r.expanded(3) == Rect(-3, -3, 7, 5)
    assert r.expanded(-1) == Rect(1, 1, 3, 1)
    assert Rect(0, 0, 2, 4).expanded(-1) == Rect(1, 1, 1, 3)


def test_expanded_rejects_collapsing_margin():
    with pytest.raises(ValueError, match="collapses"):
        Rect(0, 0, 4, 2).expanded(-1.5)
    with pytest.raises(ValueError, match="collapses"):
        Rect(0, 0, 2, 4).expanded(-1.5)


def test_distance_to_point():
    r = Rect(0, 0, 4, 2)
    assert r.distance_to_point(Vec2(1, 1)) == 0
    assert r.distance_to_point(Vec2(7, 1)) == 3
    assert r.distance_to_point(Vec2(-2, 1)) == 2
    assert r.distance_to_point(Vec2(1, 5)) == 3
    assert r.distance_to_point(Vec2(1, -4)) == 4
    assert r.distance_to_point(Vec2(7, 6)) == 5
    assert r.distance_to_point(Vec2(-3, -4)) == 5


def test_cell_of():
    r = Rect(10, 20, 20, 30)
    assert r.cell_of(Vec2(10, 20), 3) == (0, 0)
    assert r.cell_of(Vec2(17, 26), 3) == (2, 2)
    assert r.cell_of(Vec2(19, 29), 2) == (4, 4)
    assert r.cell_of(Vec2(15, 25), 0.5) == (10, 10)


def test_cell_of_outside_the_corner_is_negative():
    r = Rect(10, 20, 20, 30)
    assert r.cell_of(Vec2(9, 19), 3) == (-1, -1)
    assert r.cell_of(Vec2(3, 26), 3) == (-3, 2)
    with pytest.raises(ValueError):
        r.cell_of(Vec2(15, 25), 0)


def test_bounding_box():
    pts = [Vec2(3, -1), Vec2(-2, 4), Vec2(0, 0)]
    assert bounding_box(pts) == Rect(-2, -1, 3, 4)
    assert bounding_box([Vec2(1, 2)]) == Rect(1, 2, 1, 2)
    with pytest.raises(ValueError):
        bounding_box([])
