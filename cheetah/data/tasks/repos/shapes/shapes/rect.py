"""Axis-aligned rectangles."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from shapes.vector import Vec2


@dataclass(frozen=True)
class Rect:
    """The closed rectangle [left, right] x [bottom, top] (y grows upwards)."""

    left: float
    bottom: float
    right: float
    top: float

    def __post_init__(self) -> None:
        if self.left > self.right or self.bottom > self.top:
            raise ValueError(f"inverted rectangle {self}")

    @property
    def width(self) -> float:
        """Horizontal extent."""
        return self.right - self.left

    @property
    def height(self) -> float:
        """Vertical extent."""
        return self.top - self.bottom

    def area(self) -> float:
        """Width times height."""
        return self.width * self.height

    def perimeter(self) -> float:
        """Length of the boundary."""
        return 2 * (self.width + self.height)

    def center(self) -> Vec2:
        """The middle point."""
        return Vec2((self.left + self.right) / 2, (self.bottom + self.top) / 2)

    def aspect_ratio(self) -> float:
        """Width divided by height."""
        if self.height == 0:
            raise ValueError("a flat rectangle has no aspect ratio")
        return self.width / self.height

    def contains_point(self, p: Vec2) -> bool:
        """Whether ``p`` lies inside or on the boundary."""
        return self.left <= p.x and p.x <= self.right and self.bottom <= p.y and p.y <= self.top

    def contains_pixel(self, p: Vec2) -> bool:
        """Half-open test, as for pixels: left and bottom edges in, right and top out."""
        return self.left <= p.x and p.x < self.right and self.bottom <= p.y and p.y < self.top

    def intersects(self, other: Rect) -> bool:
        """Whether the interiors overlap (an overlap of positive area)."""
        return (
            self.left < other.right
            and other.left < self.right
            and self.bottom < other.top
            and other.bottom < self.top
        )

    def intersection(self, other: Rect) -> Rect | None:
        """The common part (possibly flat when only edges touch), or None if disjoint."""
        left = max(self.left, other.left)
        right = min(self.right, other.right)
        bottom = max(self.bottom, other.bottom)
        top = min(self.top, other.top)
        if left > right or bottom > top:
            return None
        return Rect(left, bottom, right, top)

    def touches(self, other: Rect) -> bool:
        """Whether the rectangles meet only along their boundaries."""
        return self.intersection(other) is not None and not self.intersects(other)

    def iou(self, other: Rect) -> float:
        """Intersection area over union area (0.0 when both areas are zero)."""
        common = self.intersection(other)
        inter = common.area() if common is not None else 0.0
        total = self.area() + other.area() - inter
        if total == 0:
            return 0.0
        return inter / total

    def expanded(self, margin: float) -> Rect:
        """The rectangle grown by ``margin`` on every side (shrunk when negative)."""
        if self.width + 2 * margin < 0 or self.height + 2 * margin < 0:
            raise ValueError(f"margin {margin} collapses {self}")
        return Rect(
            self.left - margin, self.bottom - margin, self.right + margin, self.top + margin
        )

    def distance_to_point(self, p: Vec2) -> float:
        """Euclidean distance from ``p`` to the nearest point of the rectangle."""
        dx = max(self.left - p.x, 0.0, p.x - self.right)
        dy = max(self.bottom - p.y, 0.0, p.y - self.top)
        return math.hypot(dx, dy)

    def cell_of(self, p: Vec2, size: float) -> tuple[int, int]:
        """(column, row) of the grid cell holding ``p`` in a grid of ``size``-sized square
        cells anchored at the lower-left corner; negative left of or below the corner."""
        if size <= 0:
            raise ValueError("cell size must be positive")
        return int((p.x - self.left) // size), int((p.y - self.bottom) // size)


def bounding_box(points: Sequence[Vec2]) -> Rect:
    """The smallest rectangle holding every point of a non-empty sequence."""
    if len(points) == 0:
        raise ValueError("bounding box of no points")
    xs = [p.x for p in points]
    ys = [p.y for p in points]
    return Rect(min(xs), min(ys), max(xs), max(ys))
