"""The session API that task code uses around a rollout: files, exec, stop, snapshot uploads.

Runs on the trusted local backend (no isolation needed); the same ``LocalEnv`` code
serves isolated sessions, and the fleet tests cover them over HTTP.
"""

import hashlib
import io
import os
import tarfile

import pytest

from cheetah.sandbox.env import LocalEnv
from cheetah.sandbox.protocol import EnvError, ExecRequest, WriteFilesRequest
from tests.conftest import SAMPLE_REPO


@pytest.fixture
async def env(tmp_path):
    from cheetah.sandbox.config import SandboxConfig

    e = LocalEnv("local", config=SandboxConfig(base_dir=tmp_path / "base"))
    yield e
    await e.close_all()


def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


async def test_read_write_and_delete_files(env):
    sid = (await env.create_session(str(SAMPLE_REPO))).session_id
    tree = (await env.read_files(sid)).tree()
    assert "textkit/stats.py" in tree and not any("__pycache__" in p for p in tree)
    root = env.sessions[sid].backend_session.root
    os.symlink("/etc/passwd", root / "link")
    req = WriteFilesRequest.of({"new/dir/a.bin": b"\x00\xff", "textkit/stats.py": None})
    await env.write_files(sid, req)
    tree = (await env.read_files(sid)).tree()
    assert tree["new/dir/a.bin"] == b"\x00\xff" and "textkit/stats.py" not in tree
    assert "link" not in tree  # links are never followed or returned


@pytest.mark.parametrize("path", ["../escape.txt", "/etc/x", "link/x", "textkit"])
async def test_write_outside_the_session_or_onto_a_directory_is_refused(env, path):
    sid = (await env.create_session(str(SAMPLE_REPO))).session_id
    root = env.sessions[sid].backend_session.root
    os.symlink("/tmp", root / "link")
    with pytest.raises(EnvError) as e:
        await env.write_files(sid, WriteFilesRequest.of({"ok.txt": b"1", path: b"x"}))
    assert e.value.status == 400 and repr(path) in str(e.value)
    assert not (root / "ok.txt").exists()  # all paths are checked before anything is written


async def test_exec_runs_in_the_session_and_reports_timeouts(env):
    sid = (await env.create_session(str(SAMPLE_REPO))).session_id
    r = await env.exec(sid, ExecRequest(command="ls textkit && exit 3"))
    assert r.exit_code == 3 and "stats.py" in r.output and not r.timed_out
    # the sleep outlasts the limit by far: only the limit can end it, however busy the host
    r = await env.exec(sid, ExecRequest(command="sleep 600", timeout_s=0.3))
    assert r.timed_out
    with pytest.raises(EnvError) as e:
        await env.exec(sid, ExecRequest(command="true", cwd="../.."))
    assert e.value.status == 400


async def test_snapshot_uploads_are_checked_and_become_sessions(env):
    data = _tar({"pkg/mod.py": b"X = 1\n"})
    sha = hashlib.sha256(data).hexdigest()
    with pytest.raises(EnvError) as e:
        await env.create_session(f"upload:{sha}")
    assert e.value.status == 404 and "never uploaded" in str(e.value)
    with pytest.raises(EnvError) as e:
        env.put_upload(sha, data + b"tampered")
    assert e.value.status == 400
    with pytest.raises(EnvError) as e:
        env.put_upload("../../etc", data)
    assert e.value.status == 400
    env.put_upload(sha, data)
    assert env.has_upload(sha)
    sid = (await env.create_session(f"upload:{sha}")).session_id
    assert (await env.read_files(sid)).tree() == {"pkg/mod.py": b"X = 1\n"}
    # A second client's copy of the same bytes, committed just before that session unpacked
    # (and removed) the tar, is counted after it: already there, not an error (it was a 500)
    assert not env.store.upload_path(sha).exists()
    env.store.add_upload(sha)
    assert env.has_upload(sha)
    with pytest.raises(FileNotFoundError):  # never sent, never unpacked: still an error
        env.store.add_upload("0" * 64)
