"""Segments and simple polygons given as lists of ``Vec2`` vertices."""

from __future__ import annotations

from collections.abc import Sequence

from shapes.vector import Vec2


def orientation(a: Vec2, b: Vec2, c: Vec2) -> int:
    """1 if a, b, c turn counter-clockwise, -1 if clockwise, 0 if collinear."""
    turn = (b - a).cross(c - a)
    if turn > 0:
        return 1
    if turn < 0:
        return -1
    return 0


def on_segment(p: Vec2, a: Vec2, b: Vec2) -> bool:
    """Whether ``p`` lies on the closed segment from ``a`` to ``b``."""
    if orientation(a, b, p) != 0:
        return False
    return (
        min(a.x, b.x) <= p.x
        and p.x <= max(a.x, b.x)
        and min(a.y, b.y) <= p.y
        and p.y <= max(a.y, b.y)
    )


def segments_intersect(a: Vec2, b: Vec2, c: Vec2, d: Vec2) -> bool:
    """Whether the closed segments ab and cd share at least one point."""
    o1 = orientation(a, b, c)
    o2 = orientation(a, b, d)
    o3 = orientation(c, d, a)
    o4 = orientation(c, d, b)
    if o1 != o2 and o3 != o4:
        return True
    # Otherwise they can only meet if an endpoint of one lies on the other.
    return on_segment(c, a, b) or on_segment(d, a, b) or on_segment(a, c, d) or on_segment(b, c, d)


def signed_area(poly: Sequence[Vec2]) -> float:
    """Shoelace area: positive for counter-clockwise vertex order, negative otherwise."""
    n = len(poly)
    twice = 0.0
    for i in range(n):
        j = (i + 1) % n
        twice += poly[i].x * poly[j].y - poly[j].x * poly[i].y
    return twice / 2


def polygon_area(poly: Sequence[Vec2]) -> float:
    """Unsigned area of a simple polygon."""
    return abs(signed_area(poly))


def polygon_centroid(poly: Sequence[Vec2]) -> Vec2:
    """Centre of mass of a simple polygon of non-zero area."""
    area = signed_area(poly)
    if area == 0:
        raise ValueError("degenerate polygon has no centroid")
    n = len(poly)
    cx = 0.0
    cy = 0.0
    for i in range(n):
        p, q = poly[i], poly[(i + 1) % n]
        w = p.x * q.y - q.x * p.y
        cx += (p.x + q.x) * w
        cy += (p.y + q.y) * w
    return Vec2(cx / (6 * area), cy / (6 * area))


def is_convex(poly: Sequence[Vec2]) -> bool:
    """Whether the polygon is convex (collinear vertices allowed, at least 3 needed)."""
    n = len(poly)
    if n < 3:
        return False
    sign = 0
    for i in range(n):
        turn = orientation(poly[i], poly[(i + 1) % n], poly[(i + 2) % n])
        if turn == 0:
            continue
        if sign == 0:
            sign = turn
        elif turn != sign:
            return False
    return sign != 0


def contains_point(poly: Sequence[Vec2], p: Vec2) -> bool:
    """Whether ``p`` is inside the polygon or on its boundary (even-odd rule)."""
    n = len(poly)
    inside = False
    for i in range(n):
        a, b = poly[i], poly[(i + 1) % n]
        if on_segment(p, a, b):
            return True
        if (a.y > p.y) != (b.y > p.y):
            x_cross = a.x + (p.y - a.y) * (b.x - a.x) / (b.y - a.y)
            if p.x < x_cross:
                inside = not inside
    return inside


def convex_hull(points: Sequence[Vec2]) -> list[Vec2]:
    """Counter-clockwise convex hull starting at the leftmost (then lowest) point; points
    lying on a hull edge are left out."""
    pts = sorted(set(points), key=lambda v: (v.x, v.y))
    if len(pts) < 3:
        return pts

    def half(seq: list[Vec2]) -> list[Vec2]:
        chain: list[Vec2] = []
        for p in seq:
            while len(chain) >= 2 and orientation(chain[-2], chain[-1], p) <= 0:
                chain.pop()
            chain.append(p)
        return chain

    lower = half(pts)
    upper = half(pts[::-1])
    return lower[:-1] + upper[:-1]
