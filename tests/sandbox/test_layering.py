"""The env server stays light: importing it and serving a session loads no ML stack, also
with the code search backend handed in (it loads its embedder on the first search only)."""

import json
import subprocess
import sys
import textwrap

from tests.conftest import REPO_ROOT, SAMPLE_REPO

PROGRAM = textwrap.dedent(
    """
    import json, sys
    from fastapi.testclient import TestClient
    from cheetah.harness.protocol import render_call
    from cheetah.sandbox.config import SandboxConfig
    from cheetah.sandbox.env import LocalEnv
    from cheetah.sandbox.server import create_app
    from cheetah.search.code_search import EmbeddingCodeSearch

    env = LocalEnv(
        "local", config=SandboxConfig(base_dir=sys.argv[2]), code_search=EmbeddingCodeSearch()
    )
    calls = [
        ("list_dir", {}),
        ("read_file", {"path": "textkit/__init__.py"}),
        ("grep", {"pattern": "def "}),
        ("edit_file", {"path": "NOTES.md", "new_str": "hello"}),
        ("run_terminal", {"command": "echo hi"}),
        ("lint", {}),
        ("todo", {"items": "[ ] check the fix"}),
    ]
    auth = {"Authorization": "Bearer " + "t" * 32}
    with TestClient(create_app(env, "t" * 32).app) as client:
        sid = client.post("/sessions", json={"snapshot": sys.argv[1]}, headers=auth).json()
        sid = sid["session_id"]
        for name, args in calls:
            r = client.post(f"/sessions/{sid}/tools", headers=auth,
                            json={"calls": [{"name": name, "args": args, "index": 0}]})
            assert r.status_code == 200, (name, r.text)
            assert not r.json()["results"][0]["is_error"], (name, r.text)
        assert "NOTES.md" in client.get(f"/sessions/{sid}/diff", headers=auth).text
        assert client.delete(f"/sessions/{sid}", headers=auth).status_code < 300
    heavy = ("torch", "transformers", "numpy", "ray")
    print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in heavy)))
    """
)


def test_serving_a_session_imports_no_torch(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(SAMPLE_REPO), str(tmp_path / "base")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
