"""The bookmarks service: an in-memory store and its JSON handlers."""

from __future__ import annotations

from webapi.http import HTTPError, Request, Response
from webapi.router import Router

MAX_PAGE_SIZE = 50


def validate_bookmark(data: object) -> dict[str, object]:
    """The fields of a new bookmark, or HTTP 422 naming the bad field."""
    if not isinstance(data, dict):
        raise HTTPError(422, "body must be a JSON object")
    url = data.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise HTTPError(422, "url: must be an http(s) URL")
    title = data.get("title", url)
    if not isinstance(title, str) or not title.strip():
        raise HTTPError(422, "title: must be a non-empty string")
    tags = data.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise HTTPError(422, "tags: must be a list of strings")
    return {"url": url, "title": title.strip(), "tags": sorted(set(tags))}


class App:
    def __init__(self) -> None:
        self.bookmarks: dict[int, dict[str, object]] = {}
        self.next_id = 1
        self.router = Router()
        r = self.router
        r.add("GET", "/bookmarks", self.list_bookmarks)
        r.add("POST", "/bookmarks", self.create_bookmark)
        r.add("GET", "/bookmarks/<int:id>", self.get_bookmark)
        r.add("DELETE", "/bookmarks/<int:id>", self.delete_bookmark)
        r.add("GET", "/tags/<slug:tag>", self.by_tag)

    def handle(self, request: Request) -> Response:
        try:
            handler, params = self.router.match(request)
            return handler(request, **params)
        except HTTPError as e:
            return Response.json({"error": e.message}, status=e.status)

    def _find(self, id: int) -> dict[str, object]:
        if id not in self.bookmarks:
            raise HTTPError(404, f"no bookmark {id}")
        return self.bookmarks[id]

    def list_bookmarks(self, request: Request) -> Response:
        try:
            page = int(request.arg("page", "1"))
            size = int(request.arg("size", "10"))
        except ValueError:
            raise HTTPError(400, "page and size must be integers") from None
        if page < 1 or size < 1:
            raise HTTPError(400, "page and size must be positive")
        size = min(size, MAX_PAGE_SIZE)
        items = sorted(self.bookmarks.values(), key=lambda b: b["id"])
        start = (page - 1) * size
        return Response.json({"items": items[start : start + size], "total": len(items)})

    def create_bookmark(self, request: Request) -> Response:
        fields = validate_bookmark(request.json())
        if any(b["url"] == fields["url"] for b in self.bookmarks.values()):
            raise HTTPError(409, f"url already bookmarked: {fields['url']}")
        bookmark = {"id": self.next_id, **fields}
        self.bookmarks[self.next_id] = bookmark
        self.next_id += 1
        return Response.json(bookmark, status=201)

    def get_bookmark(self, request: Request, id: int) -> Response:
        return Response.json(self._find(id))

    def delete_bookmark(self, request: Request, id: int) -> Response:
        self._find(id)
        del self.bookmarks[id]
        return Response(status=204)

    def by_tag(self, request: Request, tag: str) -> Response:
        items = [b for b in self.bookmarks.values() if tag in b["tags"]]
        return Response.json({"items": items, "total": len(items)})
