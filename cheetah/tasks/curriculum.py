"""A training curriculum from the project's own generator: tiers, held-out functions, held-out repos.

For every repo, ``generate.generate_tasks`` mutates the code and keeps the mutants its
tests catch (each task's reference patch is the minimal edit that undoes the mutant,
so the oracle demonstrations make minimal edits). Each kept mutant then becomes up to
five tasks of decreasing help, the curriculum's tiers:

- ``line``: the query names the file and the function and quotes the line that holds
  the one inverted operator (only when that line's text is unique in the file); the
  skill is to make an exact, minimal edit through the tools, not to find the bug;
- ``locate``: the query quotes that line but names neither file nor function (only when
  the line's text is unique in the repo's Python files): the agent must search for it
  (``grep``, ``codebase_search``) before it can edit;
- ``named``: the query names the file and the function, and the bug is one inverted
  operator (``compare`` and ``arith`` mutants only);
- ``file``: the query names the file and what fails;
- ``behaviour``: only the failing behaviour (the generator's own query).

Splits. Held-out tasks are chosen by *function*: a stable hash of (repo, file, function)
puts about ``heldout_fraction`` of the functions in ``heldout``, with every tier of every
mutant in them, so no held-out function is ever trained on. Whole repos named in
``heldout_repos`` are never trained on either (tagged ``heldout-repo``), to measure
transfer. Snapshot paths are written relative to the output file's directory.

Deliberately left out: checking that a query does not leak the fix (the generator's
queries never quote the mutated line; the ``named`` tier names the function on purpose).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

from cheetah.tasks.generate import GenerateConfig, GenerateError, GenerateResult, generate_tasks
from cheetah.tasks.patch import FilePatch, parse_patch, patch_files
from cheetah.tasks.schema import Task
from cheetah.tasks.session import TaskSessionOpener
from cheetah.tasks.suite_layout import SuiteSettings

TIERS = ("line", "locate", "named", "file", "behaviour")
INVERTED = frozenset({"compare", "arith", "boolop"})  # one operator replaced by its opposite


def enclosing_function(source: str, line: int) -> str | None:
    """The innermost function or method (``Class.method``) around ``line``, or None."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    best: tuple[int, str] | None = None

    def visit(node: ast.AST, prefix: str) -> None:
        nonlocal best
        for child in ast.iter_child_nodes(node):
            name = getattr(child, "name", None)
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                qual = f"{prefix}{name}"
                end = getattr(child, "end_lineno", child.lineno)
                inside = child.lineno <= line <= end and not isinstance(child, ast.ClassDef)
                if inside and (best is None or child.lineno >= best[0]):
                    best = (child.lineno, qual)
                visit(child, qual + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return best[1] if best else None


def _bucket(key: str) -> float:
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) / 16**8


def _failing(task: Task) -> str:
    tests = [c.test for c in task.fail_to_pass if c.test]
    more = f" (and {len(tests) - 1} more)" if len(tests) > 1 else ""
    return f"{tests[0]}{more}" if tests else "a test"


def _changed_line(fp: FilePatch) -> str | None:
    """The one line a single-line hunk changes, without its indentation (None otherwise)."""
    if len(fp.hunks) != 1:
        return None
    h = fp.hunks[0]
    if len(h.old) != len(h.new):
        return None
    changed = [old for old, new in zip(h.old, h.new, strict=True) if old != new]
    return changed[0].strip() if len(changed) == 1 else None


@functools.lru_cache(maxsize=1)  # tasks come repo by repo: each repo's files are read once
def _python_texts(repo_dir: Path) -> dict[str, str]:
    """The repo's Python files outside hidden directories, by relative path."""
    out = {}
    for f in sorted(repo_dir.rglob("*.py")):
        rel = f.relative_to(repo_dir)
        if not any(part.startswith(".") for part in rel.parts):
            out[rel.as_posix()] = f.read_text(encoding="utf-8", errors="replace")
    return out


def _count_in_repo(repo_dir: Path, path: str, mutated: str, text: str) -> int:
    """How often ``text`` occurs in the repo's Python files, ``path`` read as ``mutated``."""
    others = (t for rel, t in _python_texts(repo_dir).items() if rel != path)
    return mutated.count(text) + sum(t.count(text) for t in others)


