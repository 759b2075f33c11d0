"""Two-dimensional vectors (also used as points)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Vec2:
    """A vector or point in the plane."""

    x: float
    y: float

    def __add__(self, other: Vec2) -> Vec2:
        """Component-wise sum."""
        return Vec2(self.x + other.x, self.y + other.y)

    def __sub__(self, other: Vec2) -> Vec2:
        """Component-wise difference."""
        return Vec2(self.x - other.x, self.y - other.y)

    def scaled(self, k: float) -> Vec2:
        """The vector multiplied by the scalar ``k``."""
        return Vec2(self.x * k, self.y * k)

    def dot(self, other: Vec2) -> float:
        """The dot product."""
        return self.x * other.x + self.y * other.y

    def cross(self, other: Vec2) -> float:
        """The z component of the 3-D cross product (signed parallelogram area)."""
        return self.x * other.y - self.y * other.x

    def length_sq(self) -> float:
        """The squared Euclidean length."""
        return self.x * self.x + self.y * self.y

    def length(self) -> float:
        """The Euclidean length."""
        return math.sqrt(self.length_sq())

    def is_zero(self) -> bool:
        """Whether both components are zero."""
        return self.x == 0 and self.y == 0

    def normalized(self) -> Vec2:
        """The unit vector in the same direction."""
        if self.is_zero():
            raise ValueError("the zero vector has no direction")
        n = self.length()
        return Vec2(self.x / n, self.y / n)

    def distance_to(self, other: Vec2) -> float:
        """Euclidean distance between two points."""
        return (other - self).length()

    def manhattan_to(self, other: Vec2) -> float:
        """Taxicab distance between two points."""
        return abs(self.x - other.x) + abs(self.y - other.y)

    def lerp(self, other: Vec2, t: float) -> Vec2:
        """The point a fraction ``t`` of the way from this point to ``other``."""
        return self + (other - self).scaled(t)

    def project_onto(self, axis: Vec2) -> Vec2:
        """The component of this vector along ``axis``."""
        denom = axis.length_sq()
        if denom == 0:
            raise ValueError("cannot project onto the zero vector")
        return axis.scaled(self.dot(axis) / denom)

    def quadrant(self) -> int:
        """Quadrant 1-4 by angle: [0, 90) degrees is 1, [90, 180) is 2, and so on; 0 for
        the origin. So the positive x axis is in 1 and the positive y axis in 2."""
        if self.is_zero():
            return 0
        if self.x > 0 and self.y >= 0:
            return 1
        if self.x <= 0 and self.y > 0:
            return 2
        if self.x < 0 and self.y <= 0:
            return 3
        return 4

    def is_parallel(self, other: Vec2) -> bool:
        """Whether the vectors lie on one line through the origin."""
        return self.cross(other) == 0

    def same_direction(self, other: Vec2) -> bool:
        """Whether the vectors are parallel and point the same way (neither zero)."""
        return self.is_parallel(other) and self.dot(other) > 0


def nearest_index(points: list[Vec2], target: Vec2) -> int:
    """Index of the point closest to ``target`` (the first one on ties); -1 if none."""
    best = -1
    best_d = 0.0
    for i, p in enumerate(points):
        d = (p - target).length_sq()
        if best == -1 or d < best_d:
            best = i
            best_d = d
    return best
