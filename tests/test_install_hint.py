"""Install hints name what this cheetah came from, never the unrelated `cheetah` on the index."""

import json
from importlib import metadata

from cheetah import install_hint
from cheetah.cli.doctor import EXTRAS, problems
from tests.conftest import REPO_ROOT


class _Dist:
    def __init__(self, direct_url):
        self.direct_url = direct_url

    def read_text(self, name):
        assert name == "direct_url.json"
        return None if self.direct_url is None else json.dumps(self.direct_url)


def _installed(monkeypatch, direct_url):
    monkeypatch.setattr(metadata, "distribution", lambda name: _Dist(direct_url))


def test_the_hint_names_the_checkout_or_wheel_pip_recorded_with_torch_first(monkeypatch):
    _installed(monkeypatch, {"url": "file:///home/me/src/cheetah", "dir_info": {"editable": True}})
    assert install_hint.extra_hint() == (
        "pip install torch==2.13.0 && pip install -e '/home/me/src/cheetah[ml]'"
    )
    _installed(monkeypatch, {"url": "file:///tmp/d/cheetah-0.1.0-py3-none-any.whl"})
    assert install_hint.extra_hint("trl") == (
        "pip install '/tmp/d/cheetah-0.1.0-py3-none-any.whl[trl]'"
    )
    _installed(monkeypatch, {"url": "file:///tmp/my%20src", "dir_info": {}})
    assert install_hint.extra_hint("trl") == "pip install '/tmp/my src[trl]'"


def test_without_a_record_the_source_tree_is_the_checkout(monkeypatch):
    _installed(monkeypatch, None)
    assert install_hint.installed_from() == (str(REPO_ROOT), True)


def test_no_hint_names_the_unrelated_index_project():
    report = {
        "sandbox": {"bwrap": "/usr/bin/bwrap", "isolated": True, "error": None,
                    "cgroup_v1_limits": ["memory"]},
        "torch": None,
        "precision": {},
        "extras": {group: dict.fromkeys(names, True) for group, names in EXTRAS.items()},
        "llama_cpp": {"llama_server": "/usr/bin/llama-server", "llama_cpp_python": False},
        "disk_free_gb": {"/tmp": 100.0},
        "memory": {"total_gb": 16.0, "available_gb": 12.0},
    }  # fmt: skip
    [fix] = [p["fix"] for p in problems(report)]
    assert fix == install_hint.extra_hint("ml") and "cheetah[ml]" not in fix
    sources = {
        p: p.read_text()
        for p in (REPO_ROOT / "cheetah").rglob("*.py")
        if p.name != "install_hint.py"  # its docstring says why not
    }
    assert not [p for p, s in sources.items() if "'cheetah[" in s or '"cheetah[' in s]
