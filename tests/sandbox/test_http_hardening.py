"""The env server refuses before it reads, and hostile tarballs are refused before they land.

Attacks from issue 10 (point 3): large bodies without a token, bodies over the cap
with and without ``Content-Length``, chunked snapshot uploads past their cap, open API
docs, gzip bombs, tarballs with too many members, and members that are special files
or lead outside. After each attack on a real ``cheetah env serve`` the server still
serves a new session. Nothing here asserts a duration: timeouts only guard hangs.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import select
import shutil
import socket
import subprocess
import tarfile
from collections.abc import Iterable
from pathlib import Path

import httpx
import pytest

from cheetah.core.http_gate import HttpGate
from cheetah.limits import ServerLimits
from cheetah.sandbox.client import EnvClient
from cheetah.sandbox.config import SandboxConfig
from cheetah.sandbox.env import LocalEnv
from cheetah.sandbox.protocol import EnvError
from cheetah.sandbox.server import create_app
from cheetah.sandbox.snapshot import MAX_EXTRACT_BYTES, SnapshotError, SnapshotSpec
from cheetah.sandbox.store import SnapshotStore
from tests.sandbox.conftest import needs_isolation, still_serving

pytestmark = pytest.mark.timeout(240)

TOKEN = "t" * 32
MiB = 1 << 20
MAX_BODY_BYTES = ServerLimits().env_max_body_bytes


# -- helpers ----------------------------------------------------------------------------
def _tar(members: Iterable[tuple[tarfile.TarInfo, bytes | None]], mode: str = "w:gz") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode, format=tarfile.PAX_FORMAT) as tf:
        for info, data in members:
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _file(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _special(name: str, kind: bytes, linkname: str = "") -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, linkname
    if kind == tarfile.DIRTYPE:
        info.mode = 0o755
    return info, None


def _with_pax(name: str, pax: dict[str, str]) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.pax_headers = pax
    return info, b""


def gzip_bomb(size: int) -> bytes:
    """A tar.gz of one file of ``size`` zero bytes, made without ever holding them: one gzip
    member for the header, then the same compressed MiB of zeros over and over (readers
    join gzip members), about 1 KB per MiB."""
    info = tarfile.TarInfo("zeros.bin")
    info.size = size
    zeros = gzip.compress(bytes(MiB), compresslevel=9)
    tail = size % MiB
    pad = (-size) % 512 + 2 * 512 + 10240  # block padding, end of archive, record padding
    return (
        gzip.compress(info.tobuf(format=tarfile.GNU_FORMAT))
        + zeros * (size // MiB)
        + gzip.compress(bytes(tail + pad))
    )


def _url_parts(url: str) -> tuple[str, int]:
    u = httpx.URL(url)
    return u.host, u.port or 80


def _read_response(s: socket.socket) -> tuple[int, dict[str, str], bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            raise AssertionError(f"connection closed before a response: {data!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines)}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = s.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(status_line.split()[1]), headers, body[:length]


def exchange(
    url: str,
    head: str,
    parts: Iterable[bytes],
    *,
    stop_when_answered: bool = True,
    timeout: float = 60.0,
) -> tuple[int, dict[str, str], bytes, int]:
    """Send a request head, then body parts (stopping once the server has answered, unless
    told not to), and read the response: (status, headers, body, body bytes sent)."""
    with socket.create_connection(_url_parts(url), timeout=timeout) as s:
        s.sendall(head.encode("latin-1"))
        sent = 0
        for part in parts:
            if stop_when_answered and select.select([s], [], [], 0)[0]:
                break
            s.sendall(part)
            sent += len(part)
        status, headers, body = _read_response(s)
    return status, headers, body, sent


def chunked(total: int, piece: int = MiB) -> Iterable[bytes]:
    """``total`` bytes in HTTP/1.1 chunked framing, ``piece`` bytes a chunk, then the end."""
    block = b"x" * piece
    left = total
    while left > 0:
        n = min(piece, left)
        yield f"{n:x}\r\n".encode() + block[:n] + b"\r\n"
        left -= n
    yield b"0\r\n\r\n"


def head(method: str, path: str, *, token: str | None = None, length: int | None = None) -> str:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    lines.append(
        f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    )
    return "\r\n".join(lines) + "\r\n\r\n"


def vm_hwm_kb(pid: int) -> int:
    """The process's peak resident memory, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM in /proc status")


