import pytest

from webapi.http import HTTPError, Request, Response, parse_query


def test_parse_query_repeats_and_plus():
    assert parse_query("a=1&b=x+y&a=2") == {"a": ["1", "2"], "b": ["x y"]}


def test_parse_query_flag_and_escape():
    assert parse_query("flag&name=caf%C3%A9") == {"flag": [""], "name": ["café"]}


def test_request_build_and_arg():
    req = Request.build("get", "/x?page=2", None)
    assert req.method == "GET"
    assert req.arg("page") == "2"
    assert req.arg("missing", "d") == "d"


def test_request_json_errors():
    with pytest.raises(HTTPError) as e:
        Request("POST", "/", body=b"{nope").json()
    assert e.value.status == 400


def test_response_json_and_reason():
    resp = Response.json({"a": 1}, status=201)
    assert resp.data() == {"a": 1}
    assert resp.reason == "Created"
