"""Read task files: cheetah JSONL, and SWE-bench-style records in the same file.

Every problem names the file, the line and the field (``tasks.jsonl:7: snapshot.dir:
Field required``); all bad lines are reported at once, not just the first.
Relative snapshot and ``env`` paths are resolved against the task file's directory.

A SWE-bench record (it has ``instance_id``) maps to a task: ``problem_statement`` is
the query, ``patch`` the reference patch, ``test_patch`` is applied only at grading,
``FAIL_TO_PASS``/``PASS_TO_PASS`` may be lists or JSON-encoded strings. Its snapshot is
``https://github.com/{repo}`` at ``base_commit`` unless the record gives ``snapshot``
(useful offline: point it at a local clone).

Deliberately left out: JSON arrays and YAML task files, SWE-bench's per-repo
environment setup (give ``setup`` in the record instead).
"""

from __future__ import annotations

import json
import lzma
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from cheetah import bundled
from cheetah.tasks.schema import Task


class TaskFileError(ValueError):
    """A task file could not be read; ``problems`` holds one ``file:line: field: why`` each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def _json_list(value: Any, field: str) -> list[Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except json.JSONDecodeError as e:
            raise ValueError(f"{field}: not a JSON list: {e}") from None
    if not isinstance(value, list):
        raise ValueError(f"{field}: expected a list of test ids")
    return value


def from_swebench(rec: dict[str, Any]) -> dict[str, Any]:
    """A SWE-bench record as a cheetah task dict (validated by the caller)."""
    out: dict[str, Any] = {
        "id": rec.get("instance_id"),
        "query": rec.get("problem_statement"),
        "reference_patch": rec.get("patch"),
        "test_patch": rec.get("test_patch"),
        "fail_to_pass": _json_list(rec.get("FAIL_TO_PASS", []), "FAIL_TO_PASS"),
        "pass_to_pass": _json_list(rec.get("PASS_TO_PASS", []), "PASS_TO_PASS"),
        "kind": "bugfix",
        "tags": ["swe-bench", *([rec["repo"]] if rec.get("repo") else [])],
    }
    if "snapshot" in rec:
        out["snapshot"] = rec["snapshot"]
    elif rec.get("repo"):
        out["snapshot"] = {
            "git": f"https://github.com/{rec['repo']}",
            "commit": rec.get("base_commit"),
        }
    for key in ("setup", "split", "tier", "scope", "hidden_files", "test_command"):
        if key in rec:
            out[key] = rec[key]
    return out


def field_errors(e: ValidationError) -> list[str]:
    """``field.path: message`` for each problem pydantic found."""
    lines = []
    for err in e.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(record)"
        lines.append(f"{loc}: {err['msg']}")
    return lines


def parse_tasks(lines: Iterable[str], source: str, base: Path) -> list[Task]:
    """Tasks from JSONL text lines; raise ``TaskFileError`` naming each bad line and field."""
    tasks: list[Task] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    for n, raw in enumerate(lines, 1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        where = f"{source}:{n}"
        try:
            rec = json.loads(text)
        except json.JSONDecodeError as e:
            problems.append(f"{where}: not valid JSON: {e.msg} (column {e.colno})")
            continue
        if not isinstance(rec, dict):
            problems.append(f"{where}: expected a JSON object, got {type(rec).__name__}")
            continue
        try:
            data = from_swebench(rec) if "instance_id" in rec else rec
            task = Task.model_validate(data)
        except ValidationError as e:
            problems.extend(f"{where}: {msg}" for msg in field_errors(e))
            continue
        except ValueError as e:
            problems.append(f"{where}: {e}")
            continue
        if task.id in seen:
            problems.append(f"{where}: id: {task.id!r} already used on line {seen[task.id]}")
            continue
        seen[task.id] = n
        task.snapshot = task.snapshot.resolved(base)
        if task.env:
            env = Path(task.env).expanduser()
            task.env = str(env if env.is_absolute() else (base / env).resolve())
        task.source, task.line = source, n
        tasks.append(task)
    if problems:
        raise TaskFileError(problems)
    return tasks


def load_tasks(path: str | Path) -> list[Task]:
    """All tasks in a JSONL file, or in the bundled task set ``path`` names (``cheetah.bundled``)."""
    path = bundled.task_file(path)
    try:
        if path.suffix == ".xz":  # large sets ship compressed (real.jsonl.xz: 31 MB -> 0.3 MB)
            with lzma.open(path, "rt", encoding="utf-8") as fh:
                text = fh.read()
        else:
            text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TaskFileError(
            [bundled.missing(path, "task file", bundled.TASK_SETS, ".jsonl", ".jsonl.xz")]
        ) from None
    except UnicodeDecodeError as e:
        raise TaskFileError([f"{path}: not UTF-8 text: {e}"]) from None
    except lzma.LZMAError as e:
        raise TaskFileError([f"{path}: not an xz file: {e}"]) from None
    return parse_tasks(text.splitlines(), str(path), path.resolve().parent)


def select_tasks(
    tasks: list[Task],
    *,
    split: str | None = None,
    tier: str | list[str] | None = None,
    ids: list[str] | None = None,
    tag: str | list[str] | None = None,
    limit: int | None = None,
) -> list[Task]:
    """Filter by split, tier (one, or any of several), ids (in file order) and a tag (one,
    or any of several), then keep the first ``limit``."""
    tiers = {tier} if isinstance(tier, str) else set(tier or ())
    tags = {tag} if isinstance(tag, str) else set(tag or ())
    out = [
        t
        for t in tasks
        if (split is None or t.split == split)
        and (not tiers or t.tier in tiers)
        and (not ids or t.id in ids)
        and (not tags or not tags.isdisjoint(t.tags))
    ]
    return out[:limit] if limit else out


def spread(tasks: list[Task], limit: int) -> list[Task]:
    """At most ``limit`` tasks, shared equally by their tiers (in the order they first
    appear) and evenly spaced over the file within each, so every repo stays in."""
    if limit <= 0 or limit >= len(tasks):
        return tasks
    by_tier: dict[str | None, list[Task]] = {}
    for t in tasks:
        by_tier.setdefault(t.tier, []).append(t)
    chosen: set[str] = set()
    share, extra = divmod(limit, len(by_tier))
    for i, of in enumerate(by_tier.values()):
        n, k = len(of), min(len(of), share + (i < extra))
        chosen.update(of[j * n // k].id for j in range(k))
    return [t for t in tasks if t.id in chosen]


def dump_tasks(tasks: Iterable[Task], path: str | Path) -> Path:
    """Write tasks as JSONL (one compact object a line)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for t in tasks:
            f.write(t.model_dump_json(exclude_none=True) + "\n")
    return path