def reset_hwm(pid: int) -> None:
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # peak RSS := current RSS
    except OSError:
        pass  # then growth is measured from the old peak, which only makes it smaller


async def server_still_serves(srv) -> None:
    client = EnvClient(srv.url, srv.token)
    try:
        await still_serving(client)
    finally:
        await client.aclose()


def _leftovers(base: Path, sha: str) -> list[str]:
    names = [p.name for p in (base / "snapshots").glob(f"*tar-{sha[:20]}*")]
    names += [p.name for p in (base / "uploads").glob(f".{sha}.*")]
    return names


def _forget_upload(base: Path, sha: str) -> None:
    (base / "uploads" / f"{sha}.tar").unlink(missing_ok=True)


# -- the gate in process -----------------------------------------------------------------
async def test_gate_refuses_without_reading_the_body():
    called: list[str] = []

    async def app(scope, receive, send):  # pragma: no cover - must never run
        called.append("app")

    async def receive():  # pragma: no cover - must never be called
        called.append("receive")
        return {"type": "http.request", "body": b"x", "more_body": True}

    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    gate = HttpGate(app, token=TOKEN, max_body_bytes=1024)
    for headers in (
        [(b"content-length", b"150000000")],
        [(b"transfer-encoding", b"chunked")],
        [(b"authorization", b"Bearer wrong-token-wrong-token!!"), (b"content-length", b"9")],
        [(b"authorization", TOKEN.encode())],  # no scheme
    ):
        sent.clear()
        scope = {"type": "http", "method": "POST", "path": "/sessions", "headers": headers}
        await gate(scope, receive, send)
        assert sent[0]["status"] == 401
        assert (b"www-authenticate", b"Bearer") in sent[0]["headers"]
        assert json.loads(sent[1]["body"]) == {"detail": "missing or wrong bearer token"}
    sent.clear()
    auth = (b"authorization", f"Bearer {TOKEN}".encode())
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/sessions",
        "headers": [auth, (b"content-length", b"1025")],
    }
    await gate(scope, receive, send)
    assert sent[0]["status"] == 413 and "1024" in json.loads(sent[1]["body"])["detail"]
    assert called == []
    sent.clear()

    async def connect():
        return {"type": "websocket.connect"}

    await gate({"type": "websocket", "path": "/sessions", "headers": []}, connect, send)
    assert sent == [{"type": "websocket.close", "code": 1008}] and called == []


@pytest.fixture
async def asgi(tmp_path):
    limits = ServerLimits(env_max_body_bytes=64 << 10, env_max_upload_bytes=256 << 10)
    env = LocalEnv("local", config=SandboxConfig(base_dir=tmp_path / "base"), server_limits=limits)
    app = create_app(env, TOKEN)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://env") as client:
        client.env = env
        yield client
    await env.close_all()


