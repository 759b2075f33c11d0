"""SWE-bench-style instances in and out, against local git clones.

Import: each record's ``repo`` (``owner/name``) must be a git clone under ``--repos`` (as
``owner__name``, SWE-bench's folder name, or ``name``) that holds ``base_commit``; the task's
snapshot is that clone at that commit, stored as an absolute path (a relative ``--repos``
would be read against the task file's folder, not the folder import ran in). ``repo`` is a
name, never a path: an absolute one, a ``..`` part, or a clone (or its git directory) that
resolves outside ``--repos`` is refused (``clone_for``). The record's fields map as ``loaders.from_swebench``
maps them (``problem_statement`` the query, ``patch`` the reference, ``test_patch`` applied
only at grading, ``FAIL_TO_PASS``/``PASS_TO_PASS`` pytest node ids).

Export: the starting tree of each task (its snapshot with the snapshot's own patch applied)
is committed in a git repo under ``--repos`` named after the snapshot's source, on the branch
``tasks/<id>``; that commit is ``base_commit``. ``test_patch`` is everything grading adds
(``hidden_files`` and the task's own test patch), as one diff from the starting tree.
cheetah's own fields that SWE-bench has no place for (``split``, ``tier``, ``scope``,
``setup``, ``test_command``) travel as extra keys, which the importer reads back, so an
export imports as the same tasks.

Deliberately left out: tasks whose checks are shell commands (SWE-bench grades test ids
only; they are skipped with the reason), Docker images and per-repo environment specs,
and fetching from GitHub (the clones must be local: no network at run time).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import ValidationError

from cheetah.core.safefs import read_tree
from cheetah.sandbox.snapshot import SnapshotError
from cheetah.tasks.checkout import materialize
from cheetah.tasks.loaders import TaskFileError, field_errors, from_swebench
from cheetah.tasks.patch import PatchError, diff_trees, patch_tree, with_changes
from cheetah.tasks.schema import Snapshot, Task

EXTRA_KEYS = ("split", "tier", "scope", "setup", "test_command")
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class SwebenchError(ValueError):
    """The instances or the clones cannot be used; the message says which and why."""


def _git(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=300
    )
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        raise SwebenchError(f"git {args[0]} in {cwd}: {lines[-1] if lines else proc.returncode}")
    return proc.stdout.strip()


def read_instances(path: Path) -> list[dict[str, Any]]:
    """Records from a JSONL file or a JSON array (both forms SWE-bench sets come in)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SwebenchError(f"cannot read {path}: {e}") from None
    if text.lstrip().startswith("["):
        try:
            records = json.loads(text)
        except json.JSONDecodeError as e:
            raise SwebenchError(f"{path}: not valid JSON: {e}") from None
    else:
        records = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise SwebenchError(f"{path}:{n}: not valid JSON: {e.msg}") from None
    bad = [i for i, r in enumerate(records, 1) if not isinstance(r, dict)]
    if bad:
        raise SwebenchError(f"{path}: record {bad[0]} is not a JSON object")
    return records


def clone_for(repo: str, repos: Path) -> Path | None:
    """The local clone of ``owner/name`` under ``repos`` (absolute, links resolved), or None.

    ``repo`` is a name, never a path: an absolute one or one with a ``..`` part is a
    ``SwebenchError``, and so is a clone whose resolved folder or git directory (a link, a
    ``.git`` file) lies outside the resolved ``repos``, so no record turns another local
    repository into a task snapshot."""
    if Path(repo).is_absolute() or ".." in PurePosixPath(repo).parts:
        raise SwebenchError(f"repo {repo!r} is a path; give owner/name (a clone under --repos)")
    root = repos.resolve()
    owner, _, name = repo.rpartition("/")
    for candidate in (f"{owner}__{name}" if owner else None, name, repo):
        if not candidate:
            continue
        path = repos / candidate
        if (path / ".git").exists() or (path / "HEAD").is_file():  # a clone, or a bare one
            git_dir = Path(_git(["rev-parse", "--absolute-git-dir"], path)).resolve()
            for what, where in (("folder", path.resolve()), ("git directory", git_dir)):
                if not where.is_relative_to(root):
                    raise SwebenchError(
                        f"repo {repo!r}: the {what} of {path} is {where}, outside --repos {root}"
                    )
            return path.resolve()
    return None


