"""Plane geometry on plain numbers: intervals, vectors, rectangles and polygons."""

from shapes.interval import Interval, merge
from shapes.polygon import convex_hull, polygon_area
from shapes.rect import Rect
from shapes.vector import Vec2

__all__ = ["Interval", "Rect", "Vec2", "convex_hull", "merge", "polygon_area"]
__version__ = "0.1.0"