async def _pieces(total: int, piece: int = 16 << 10):
    for _ in range(total // piece):
        yield b" " * piece


async def test_chunked_bodies_over_the_cap_answer_413_not_400(asgi):
    auth = {"Authorization": f"Bearer {TOKEN}"}
    r = await asgi.post("/sessions", content=_pieces(1 << 20), headers=auth)
    assert r.status_code == 413 and "65536" in r.json()["detail"]
    r = await asgi.put(f"/snapshots/{'0' * 64}", content=_pieces(1 << 20), headers=auth)
    assert r.status_code == 413 and "262144" in r.json()["detail"]
    assert not list((asgi.env.store.uploads).glob("*"))  # the partial upload is gone
    r = await asgi.post("/sessions", content=_pieces(1 << 20))
    assert r.status_code == 401
    data = _tar([_file("a.py", b"A = 1\n")])
    sha = hashlib.sha256(data).hexdigest()
    r = await asgi.put(f"/snapshots/{sha}", content=_pieces(0), headers=auth)
    assert r.status_code == 400 and "sha256" in r.json()["detail"]
    r = await asgi.put("/snapshots/not-a-sha", content=data, headers=auth)
    assert r.status_code == 400 and "sha256" in r.json()["detail"]

    async def one_piece():
        yield data

    r = await asgi.put(f"/snapshots/{sha}", content=one_piece(), headers=auth)
    assert r.status_code == 201
    assert (asgi.env.store.uploads / f"{sha}.tar").read_bytes() == data
    assert [p.name for p in asgi.env.store.uploads.iterdir()] == [f"{sha}.tar"]


async def test_docs_and_openapi_are_off(asgi):
    for path in ("/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect"):
        assert (await asgi.get(path)).status_code == 401, path
        r = await asgi.get(path, headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 404, path
    assert (await asgi.get("/health")).status_code == 200


# -- hostile tarballs in process ---------------------------------------------------------
HOSTILE = {
    "fifo": ([_special("pipe", tarfile.FIFOTYPE)], "special file"),
    "char device": ([_special("null", tarfile.CHRTYPE)], "special file"),
    "absolute link": ([_special("pw", tarfile.SYMTYPE, "/etc/passwd")], "absolute path"),
    "link outside": ([_special("up", tarfile.SYMTYPE, "../../../../etc")], "leading outside"),
    "dot-dot path": ([_file("../escape.txt", b"x")], "'..'"),
    "write through a link": (
        [
            _special("sub", tarfile.DIRTYPE),
            _special("d", tarfile.SYMTYPE, "sub"),
            _file("d/x.txt", b"x"),
        ],
        "under a symbolic link",
    ),
    "hard link to no member": ([_special("h", tarfile.LNKTYPE, "etc/passwd")], "hard link"),
    "name twice": ([_file("a.txt", b"1"), _special("a.txt", tarfile.SYMTYPE, "b")], "twice"),
    "huge pax header": ([_with_pax("big-header.txt", {"comment": "x" * (2 * MiB)})], "tar header"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_tarball_members_are_refused(tmp_path, case):
    members, expected = HOSTILE[case]
    path = tmp_path / "hostile.tar.gz"
    path.write_bytes(_tar(members))
    store = SnapshotStore(tmp_path / "base")
    with pytest.raises(SnapshotError) as e:
        store.materialize(SnapshotSpec(kind="tar", path=str(path)))
    assert expected in str(e.value) and "refused" in str(e.value)
    assert list(store.dir.iterdir()) == []  # nothing of it stays on disk
    assert not (tmp_path / "escape.txt").exists()


def _broken() -> dict[str, bytes]:
    raw = _tar([_file("a.bin", bytes(range(256)) * 400)], mode="w")
    gz = gzip.compress(raw)
    return {
        "empty": b"",
        "not a tarball": b"hello, world\n" * 100,
        "truncated gzip": gz[: len(gz) // 2],
        "bad gzip checksum": gz[:-8] + bytes(8),
        "truncated tar": raw[: len(raw) // 2],
        "bad bzip2": b"BZh9" + bytes(100),
    }


@pytest.mark.parametrize("case", list(_broken()))
def test_broken_tarballs_are_clear_errors(tmp_path, case):
    path = tmp_path / "broken.tar"
    path.write_bytes(_broken()[case])
    store = SnapshotStore(tmp_path / "base")
    with pytest.raises(SnapshotError) as e:
        store.materialize(SnapshotSpec(kind="tar", path=str(path)))
    assert str(e.value).startswith(f"cannot extract snapshot tarball {str(path)!r}: ")
    assert list(store.dir.iterdir()) == []


def test_good_tarballs_still_extract(tmp_path):
    members = [
        _special("pkg", tarfile.DIRTYPE),
        _file("pkg/mod.py", b"X = 1\n"),
        _special("pkg/link.py", tarfile.SYMTYPE, "mod.py"),
        _special("pkg/hard.py", tarfile.LNKTYPE, "pkg/mod.py"),
        _file("./top.txt", b"top\n"),
    ]
    for mode, suffix in (("w:gz", "tgz"), ("w:bz2", "tbz"), ("w:xz", "txz"), ("w", "tar")):
        path = tmp_path / f"ok.{suffix}"
        path.write_bytes(_tar(members, mode))
        root = SnapshotStore(tmp_path / suffix).materialize(
            SnapshotSpec(kind="tar", path=str(path))
        )
        assert (root / "pkg/mod.py").read_bytes() == b"X = 1\n"
        assert os.readlink(root / "pkg/link.py") == "mod.py"
        assert (root / "pkg/hard.py").read_bytes() == b"X = 1\n"
        assert (root / "top.txt").read_bytes() == b"top\n"


def test_extraction_limits_are_checked_before_writing(tmp_path, monkeypatch):
    store = SnapshotStore(tmp_path / "base")
    bomb = tmp_path / "bomb.tar.gz"
    bomb.write_bytes(gzip_bomb(MAX_EXTRACT_BYTES + MiB))
    assert bomb.stat().st_size < 2 * MiB
    with pytest.raises(SnapshotError) as e:
        store.materialize(SnapshotSpec(kind="tar", path=str(bomb)))
    assert f"over {MAX_EXTRACT_BYTES} bytes (the extraction limit" in str(e.value)
    assert list(store.dir.iterdir()) == []

    monkeypatch.setenv("CHEETAH_SNAPSHOT_MAX_BYTES", str(MiB))
    monkeypatch.setenv("CHEETAH_SNAPSHOT_MAX_MEMBERS", "50")
    many = tmp_path / "many.tar.gz"  # 8 files of 256 KiB: the fourth crosses 1 MiB
    many.write_bytes(_tar([_file(f"f{i}.bin", bytes(256 << 10)) for i in range(8)]))
    with pytest.raises(SnapshotError) as e:
        store.materialize(SnapshotSpec(kind="tar", path=str(many)))
    assert "extraction limit" in str(e.value)
    assert list(store.dir.iterdir()) == []
    crowd = tmp_path / "crowd.tar.gz"
    crowd.write_bytes(_tar([_file(f"e{i}", b"") for i in range(100)]))
    with pytest.raises(SnapshotError) as e:
        store.materialize(SnapshotSpec(kind="tar", path=str(crowd)))
    assert "over 50 members (the member limit" in str(e.value)
    assert list(store.dir.iterdir()) == []
    monkeypatch.setenv("CHEETAH_SNAPSHOT_MAX_MEMBERS", "many")
    with pytest.raises(SnapshotError, match="CHEETAH_SNAPSHOT_MAX_MEMBERS"):
        store.materialize(SnapshotSpec(kind="tar", path=str(crowd)))


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True,
        capture_output=True,
    )


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_snapshots_get_the_same_checks(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "big.bin").write_bytes(os.urandom(2 * MiB))
    _git(repo, "add", "big.bin")
    _git(repo, "commit", "-qm", "big")
    os.symlink("/etc/passwd", repo / "pw")
    _git(repo, "add", "pw")
    _git(repo, "commit", "-qm", "link")
    store = SnapshotStore(tmp_path / "base")
    with pytest.raises(SnapshotError) as e:
        store.materialize(SnapshotSpec(kind="git", path=str(repo), commit="HEAD"))
    assert "member 'pw' is a link to an absolute path" in str(e.value)
    monkeypatch.setenv("CHEETAH_SNAPSHOT_MAX_BYTES", str(MiB))
    with pytest.raises(SnapshotError) as e:
        store.materialize(SnapshotSpec(kind="git", path=str(repo), commit="HEAD~1"))
    assert "extraction limit" in str(e.value)
    assert list(store.dir.iterdir()) == []
    monkeypatch.delenv("CHEETAH_SNAPSHOT_MAX_BYTES")
    root = store.materialize(SnapshotSpec(kind="git", path=str(repo), commit="HEAD~1"))
    assert (root / "big.bin").stat().st_size == 2 * MiB


# -- a real env server -------------------------------------------------------------------
@needs_isolation
async def test_unauthenticated_large_body_is_refused_before_it_is_read(env_server):
    srv = env_server()
    size = 150_000_000
    status, headers, body, sent = exchange(
        srv.url, head("POST", "/sessions", length=size), [b" " * (64 << 10)]
    )
    assert status == 401 and headers["www-authenticate"] == "Bearer"
    assert json.loads(body) == {"detail": "missing or wrong bearer token"}
    assert sent <= 64 << 10  # the answer came while the client had sent almost nothing
    status, _, body, sent = exchange(srv.url, head("POST", "/sessions"), chunked(size))
    assert status == 401 and sent < size
    status, _, body, sent = exchange(
        srv.url, head("POST", "/sessions", token=srv.token, length=size), [b" " * (64 << 10)]
    )
    assert status == 413
    assert json.loads(body)["detail"] == (
        f"request body of {size} bytes is over the limit of {MAX_BODY_BYTES} bytes"
    )
    for path in ("/docs", "/openapi.json"):
        assert httpx.get(f"{srv.url}{path}").status_code == 401
        auth = {"Authorization": f"Bearer {srv.token}"}
        assert httpx.get(f"{srv.url}{path}", headers=auth).status_code == 404
    await server_still_serves(srv)


@needs_isolation
async def test_chunked_body_over_the_cap_is_refused_as_it_arrives(env_server, monkeypatch):
    cap = 8 * MiB
    monkeypatch.setenv("CHEETAH_ENV_MAX_BODY_BYTES", str(cap))
    srv = env_server()
    pid = srv.proc.pid
    reset_hwm(pid)
    before = vm_hwm_kb(pid)
    size = 128 * MiB  # all of it is sent, the part after the answer too
    status, _, body, sent = exchange(
        srv.url,
        head("POST", "/sessions", token=srv.token),
        chunked(size),
        stop_when_answered=False,
        timeout=120,
    )
    assert status == 413 and sent > size
    assert json.loads(body)["detail"] == f"request body is over the limit of {cap} bytes"
    growth_mib = (vm_hwm_kb(pid) - before) / 1024
    assert growth_mib < 48, f"server peak memory grew by {growth_mib:.0f} MiB"
    await server_still_serves(srv)


@needs_isolation
async def test_snapshot_upload_is_streamed_capped_and_checked(env_server, monkeypatch):
    cap = 4 * MiB
    monkeypatch.setenv("CHEETAH_ENV_MAX_UPLOAD_BYTES", str(cap))
    srv = env_server()
    base = srv.config.base_dir
    client = EnvClient(srv.url, srv.token)
    over = b"x" * (16 * MiB)
    sha = hashlib.sha256(over).hexdigest()
    good = _tar([_file("pkg/mod.py", b"X = 1\n"), _file("pad.bin", os.urandom(3 * MiB))])
    good_sha = hashlib.sha256(good).hexdigest()
    try:
        status, _, body, _ = exchange(
            srv.url, head("PUT", f"/snapshots/{sha}", token=srv.token), chunked(len(over))
        )
        assert status == 413 and f"over the limit of {cap} bytes" in json.loads(body)["detail"]
        status, _, body, sent = exchange(
            srv.url,
            head("PUT", f"/snapshots/{sha}", token=srv.token, length=len(over)),
            [over[: 64 << 10]],
        )
        assert status == 413 and sent <= 64 << 10
        with pytest.raises(EnvError) as e:  # the client sends it all, and reads its answer
            await client.put_snapshot(sha, over)
        assert e.value.status == 413 and f"over the limit of {cap} bytes" in str(e.value)
        assert not await client.has_snapshot(sha)
        assert _leftovers(base, sha) == []
        # Within the cap: stored when the bytes match their sha256, refused when not.
        pieces = [f"{len(good):x}\r\n".encode() + good + b"\r\n", b"0\r\n\r\n"]
        wrong = "0" * 64
        status, _, body, _ = exchange(
            srv.url, head("PUT", f"/snapshots/{wrong}", token=srv.token), pieces
        )
        assert status == 400 and "do not match their sha256" in json.loads(body)["detail"]
        assert _leftovers(base, wrong) == [] and not await client.has_snapshot(wrong)
        status, _, _, _ = exchange(
            srv.url, head("PUT", f"/snapshots/{good_sha}", token=srv.token), pieces
        )
        assert status == 201 and await client.has_snapshot(good_sha)
        assert (base / "uploads" / f"{good_sha}.tar").read_bytes() == good
        sid = (await client.create_session(f"upload:{good_sha}")).session_id
        assert (await client.read_files(sid)).tree()["pkg/mod.py"] == b"X = 1\n"
        await client.close(sid)
        await still_serving(client)
    finally:
        await client.aclose()
        _forget_upload(base, good_sha)


@needs_isolation
async def test_large_upload_is_not_held_in_memory(env_server):
    srv = env_server()
    base = srv.config.base_dir
    size = 160 * MiB
    block = b"y" * MiB
    h = hashlib.sha256()
    for _ in range(size // MiB):
        h.update(block)
    sha = h.hexdigest()
    client = EnvClient(srv.url, srv.token)
    pid = srv.proc.pid
    reset_hwm(pid)
    before = vm_hwm_kb(pid)
    try:
        status, _, body, _ = exchange(
            srv.url,
            head("PUT", f"/snapshots/{sha}", token=srv.token, length=size),
            (block for _ in range(size // MiB)),
            stop_when_answered=False,
            timeout=120,
        )
        assert status == 201, body
        growth_mib = (vm_hwm_kb(pid) - before) / 1024
        assert growth_mib < 48, f"server peak memory grew by {growth_mib:.0f} MiB"
        assert (base / "uploads" / f"{sha}.tar").stat().st_size == size
        assert _leftovers(base, sha) == []
        await still_serving(client)
    finally:
        await client.aclose()
        _forget_upload(base, sha)


@needs_isolation
async def test_gzip_bomb_is_refused_from_its_header(env_server):
    srv = env_server()
    base = srv.config.base_dir
    client = EnvClient(srv.url, srv.token)
    bomb = gzip_bomb(1 << 30)  # 1 GiB of zeros in about 1 MB
    assert len(bomb) < 2 * MiB
    sha = hashlib.sha256(bomb).hexdigest()
    try:
        await client.put_snapshot(sha, bomb)
        with pytest.raises(EnvError) as e:
            await client.create_session(f"upload:{sha}")
        assert e.value.status == 400
        assert f"expands to over {MAX_EXTRACT_BYTES} bytes (the extraction limit" in str(e.value)
        assert _leftovers(base, sha) == []
        await still_serving(client)
    finally:
        await client.aclose()
        _forget_upload(base, sha)


@needs_isolation
async def test_tarball_limits_refuse_and_leave_nothing_behind(env_server, monkeypatch):
    monkeypatch.setenv("CHEETAH_SNAPSHOT_MAX_BYTES", str(MiB))
    monkeypatch.setenv("CHEETAH_SNAPSHOT_MAX_MEMBERS", "50")
    srv = env_server()
    base = srv.config.base_dir
    client = EnvClient(srv.url, srv.token)
    cases = {
        "extraction limit": _tar([_file(f"f{i}.bin", bytes(256 << 10)) for i in range(8)]),
        "over 50 members (the member limit": _tar([_file(f"e{i}", b"") for i in range(100)]),
        "special file": _tar([_special("pipe", tarfile.FIFOTYPE)]),
        "leading outside": _tar([_special("up", tarfile.SYMTYPE, "../../../../etc")]),
    }
    shas = []
    try:
        for expected, data in cases.items():
            sha = hashlib.sha256(data).hexdigest()
            shas.append(sha)
            await client.put_snapshot(sha, data)
            with pytest.raises(EnvError) as e:
                await client.create_session(f"upload:{sha}")
            assert e.value.status == 400 and expected in str(e.value), str(e.value)
            assert _leftovers(base, sha) == []
            await still_serving(client)
    finally:
        await client.aclose()
        for sha in shas:
            _forget_upload(base, sha)


def test_partial_uploads_of_a_killed_server_are_removed(tmp_path):
    import os
    import time

    from cheetah.sandbox.env import remove_stale_parts

    uploads = tmp_path / "uploads"
    uploads.mkdir()
    old, live = uploads / f".{'a' * 64}.x1.part", uploads / f".{'b' * 64}.x2.part"
    old.write_bytes(b"x")
    live.write_bytes(b"y")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    assert remove_stale_parts(uploads) == [old]
    assert not old.exists() and live.exists()