def import_instances(records: list[dict[str, Any]], repos: Path, source: str) -> list[Task]:
    """Tasks from SWE-bench records; every bad record is named at once (``TaskFileError``)."""
    tasks, problems, seen = [], [], set()
    for n, rec in enumerate(records, 1):
        where = f"{source}:{n}"
        missing = [k for k in ("instance_id", "repo", "base_commit") if not rec.get(k)]
        if missing:
            problems.append(f"{where}: missing {', '.join(missing)}")
            continue
        try:
            clone = clone_for(str(rec["repo"]), repos)
        except SwebenchError as e:
            problems.append(f"{where}: {e}")
            continue
        if clone is None:
            owner, _, name = str(rec["repo"]).rpartition("/")
            problems.append(
                f"{where}: no git clone of {rec['repo']} under {repos} "
                f"(looked for {owner + '__' + name + ', ' if owner else ''}{name})"
            )
            continue
        try:
            _git(["cat-file", "-e", f"{rec['base_commit']}^{{commit}}"], clone)
        except SwebenchError:
            problems.append(f"{where}: {clone} has no commit {rec['base_commit']}")
            continue
        snapshot = {"git": str(clone), "commit": rec["base_commit"]}
        try:
            data = from_swebench({**rec, "snapshot": snapshot})
            for key in ("reference_patch", "test_patch"):
                data[key] = data.get(key) or None
            task = Task.model_validate(data)
        except ValidationError as e:
            problems.extend(f"{where}: {msg}" for msg in field_errors(e))
            continue
        except ValueError as e:
            problems.append(f"{where}: {e}")
            continue
        if task.id in seen:
            problems.append(f"{where}: instance_id {task.id!r} is used twice")
            continue
        seen.add(task.id)
        task.source, task.line = source, n
        tasks.append(task)
    if problems:
        raise TaskFileError(problems)
    return tasks


def source_name(snap: Snapshot) -> str:
    """The repo name an export uses for a snapshot's source (its folder, tarball or git name)."""
    raw = snap.dir or snap.tar or snap.git or "repo"
    name = raw.rstrip("/").rsplit("/", 1)[-1]
    for suffix in (".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar", ".git"):
        name = name.removesuffix(suffix)
    if snap.subdir:
        name += "-" + snap.subdir.strip("/").replace("/", "-")
    return _SAFE.sub("-", name) or "repo"


@dataclass
class ExportResult:
    records: list[dict[str, Any]] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # task id -> why


def _commit_tree(git_dir: Path, tree_root: Path, message: str, branch: str) -> str:
    """Commit the files under ``tree_root`` (a root commit) on ``branch``; the sha."""
    with tempfile.TemporaryDirectory(prefix="cheetah-index-") as tmp:
        env = {
            **os.environ,
            "GIT_INDEX_FILE": str(Path(tmp) / "index"),
            "GIT_AUTHOR_NAME": "cheetah",
            "GIT_AUTHOR_EMAIL": "cheetah@localhost",
            "GIT_COMMITTER_NAME": "cheetah",
            "GIT_COMMITTER_EMAIL": "cheetah@localhost",
            "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z",
            "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
        }
        _git(["--work-tree", str(tree_root), "add", "-A", "--force", "."], git_dir, env)
        tree = _git(["write-tree"], git_dir, env)
        sha = _git(["commit-tree", tree, "-m", message], git_dir, env)
    _git(["update-ref", f"refs/heads/{branch}", sha], git_dir)
    return sha


def _repo(repos: Path, name: str) -> Path:
    path = repos / name
    if not (path / ".git").exists():
        path.mkdir(parents=True, exist_ok=True)
        _git(["init", "--quiet"], path)
    return path


def to_instance(task: Task, repos: Path) -> dict[str, Any]:
    """One task as a SWE-bench record, its starting tree committed under ``repos``."""
    bad = [c.label for c in task.checks if c.command is not None]
    if bad:
        raise SwebenchError(f"shell-command checks have no SWE-bench form: {', '.join(bad)}")
    name = source_name(task.snapshot)
    repo = _repo(repos, name)
    with tempfile.TemporaryDirectory(prefix="cheetah-export-") as tmp:
        start = materialize(task.snapshot, Path(tmp) / "repo")
        tree = read_tree(start)
        graded = with_changes(tree, {k: v.encode() for k, v in task.hidden_files.items()})
        if task.test_patch:
            graded = with_changes(graded, patch_tree(graded, task.test_patch))
        branch = f"tasks/{_SAFE.sub('-', task.id)}"
        sha = _commit_tree(repo / ".git", start, f"task {task.id}: starting tree", branch)
    try:
        _git(["rev-parse", "--verify", "-q", "HEAD"], repo)
    except SwebenchError:  # a new repo: HEAD names the first task's branch, so clones work
        _git(["symbolic-ref", "HEAD", f"refs/heads/{branch}"], repo)
    record: dict[str, Any] = {
        "instance_id": task.id,
        "repo": f"local/{name}",
        "base_commit": sha,
        "patch": task.reference_patch or "",
        "test_patch": diff_trees(tree, graded),
        "problem_statement": task.query,
        "hints_text": "",
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "version": "",
        "environment_setup_commit": sha,
        "FAIL_TO_PASS": json.dumps([c.test for c in task.fail_to_pass]),
        "PASS_TO_PASS": json.dumps([c.test for c in task.pass_to_pass]),
    }
    for key in EXTRA_KEYS:
        value = getattr(task, key)
        if value:
            record[key] = value
    return record


def export_tasks(tasks: list[Task], repos: Path) -> ExportResult:
    """Every task that has a SWE-bench form, as records; the others in ``skipped``."""
    result = ExportResult()
    for task in tasks:
        try:
            result.records.append(to_instance(task, repos))
        except (SwebenchError, SnapshotError, PatchError) as e:
            result.skipped[task.id] = str(e)
    return result


def write_instances(records: list[dict[str, Any]], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec) + "\n")
    return path
