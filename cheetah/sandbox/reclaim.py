"""Session ids and owners, and reclaiming what a dead server left behind.

Session ids are opaque tokens (``check_session_id``: 1 to 64 ASCII letters, digits,
``_`` or ``-``, starting with a letter or digit), never paths: they name the
session's dir under ``base_dir/sessions`` and its cgroups, so every place an id
enters (the env API, ``Sandbox.create``, ``IsolatedSession``) checks it first.

Each session dir holds ``owner.json``: the server process that made it (pid, its
start time in clock ticks from field 22 of ``/proc/PID/stat``, the boot id and the
pid namespace), so a pid reused by another process after a reboot or a crash is
not taken for the owner. A server killed with SIGKILL (or by the OOM killer)
never closes its sessions: their tmpfs and overlay mounts and cgroups stay.
``reclaim_dead_sessions(base_dir)`` finds the sessions whose owner is gone, and
for each kills what still runs in its cgroups, unmounts its ``merged`` and
``layer`` mounts (lazily when busy), removes its cgroups and its dir. Sessions
of live owners are left alone, so servers may share a base dir;
``Sandbox.__init__`` runs it at every start. The runtime mounts under
``base_dir/runtime`` that no live server holds (``<mount>.users`` lock free) are
unmounted too.

Deliberately left alone: session dirs with no readable owner record (one being
created right now, or made by an older version; they cannot be told apart from
live ones), and sessions whose owner ran in another pid namespace (its pid means
nothing here). Servers that share a base dir must share a pid namespace to
reclaim each other's leftovers.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cheetah.sandbox import mounts
from cheetah.sandbox.capabilities import CGROUP_V1, CONTROLLERS
from cheetah.sandbox.cgroups import PARENT, SessionCgroups, base_tag, group_name
from cheetah.sandbox.procs import proc_stat
from cheetah.sandbox.trees import remove_tree

SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
SESSION_ID_RULE = (
    "1 to 64 characters: ASCII letters, digits, '_' or '-', starting with a letter or digit"
)
OWNER_FILE = "owner.json"


class InvalidSessionId(ValueError):
    """A session id that is not an opaque token (it could be read as a path)."""


class SessionIdTaken(FileExistsError):
    """A session with this id already exists in the base dir (maybe another server's)."""


def check_session_id(session_id: object) -> str:
    """``session_id`` itself when it is a valid id, else ``InvalidSessionId`` naming the rule."""
    if not isinstance(session_id, str) or not SESSION_ID.fullmatch(session_id):
        shown = repr(session_id)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        raise InvalidSessionId(f"session id {shown} is not valid: {SESSION_ID_RULE}")
    return session_id


# -- owners ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Owner:
    """A process, identified so that a later process with the same pid is not mistaken for it."""

    pid: int
    start: int  # clock ticks after boot (/proc/PID/stat field 22)
    boot: str
    pidns: str

    @classmethod
    def current(cls) -> Owner:
        pid = os.getpid()
        start = _start_time(pid)
        assert start is not None
        return cls(pid, start, _boot_id(), _pidns())

    def alive(self) -> bool | None:
        """True or False; None when it cannot be told (another pid namespace)."""
        if self.pidns != _pidns():
            return None
        if self.boot != _boot_id():
            return False
        return _start_time(self.pid) == self.start


def _start_time(pid: int) -> int | None:
    """When ``pid`` started (clock ticks after boot), or None if it is gone or a zombie."""
    fields = proc_stat(pid)
    if not fields or fields[0] in ("Z", "X"):  # state; a zombie is dead, just not reaped
        return None
    return int(fields[19])  # field 22 overall: 3rd after the name is field 3


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _pidns() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def write_owner(session_dir: Path, owner: Owner) -> None:
    """Record ``owner`` in ``session_dir`` (written whole, then renamed into place)."""
    tmp = session_dir / f".{OWNER_FILE}.tmp"
    tmp.write_text(json.dumps(asdict(owner)))
    tmp.replace(session_dir / OWNER_FILE)


def read_owner(session_dir: Path) -> Owner | None:
    try:
        raw = json.loads((session_dir / OWNER_FILE).read_text())
        return Owner(int(raw["pid"]), int(raw["start"]), str(raw["boot"]), str(raw["pidns"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


# -- reclaim --------------------------------------------------------------------------


@dataclass
class Reclaimed:
    """What was taken back from one dead session."""

    session_id: str
    owner_pid: int | None
    killed: int = 0
    unmounted: list[str] = field(default_factory=list)
    cgroups: list[str] = field(default_factory=list)
    removed: bool = False


def reclaim_dead_sessions(base_dir: str | Path) -> list[Reclaimed]:
    """Take back the sessions under ``base_dir`` whose owner is dead; returns what was taken.

    Also removes cgroups named for this base dir whose session dir is gone (left by a
    reclaim or close that could not finish).
    """
    base = Path(base_dir)
    sessions = base / "sessions"
    out: list[Reclaimed] = []
    try:
        entries = sorted(os.scandir(sessions), key=lambda e: e.name)
    except OSError:
        entries = []
    for entry in entries:
        if not SESSION_ID.fullmatch(entry.name) or not entry.is_dir(follow_symlinks=False):
            continue
        owner = read_owner(Path(entry.path))
        if owner is None or owner.alive() is not False:
            continue
        out.append(_reclaim(base, entry.name, owner))
    out += _orphan_cgroups(base)
    reclaim_runtime_mounts(base)
    return out


def reclaim_runtime_mounts(base_dir: str | Path) -> list[str]:
    """Unmount the runtime mounts under ``base_dir/runtime`` that no server holds; which."""
    out = []
    for users in sorted((Path(base_dir) / "runtime").glob("*.users")):
        target = users.with_suffix("")
        with mounts.flocked(f"{target}.mnt"):
            fd = os.open(users, os.O_RDWR)
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a live server runs sessions with it
                if mounts.detach(target):
                    out.append(str(target))
            finally:
                os.close(fd)
    return out


def _reclaim(base: Path, session_id: str, owner: Owner) -> Reclaimed:
    d = base / "sessions" / session_id
    r = Reclaimed(session_id, owner.pid)
    groups = SessionCgroups.existing(group_name(base, session_id))
    r.killed = groups.kill_all()  # first: running processes keep the mounts busy
    for target in (d / "merged", d / "layer"):
        r.unmounted += [str(target)] * mounts.detach(target)
    r.cgroups = [str(p) for p in groups.dirs.values()]
    groups.remove()
    if not any(mounts.is_mounted(t) for t in (d / "merged", d / "layer")):
        remove_tree(d)
        r.removed = not d.exists()
    return r


def _orphan_cgroups(base: Path) -> list[Reclaimed]:
    prefix = base_tag(base) + "-"
    names: set[str] = set()
    for c in CONTROLLERS:
        with contextlib.suppress(OSError):
            names |= {n for n in os.listdir(CGROUP_V1 / c / PARENT) if n.startswith(prefix)}
    out = []
    for name in sorted(names):
        sid = name[len(prefix) :]
        if not SESSION_ID.fullmatch(sid) or (base / "sessions" / sid).exists():
            continue
        groups = SessionCgroups.existing(name)
        r = Reclaimed(sid, None, cgroups=[str(p) for p in groups.dirs.values()])
        r.killed = groups.remove()
        out.append(r)
    return out
