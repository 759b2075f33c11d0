"""Route requests by method and path pattern, e.g. ``/bookmarks/<id:int>``."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from webapi.http import HTTPError, Request, Response

Handler = Callable[..., Response]
_PARAM = re.compile(r"<(?:(\w+):)?(\w+)>")
_CONVERTERS: dict[str, tuple[str, Callable[[str], object]]] = {
    "str": (r"[^/]+", str),
    "int": (r"-?\d+", int),
    "slug": (r"[a-z0-9-]+", str),
}


@dataclass
class Route:
    method: str
    pattern: str
    regex: re.Pattern[str]
    converters: dict[str, Callable[[str], object]]
    handler: Handler


def compile_pattern(pattern: str) -> tuple[re.Pattern[str], dict[str, Callable[[str], object]]]:
    """A regex for ``pattern`` and the converter of each parameter."""
    converters: dict[str, Callable[[str], object]] = {}
    regex = ""
    pos = 0
    for m in _PARAM.finditer(pattern):
        kind, name = m.group(1) or "str", m.group(2)
        if kind not in _CONVERTERS:
            raise ValueError(f"unknown converter {kind!r} in {pattern!r}")
        part, convert = _CONVERTERS[kind]
        regex += re.escape(pattern[pos : m.start()]) + f"(?P<{name}>{part})"
        converters[name] = convert
        pos = m.end()
    regex += re.escape(pattern[pos:])
    return re.compile(f"^{regex}$"), converters


class Router:
    def __init__(self) -> None:
        self.routes: list[Route] = []

    def add(self, method: str, pattern: str, handler: Handler) -> None:
        regex, converters = compile_pattern(pattern)
        self.routes.append(Route(method.upper(), pattern, regex, converters, handler))

    def route(self, method: str, pattern: str) -> Callable[[Handler], Handler]:
        def decorator(handler: Handler) -> Handler:
            self.add(method, pattern, handler)
            return handler

        return decorator

    def match(self, request: Request) -> tuple[Handler, dict[str, object]]:
        """The handler and converted path parameters; 404 or 405 when nothing matches."""
        allowed = []
        for route in self.routes:
            m = route.regex.match(request.path)
            if not m:
                continue
            if route.method != request.method:
                allowed.append(route.method)
                continue
            params = {k: route.converters[k](v) for k, v in m.groupdict().items()}
            return route.handler, params
        if allowed:
            raise HTTPError(405, f"method {request.method} not allowed; use {', '.join(allowed)}")
        raise HTTPError(404, f"no route for {request.path}")
