"""Token files are written by one helper, never through a link planted at their path (issue 44)."""

from __future__ import annotations

import stat

import pytest

from cheetah.core.http_gate import SettingError, read_token, write_token
from cheetah.sandbox import launch

TOKEN = "t" * 32


def test_a_new_token_file_is_private_and_reads_back(tmp_path):
    path = write_token(tmp_path / "token", TOKEN)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and read_token(path) == TOKEN


def test_a_stale_regular_file_is_replaced_not_written_through(tmp_path):
    """A stale token is unlinked, so a hard link's other name keeps its bytes."""
    victim = tmp_path / "victim"
    victim.write_text("mine")
    (tmp_path / "token").hardlink_to(victim)
    write_token(tmp_path / "token", TOKEN)
    assert victim.read_text() == "mine" and read_token(tmp_path / "token") == TOKEN


@pytest.mark.parametrize("target", ["victim", "missing"])
def test_a_link_at_the_token_path_is_refused_and_not_followed(tmp_path, target):
    victim = tmp_path / "victim"
    victim.write_text("mine")
    (tmp_path / "token").symlink_to(tmp_path / target)
    with pytest.raises(SettingError, match="is not a regular file"):
        write_token(tmp_path / "token", TOKEN)
    assert victim.read_text() == "mine" and not (tmp_path / "missing").exists()


def test_the_env_server_launcher_does_not_write_its_token_through_a_link(tmp_path, monkeypatch):
    """Attack: ``EnvServerProcess`` opened ``env-token-<port>`` with ``O_TRUNC``, following a
    link planted there (here to a file of the user's, which it would overwrite)."""
    victim = tmp_path / "victim"
    victim.write_text("mine")
    monkeypatch.setattr(launch, "free_port", lambda: 4242)

    def no_server(*args, **kwargs):
        raise AssertionError("the server must not start after the token write failed")

    monkeypatch.setattr(launch.subprocess, "Popen", no_server)
    server = launch.EnvServerProcess(tmp_path / "work")
    (tmp_path / "work" / "env-token-4242").symlink_to(victim)
    with pytest.raises(SettingError, match="is not a regular file"):
        server._spawn()
    assert victim.read_text() == "mine"
