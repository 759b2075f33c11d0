import pytest

from webapi.http import HTTPError, Request, Response
from webapi.router import Router, compile_pattern


def ok(request, **params):
    return Response.json(params)


def test_compile_pattern_int():
    regex, conv = compile_pattern("/items/<int:id>")
    m = regex.match("/items/42")
    assert m and conv["id"](m["id"]) == 42
    assert not regex.match("/items/abc")


def test_match_converts_params():
    r = Router()
    r.add("GET", "/users/<int:uid>/posts/<slug:post>", ok)
    handler, params = r.match(Request.build("GET", "/users/7/posts/hello-world"))
    assert params == {"uid": 7, "post": "hello-world"}


def test_405_lists_allowed_methods():
    r = Router()
    r.add("GET", "/a", ok)
    with pytest.raises(HTTPError) as e:
        r.match(Request.build("POST", "/a"))
    assert e.value.status == 405


def test_404():
    with pytest.raises(HTTPError) as e:
        Router().match(Request.build("GET", "/nothing"))
    assert e.value.status == 404
