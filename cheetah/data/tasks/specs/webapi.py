"""Tasks on benchmarks/repos/webapi (routing and JSON request handlers)."""

from build import Bug, Change, WriteTests

R = "webapi"

VALIDATION = '''"""Validation of bookmark fields; each failure is HTTP 422 naming the field."""

from __future__ import annotations

from webapi.http import HTTPError


def validate_url(url: object) -> str:
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise HTTPError(422, "url: must be an http(s) URL")
    return url


def validate_title(title: object) -> str:
    if not isinstance(title, str) or not title.strip():
        raise HTTPError(422, "title: must be a non-empty string")
    return title.strip()


def validate_tags(tags: object) -> list[str]:
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise HTTPError(422, "tags: must be a list of strings")
    return sorted(set(tags))


def validate_bookmark(data: object) -> dict[str, object]:
    """The fields of a new bookmark, or HTTP 422 naming the bad field."""
    if not isinstance(data, dict):
        raise HTTPError(422, "body must be a JSON object")
    url = validate_url(data.get("url"))
    return {
        "url": url,
        "title": validate_title(data.get("title", url)),
        "tags": validate_tags(data.get("tags", [])),
    }
'''

OLD_VALIDATE = '''def validate_bookmark(data: object) -> dict[str, object]:
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


'''

