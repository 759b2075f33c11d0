"""The task record: a repo snapshot, a query, and the hidden checks that grade the result.

One JSONL line is one ``Task``. What the agent sees is the snapshot (after its
``patch``, if any) and the query; everything under "hidden" (``hidden_files``,
``test_patch``, ``reference_patch`` and the checks themselves) stays in this record
and reaches the workspace only when the grader runs, after the agent has stopped.

A check is a pytest node id (``tests/test_x.py::test_y``) or a shell command that
passes on exit status 0. ``fail_to_pass`` checks must fail on the snapshot and pass
once the task is done; ``pass_to_pass`` checks must pass before and after.

Deliberately left out: per-check weights (correctness is all checks or nothing),
non-pytest test runners for node ids (use a command check), and network access
during setup (sandboxes have none).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Split = Literal["train", "heldout"]
Kind = Literal["bugfix", "feature", "refactor", "tests", "generated", "other"]


class Snapshot(BaseModel):
    """Where the starting repo comes from: exactly one of ``dir``, ``tar``, ``git`` or
    ``package`` (``name==version``: a repo ``cheetah tasks fetch`` laid out, found where it
    puts them, so task files name real code without copying it).

    Relative paths are resolved against the task file's directory by the loader.
    ``patch`` (a unified diff) is applied on top, e.g. to inject the bug of a bug-fix
    task into a clean repo, so many tasks can share one repo directory.
    """

    model_config = ConfigDict(extra="forbid")

    dir: str | None = Field(None, description="a directory copied as the repo")
    tar: str | None = Field(None, description="a tarball (.tar, .tar.gz, ...) of the repo")
    git: str | None = Field(None, description="a git repository (path or URL) to clone")
    package: str | None = Field(
        None,
        description="name==version of a repo `cheetah tasks fetch` laid out",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9][A-Za-z0-9._+!-]*$",
    )
    commit: str | None = Field(None, description="the commit to check out (with git)")
    subdir: str | None = Field(None, description="use only this folder of the source as the root")
    patch: str | None = Field(None, description="unified diff applied after copying")

    @model_validator(mode="after")
    def _one_source(self) -> Snapshot:
        given = [k for k in ("dir", "tar", "git", "package") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError(f"give exactly one of dir, tar, git, package (got {given or 'none'})")
        if self.commit and not self.git:
            raise ValueError("commit is only meaningful with git")
        return self

    @property
    def repo(self) -> str:
        """A short name of the repo, for tables by repo: the package's name, else the last
        part of the folder, archive or git source (``subdir`` appended)."""
        if self.package:
            name = self.package.partition("==")[0]
        else:
            source = (self.dir or self.tar or self.git or "").rstrip("/")
            name = re.sub(r"(\.git|\.tar(\.\w+)?|\.tgz)$", "", source.rpartition("/")[2])
        return f"{name}/{self.subdir.strip('/')}" if self.subdir else name

    def resolved(self, base: Path) -> Snapshot:
        """A copy whose local paths are absolute, relative ones taken from ``base``."""

        def fix(p: str | None) -> str | None:
            if p is None or "://" in p or p.startswith("git@"):
                return p
            path = Path(p).expanduser()
            return str(path if path.is_absolute() else (base / path).resolve())

        return self.model_copy(
            update={"dir": fix(self.dir), "tar": fix(self.tar), "git": fix(self.git)}
        )


class Check(BaseModel):
    """One check: a pytest node id (``test``) or a shell ``command`` that passes on exit 0.

    In a task file a bare string is a test id; an object gives a command.
    """

    model_config = ConfigDict(extra="forbid")

    test: str | None = None
    command: str | None = None
    name: str | None = Field(None, description="label for reports (default: the id or command)")
    timeout_s: float | None = Field(None, description="overrides the grader's check timeout")

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, data: Any) -> Any:
        return {"test": data} if isinstance(data, str) else data

    @model_validator(mode="after")
    def _one_kind(self) -> Check:
        if (self.test is None) == (self.command is None):
            raise ValueError("give exactly one of test (a pytest node id) or command")
        if self.test is not None and not self.test.strip():
            raise ValueError("test id is empty")
        return self

    @property
    def label(self) -> str:
        return self.name or self.test or self.command or ""

    @property
    def test_file(self) -> str | None:
        return self.test.split("::", 1)[0] if self.test else None


class Task(BaseModel):
    """One task. ``source`` and ``line`` say where it was loaded from (not part of the file)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    query: str = Field(min_length=1)
    snapshot: Snapshot
    setup: str | None = Field(None, description="command run in the workspace before the agent")
    env: str | None = Field(
        None,
        description="a Python environment (a venv made with --copies, e.g. by `cheetah tasks "
        "fetch`) the task's commands run with, read-only; relative to the task file",
    )
    fail_to_pass: list[Check] = Field(default_factory=list)
    pass_to_pass: list[Check] = Field(default_factory=list)
    test_command: str | None = Field(
        None,
        description="pytest command for the test-id checks, the test files appended; it must "
        "print pytest's -rA summary (default: the grader's python -m pytest -rA ...)",
    )
    hidden_files: dict[str, str] = Field(
        default_factory=dict, description="path -> content, written in only at grading"
    )
    test_patch: str | None = Field(None, description="unified diff applied only at grading")
    reference_patch: str | None = Field(None, description="a diff that solves the task")
    scope: list[str] = Field(
        default_factory=list, description="globs of files the task may touch (empty: any)"
    )
    tags: list[str] = Field(default_factory=list)
    kind: Kind = "other"
    split: Split = "train"
    tier: str = "standard"
    source: str | None = Field(None, exclude=True)
    line: int | None = Field(None, exclude=True)

    @model_validator(mode="after")
    def _has_checks(self) -> Task:
        if not self.fail_to_pass and not self.pass_to_pass:
            raise ValueError("a task needs at least one check in fail_to_pass or pass_to_pass")
        return self

    @property
    def checks(self) -> list[Check]:
        return [*self.fail_to_pass, *self.pass_to_pass]

    def where(self) -> str:
        """``file:line`` of the record, for messages."""
        return f"{self.source}:{self.line}" if self.source else self.id
