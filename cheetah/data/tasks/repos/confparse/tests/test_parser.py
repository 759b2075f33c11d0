import pytest

from confparse import ConfigError, load
from confparse.parser import parse_raw

SAMPLE = """\
# global settings
name = demo

[server]
host = example.org   ; the public name
port = 8080
timeout = 1m30s
debug = yes

[paths]
roots = /srv/a,
    /srv/b
"""


def test_load_sections_and_types():
    cfg = load(SAMPLE)
    assert cfg["DEFAULT"] == {"name": "demo"}
    assert cfg["server"] == {"host": "example.org", "port": 8080, "timeout": 90.0, "debug": True}


def test_continuation_lines_join():
    assert parse_raw(SAMPLE)["paths"]["roots"] == "/srv/a, /srv/b"


def test_keys_are_lowercased():
    assert load("[s]\nMaxSize = 3\n")["s"] == {"maxsize": 3}


def test_hash_inside_quotes_is_kept():
    assert load('[s]\ncolor = "#ff0000"  # red\n')["s"]["color"] == "#ff0000"


def test_errors_name_the_line():
    with pytest.raises(ConfigError) as e:
        load("[ok]\na = 1\nnot a pair\n")
    assert e.value.line == 3
    with pytest.raises(ConfigError):
        load("[broken\n")