TASKS = [
    Bug(
        id="webapi-method-upper",
        repo=R,
        tier="easy",
        query="Request.build in webapi/http.py must upper-case the method: "
        "Request.build('get', '/x') should have method 'GET'. Fix it.",
        file="webapi/http.py",
        good="return cls(method.upper(), path, parse_query(query), raw, headers)",
        bad="return cls(method, path, parse_query(query), raw, headers)",
    ),
    Bug(
        id="webapi-page-size-cap",
        repo=R,
        tier="easy",
        query="list_bookmarks in webapi/app.py should cap the page size at MAX_PAGE_SIZE, "
        "but it takes the larger of the two numbers. Fix it.",
        file="webapi/app.py",
        good="size = min(size, MAX_PAGE_SIZE)",
        bad="size = max(size, MAX_PAGE_SIZE)",
    ),
    Bug(
        id="webapi-query-decoding",
        repo=R,
        tier="easy",
        query="parse_query in webapi/http.py does not decode values: 'b=x+y' should give "
        "'x y' and 'name=caf%C3%A9' should give 'café'. Keys are decoded already. Fix it.",
        file="webapi/http.py",
        good="params.setdefault(unquote_plus(key), []).append(unquote_plus(value))",
        bad="params.setdefault(unquote_plus(key), []).append(value)",
    ),
    Bug(
        id="webapi-created-reason",
        repo=R,
        tier="easy",
        split="heldout",
        query="Response(201).reason in webapi/http.py should be 'Created' but it is "
        "something else. Fix the status text table.",
        file="webapi/http.py",
        good='201: "Created",',
        bad='201: "OK",',
    ),
    Bug(
        id="webapi-int-param-digits",
        repo=R,
        tier="easy",
        query="Routes with <int:...> parameters in webapi/router.py do not match numbers "
        "with more than one digit, like /items/42. Fix the int converter's pattern.",
        file="webapi/router.py",
        good='"int": (r"-?\\d+", int),',
        bad='"int": (r"-?\\d", int),',
    ),
    Bug(
        id="webapi-first-page",
        repo=R,
        query="GET /bookmarks?page=1 does not return the first bookmarks: the first page "
        "of results is skipped. Find the cause and fix it.",
        file="webapi/app.py",
        good="start = (page - 1) * size",
        bad="start = page * size",
    ),
    Bug(
        id="webapi-method-not-allowed",
        repo=R,
        split="heldout",
        query="A request with the wrong method for an existing path (POST /a when only GET "
        "/a exists) gets 404. It should get 405 Method Not Allowed, naming the allowed "
        "methods.",
        file="webapi/router.py",
        good="            if route.method != request.method:\n"
        "                allowed.append(route.method)\n                continue",
        bad="            if route.method != request.method:\n                continue",
    ),
    Change(
        id="webapi-patch-bookmark",
        repo=R,
        kind="feature",
        query="Add PATCH /bookmarks/<int:id> to webapi/app.py: the JSON body may hold "
        "'title' and/or 'tags' (validated like on create: 422 naming the field when bad); "
        "it updates the bookmark and returns it with status 200. Unknown ids give 404. "
        "The url cannot be changed (422 'url: cannot be changed' if given).",
        edits=[
            (
                "webapi/app.py",
                '        r.add("DELETE", "/bookmarks/<int:id>", self.delete_bookmark)',
                '        r.add("DELETE", "/bookmarks/<int:id>", self.delete_bookmark)\n'
                '        r.add("PATCH", "/bookmarks/<int:id>", self.update_bookmark)',
            ),
            (
                "webapi/app.py",
                "    def delete_bookmark(",
                "    def update_bookmark(self, request: Request, id: int) -> Response:\n"
                "        bookmark = self._find(id)\n"
                "        data = request.json()\n"
                "        if not isinstance(data, dict):\n"
                '            raise HTTPError(422, "body must be a JSON object")\n'
                '        if "url" in data:\n'
                '            raise HTTPError(422, "url: cannot be changed")\n'
                "        merged = {**bookmark, **data}\n"
                "        fields = validate_bookmark(merged)\n"
                '        bookmark.update(title=fields["title"], tags=fields["tags"])\n'
                "        return Response.json(bookmark)\n\n"
                "    def delete_bookmark(",
            ),
        ],
        hidden={
            "tests/test_patch.py": "from webapi.app import App\nfrom webapi.http import "
            "Request\n\n\n"
            "def make():\n"
            "    app = App()\n"
            '    app.handle(Request.build("POST", "/bookmarks", {"url": "https://a.org"}))\n'
            "    return app\n\n\n"
            "def test_patch_updates_title_and_tags():\n"
            "    app = make()\n"
            '    body = {"title": "New", "tags": ["b", "a", "a"]}\n'
            '    resp = app.handle(Request.build("PATCH", "/bookmarks/1", body))\n'
            "    assert resp.status == 200\n"
            '    assert resp.data() == {"id": 1, "url": "https://a.org", "title": "New", '
            '"tags": ["a", "b"]}\n'
            '    assert app.handle(Request.build("GET", "/bookmarks/1")).data()["title"] == "New"\n\n\n'
            "def test_patch_errors():\n"
            "    app = make()\n"
            '    assert app.handle(Request.build("PATCH", "/bookmarks/9", {"title": "x"})).status == 404\n'
            '    bad = app.handle(Request.build("PATCH", "/bookmarks/1", {"tags": "x"}))\n'
            '    assert bad.status == 422 and "tags" in bad.data()["error"]\n'
            '    url = app.handle(Request.build("PATCH", "/bookmarks/1", {"url": "https://b.org"}))\n'
            "    assert url.status == 422\n"
        },
    ),
    Change(
        id="webapi-search-param",
        repo=R,
        kind="feature",
        query="Add a search parameter to GET /bookmarks in webapi/app.py: ?q=TERM keeps only "
        "bookmarks whose title or url contains TERM, ignoring case. Pagination applies to "
        "the filtered list and 'total' counts the filtered bookmarks.",
        edits=[
            (
                "webapi/app.py",
                '        items = sorted(self.bookmarks.values(), key=lambda b: b["id"])\n',
                '        items = sorted(self.bookmarks.values(), key=lambda b: b["id"])\n'
                '        term = (request.arg("q") or "").lower()\n'
                "        if term:\n"
                "            items = [\n"
                "                b\n"
                "                for b in items\n"
                '                if term in str(b["title"]).lower() or term in str(b["url"]).lower()\n'
                "            ]\n",
            )
        ],
        hidden={
            "tests/test_search.py": "from webapi.app import App\nfrom webapi.http import "
            "Request\n\n\n"
            "def test_search_filters_and_paginates():\n"
            "    app = App()\n"
            "    for i in range(12):\n"
            '        title = "Python tips" if i % 2 else "Go notes"\n'
            '        app.handle(Request.build("POST", "/bookmarks", '
            '{"url": f"https://s{i}.org", "title": title}))\n'
            '    data = app.handle(Request.build("GET", "/bookmarks?q=PYTHON&size=4")).data()\n'
            '    assert data["total"] == 6\n'
            '    assert [b["id"] for b in data["items"]] == [2, 4, 6, 8]\n'
            '    assert app.handle(Request.build("GET", "/bookmarks?q=s3.org")).data()["total"] == 1\n'
        },
    ),
    Change(
        id="webapi-validation-module",
        repo=R,
        kind="refactor",
        query="Refactor: validate_bookmark in webapi/app.py does three checks in one "
        "function. Move bookmark validation into a new module webapi/validation.py with "
        "validate_url, validate_title and validate_tags (each returns the cleaned value or "
        "raises HTTPError 422 naming the field) and validate_bookmark built from them. "
        "app.py must use the new module; messages and statuses must not change.",
        edits=[
            ("webapi/app.py", OLD_VALIDATE, ""),
            (
                "webapi/app.py",
                "from webapi.router import Router\n",
                "from webapi.router import Router\nfrom webapi.validation import validate_bookmark\n",
            ),
            ("webapi/validation.py", None, VALIDATION),
        ],
        hidden={
            "tests/test_validation_module.py": "import pytest\n\nimport webapi.app\n"
            "from webapi.http import HTTPError\n"
            "from webapi.validation import validate_bookmark, validate_tags, validate_title, "
            "validate_url\n\n\n"
            "def test_validators():\n"
            '    assert validate_url("https://x") == "https://x"\n'
            '    assert validate_title(" t ") == "t"\n'
            '    assert validate_tags(["b", "a", "b"]) == ["a", "b"]\n'
            '    for fn, bad in ((validate_url, "ftp://x"), (validate_title, " "), (validate_tags, [1])):\n'
            "        with pytest.raises(HTTPError) as e:\n"
            "            fn(bad)\n"
            "        assert e.value.status == 422\n\n\n"
            "def test_app_uses_module():\n"
            "    assert webapi.app.validate_bookmark is validate_bookmark\n"
        },
    ),
    WriteTests(
        id="webapi-tests-compile-pattern",
        repo=R,
        query="Write tests for compile_pattern in webapi/router.py in a new file "
        "tests/test_patterns.py: str, int and slug parameters, literal parts that contain "
        "regex characters like '.', whole-path matching (no prefix matches), and an "
        "unknown converter raising ValueError.",
        test_file="tests/test_patterns.py",
        reference="import pytest\n\nfrom webapi.router import compile_pattern\n\n\n"
        "def test_slug_and_str():\n"
        '    regex, conv = compile_pattern("/p/<slug:s>/<name>")\n'
        '    assert regex.match("/p/hello-world/x y").groupdict() == {"s": "hello-world", "name": "x y"}\n'
        '    assert not regex.match("/p/Hello/x")\n\n\n'
        "def test_int_converts():\n"
        '    regex, conv = compile_pattern("/n/<int:n>")\n'
        '    assert conv["n"](regex.match("/n/-12")["n"]) == -12\n\n\n'
        "def test_literal_dot_and_whole_path():\n"
        '    regex, _ = compile_pattern("/file.txt")\n'
        '    assert regex.match("/file.txt")\n'
        '    assert not regex.match("/fileXtxt")\n'
        '    assert not regex.match("/file.txt/more")\n\n\n'
        "def test_unknown_converter():\n"
        "    with pytest.raises(ValueError):\n"
        '        compile_pattern("/<float:x>")\n',
        mutants=[
            ("webapi/router.py", '"slug": (r"[a-z0-9-]+", str),', '"slug": (r"[a-z0-9]+", str),'),
            (
                "webapi/router.py",
                'return re.compile(f"^{regex}$"), converters',
                'return re.compile(f"^{regex}"), converters',
            ),
            ("webapi/router.py", "regex += re.escape(pattern[pos:])", "regex += pattern[pos:]"),
            (
                "webapi/router.py",
                "        if kind not in _CONVERTERS:\n"
                '            raise ValueError(f"unknown converter {kind!r} in {pattern!r}")\n'
                "        part, convert = _CONVERTERS[kind]",
                '        part, convert = _CONVERTERS.get(kind, _CONVERTERS["str"])',
            ),
        ],
    ),
]
