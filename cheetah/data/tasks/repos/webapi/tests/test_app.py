from webapi.app import App
from webapi.http import Request


def post(app, body):
    return app.handle(Request.build("POST", "/bookmarks", body))


def test_create_and_get():
    app = App()
    resp = post(app, {"url": "https://a.org", "title": " A ", "tags": ["x", "x"]})
    assert resp.status == 201
    assert resp.data() == {"id": 1, "url": "https://a.org", "title": "A", "tags": ["x"]}
    assert app.handle(Request.build("GET", "/bookmarks/1")).data()["title"] == "A"


def test_create_rejects_bad_url():
    resp = post(App(), {"url": "ftp://x"})
    assert resp.status == 422
    assert "url" in resp.data()["error"]


def test_duplicate_url_conflicts():
    app = App()
    post(app, {"url": "https://a.org"})
    assert post(app, {"url": "https://a.org"}).status == 409


def test_pagination():
    app = App()
    for i in range(25):
        post(app, {"url": f"https://site{i}.org"})
    resp = app.handle(Request.build("GET", "/bookmarks?page=3&size=10"))
    data = resp.data()
    assert data["total"] == 25
    assert [b["id"] for b in data["items"]] == [21, 22, 23, 24, 25]


def test_delete_then_404():
    app = App()
    post(app, {"url": "https://a.org"})
    assert app.handle(Request.build("DELETE", "/bookmarks/1")).status == 204
    assert app.handle(Request.build("GET", "/bookmarks/1")).status == 404


def test_by_tag():
    app = App()
    post(app, {"url": "https://a.org", "tags": ["py"]})
    post(app, {"url": "https://b.org", "tags": ["go"]})
    assert app.handle(Request.build("GET", "/tags/py")).data()["total"] == 1
