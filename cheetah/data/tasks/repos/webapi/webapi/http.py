"""Requests, responses and query strings."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from urllib.parse import unquote_plus

STATUS_TEXT = {
    200: "OK",
    201: "Created",
    204: "No Content",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    422: "Unprocessable Entity",
}


class HTTPError(Exception):
    """Raised by handlers; the app turns it into a JSON error response."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def parse_query(query: str) -> dict[str, list[str]]:
    """``a=1&b=x+y&a=2`` -> ``{"a": ["1", "2"], "b": ["x y"]}``; keys without "=" get ""."""
    params: dict[str, list[str]] = {}
    for part in query.split("&"):
        if not part:
            continue
        key, _, value = part.partition("=")
        params.setdefault(unquote_plus(key), []).append(unquote_plus(value))
    return params


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]] = field(default_factory=dict)
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def build(cls, method: str, target: str, body: object = None) -> Request:
        """A request for ``target`` ("/path?query"); a non-None body is sent as JSON."""
        path, _, query = target.partition("?")
        raw = b"" if body is None else json.dumps(body).encode()
        headers = {"content-type": "application/json"} if body is not None else {}
        return cls(method.upper(), path, parse_query(query), raw, headers)

    def json(self) -> object:
        if not self.body:
            raise HTTPError(400, "request body is empty")
        try:
            return json.loads(self.body)
        except json.JSONDecodeError as e:
            raise HTTPError(400, f"request body is not JSON: {e.msg}") from None

    def arg(self, name: str, default: str | None = None) -> str | None:
        """The first value of a query parameter."""
        values = self.query.get(name)
        return values[0] if values else default


@dataclass
class Response:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, data: object, status: int = 200) -> Response:
        return cls(status, json.dumps(data).encode(), {"content-type": "application/json"})

    @property
    def reason(self) -> str:
        return STATUS_TEXT.get(self.status, "Unknown")

    def data(self) -> object:
        return json.loads(self.body) if self.body else None