def tiered(task: Task, repo_dir: Path, repo_name: str) -> tuple[str, list[Task]]:
    """The held-out key (repo, file, function) of one generated task and its tiers (see the
    module docstring); splits are left to the caller."""
    [fp] = parse_patch(task.reference_patch or "")
    path = fp.path
    line = fp.hunks[0].old_start + 3 if fp.hunks else 1  # diff context is 3 lines
    func = enclosing_function((repo_dir / path).read_text(encoding="utf-8"), line)
    operator = next((t for t in task.tags if t in INVERTED), None)
    fails = _failing(task)
    out = []
    source = (repo_dir / path).read_text(encoding="utf-8")
    mutated = patch_files(task.snapshot.patch or "", lambda p: source if p == path else None)[path]
    bad = _changed_line(fp)
    if func and operator and bad and "`" not in bad and mutated and mutated.count(bad) == 1:
        query = (
            f"`{func}` in {path} has one operator inverted, in the line `{bad}`, so {fails} "
            f"fails. Fix that line; do not change the tests."
        )
        out.append(
            task.model_copy(update={"id": f"{task.id}-line", "tier": "line", "query": query})
        )
        if _count_in_repo(repo_dir, path, mutated, bad) == 1:
            query = (
                f"One operator is inverted in the line `{bad}` somewhere in this repository, "
                f"so {fails} fails. Find that line and fix it; do not change the tests."
            )
            update = {"id": f"{task.id}-locate", "tier": "locate", "query": query}
            out.append(task.model_copy(update=update))
    if func and operator:
        query = (
            f"`{func}` in {path} has one operator inverted, so {fails} fails. "
            f"Fix `{func}`; do not change the tests."
        )
        out.append(
            task.model_copy(update={"id": f"{task.id}-named", "tier": "named", "query": query})
        )
    query = f"A bug in {path} makes {fails} fail. Fix it; do not change the tests."
    out.append(task.model_copy(update={"id": f"{task.id}-file", "tier": "file", "query": query}))
    out.append(task.model_copy(update={"id": f"{task.id}-behaviour", "tier": "behaviour"}))
    for t in out:
        t.tags = sorted({*t.tags, "curriculum", f"function:{path}:{func or '?'}"})
    return f"{repo_name}:{path}:{func or '?'}", out  # '?': module-level code, one unit


def _fetched_as(repo: Path) -> tuple[str | None, SuiteSettings | None]:
    """``name==version`` when ``repo`` is one ``tasks fetch`` laid out (its ``fetched.json``),
    and how its package list says its tests run."""
    try:
        records = json.loads((repo.parent / "fetched.json").read_text())
        r = next(r for r in records if r["name"] == repo.name)
        said = SuiteSettings(
            r.get("test_command"), tuple(r.get("test_paths") or ()), "the package list"
        )
        return f"{r['name']}=={r['version']}", said
    except (OSError, ValueError, KeyError, TypeError, StopIteration, AttributeError):
        return None, None


async def build_curriculum(
    repos: list[Path],
    out_dir: Path,
    *,
    heldout_repos: set[str],
    heldout_fraction: float = 0.2,
    config: GenerateConfig | None = None,
    on_progress: Callable[[str, int, int, int], None] | None = None,
    sessions: TaskSessionOpener | None = None,
    envs: Path | None = None,
    skipped: dict[str, str] | None = None,
    results: dict[str, GenerateResult] | None = None,
) -> tuple[list[Task], dict[str, dict[str, int]]]:
    """Tasks for every repo (see the module docstring) and the generator's stats per repo.
    Test runs go to ``sessions`` (None: unsandboxed copies, trusted repos only); a repo with
    an environment under ``envs`` (``envs/<repo name>``, as ``tasks fetch`` builds them) runs
    its tests with it, and its tasks name it. A repo the generator cannot use (no passing
    test at baseline, no source) is left out and named, with why, in ``skipped``; ``results``
    gets each repo's generator result (how its tests ran, the baseline's time, the limit)."""
    skipped = {} if skipped is None else skipped
    config = config or GenerateConfig()
    tasks: list[Task] = []
    stats: dict[str, dict[str, int]] = {}
    for repo in repos:
        repo = repo.resolve()
        name = repo.name

        def tick(total: int, done: int, kept: int, name: str = name) -> None:
            if on_progress:
                on_progress(name, total, done, kept)

        env = envs / name if envs is not None and (envs / name).is_dir() else None
        cfg = config.model_copy(
            update={"id_prefix": name, "heldout_fraction": 0.0, "env": str(env) if env else None}
        )
        package, said = _fetched_as(repo)
        try:
            result = await generate_tasks(
                repo, cfg, on_progress=tick, sessions=sessions, suggested=said
            )
        except GenerateError as e:  # e.g. its baseline suite does not pass here: skipped
            skipped[name] = str(e)
            continue
        stats[name] = result.stats
        if results is not None:
            results[name] = result
        rel = os.path.relpath(repo, out_dir.resolve())
        for base in result.tasks:
            key, tiers = tiered(base, repo, name)
            for t in tiers:
                held = name in heldout_repos or _bucket(key) < heldout_fraction
                t.split = "heldout" if held else "train"
                if name in heldout_repos:
                    t.tags = sorted({*t.tags, "heldout-repo"})
                if package:  # fetched real code: named, not copied (tasks/fetched.py)
                    t.snapshot = t.snapshot.model_copy(update={"dir": None, "package": package})
                    t.env = None  # the package's own, found where tasks fetch built it
                else:
                    t.snapshot = t.snapshot.model_copy(update={"dir": rel})
                    if env is not None:  # relative to the task file, as the snapshot is
                        t.env = os.path.relpath(env, out_dir.resolve())
                tasks.append(t)
    return tasks, stats
