"""Build ``cheetah/data/tasks/benchmark.jsonl`` from the task specs in ``cheetah/data/tasks/specs/``.

Each spec names a repo under ``cheetah/data/tasks/repos/`` (the clean, correct code) and how
the task differs from it:

- ``Bug``: the snapshot patch injects a bug (``good`` -> ``bad`` in one file); the
  reference patch undoes it.
- ``Change`` (feature or refactor): the snapshot is the clean repo; the reference
  patch is the given edits; hidden test files check the result.
- ``WriteTests``: the agent writes a test file; a hidden script checks that those
  tests pass on the real code and fail on each hidden mutant.

Fail-to-pass and pass-to-pass ids are not written by hand: the builder runs the
repo's tests (plus the hidden ones) with and without the reference patch and takes
the tests that flip, and the ones that pass in both. Run it after editing a repo or
a spec, then ``cheetah tasks validate benchmark``.

    python cheetah/data/tasks/build.py
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from cheetah.tasks.pytest_run import parse_pytest_outcomes
from cheetah.tasks.patch import apply_patch, diff_texts

HERE = Path(__file__).resolve().parent
REPOS = HERE / "repos"
OUT = HERE / "benchmark.jsonl"
CHECK_SCRIPT = ".grading/check_tests.py"
PYTEST = [sys.executable, "-m", "pytest", "-rA", "-q", "-p", "no:cacheprovider"]
PYTEST += ["--continue-on-collection-errors"]

CHECK_TESTS = '''\
"""Grading helper (hidden): the tests in argv[1] must pass on the code as it is and fail
on every mutant under .grading/mutants/N/ (each holds replacement files)."""

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

root = Path.cwd()
test = sys.argv[1]
if not (root / test).is_file():
    sys.exit(f"no test file {test}")


def passes(repo):
    argv = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", test]
    try:
        proc = subprocess.run(argv, cwd=repo, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return False, "timed out"
    return proc.returncode == 0, proc.stdout[-1500:]


ok, out = passes(root)
if not ok:
    sys.exit(f"the tests in {test} fail on the correct code:\\n{out}")
for mutant in sorted((root / ".grading" / "mutants").iterdir()):
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "repo"
        shutil.copytree(root, copy, ignore=shutil.ignore_patterns(".grading", "__pycache__"))
        for f in mutant.rglob("*"):
            if f.is_file():
                (copy / f.relative_to(mutant)).write_text(f.read_text())
        if passes(copy)[0]:
            sys.exit(f"mutant {mutant.name} survives: the tests in {test} do not catch it")
print("the tests pass on the code and catch every mutant")
'''


@dataclass
class Bug:
    id: str
    repo: str
    query: str
    file: str
    good: str
    bad: str
    tier: str = "standard"
    split: str = "train"
    scope: list[str] | None = None
    hidden: dict[str, str] = field(default_factory=dict)
    kind: str = "bugfix"


@dataclass
class Change:
    id: str
    repo: str
    query: str
    kind: str  # feature | refactor
    edits: list[tuple[str, str | None, str]]  # (file, old, new); old None: a new file
    hidden: dict[str, str]
    tier: str = "standard"
    split: str = "train"
    scope: list[str] | None = None


@dataclass
class WriteTests:
    id: str
    repo: str
    query: str
    test_file: str
    reference: str  # the content of a good test file
    mutants: list[tuple[str, str, str]]  # (file, good, bad)
    tier: str = "standard"
    split: str = "train"
    kind: str = "tests"


def _read(root: Path, rel: str) -> str:
    return (root / rel).read_text(encoding="utf-8")


def _replace_once(text: str, old: str, new: str, where: str) -> str:
    if text.count(old) != 1:
        raise SystemExit(f"{where}: expected exactly one match of {old[:60]!r}")
    return text.replace(old, new, 1)


def _edits_patch(root: Path, edits: list[tuple[str, str | None, str]], where: str) -> str:
    files: dict[str, str | None] = {}
    after: dict[str, str] = {}
    for rel, old, new in edits:
        if rel not in files:
            files[rel] = _read(root, rel) if (root / rel).exists() else None
            after[rel] = files[rel] or ""
        after[rel] = new if old is None else _replace_once(after[rel], old, new, where)
    return "".join(diff_texts(rel, files[rel], after[rel]) for rel in files)


def _outcomes(repo: Path, hidden: dict[str, str], patches: list[str]) -> dict[str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "repo"
        shutil.copytree(repo, work, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
        for p in patches:
            apply_patch(work, p)
        for rel, content in hidden.items():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / rel).write_text(content, encoding="utf-8")
        proc = subprocess.run(
            [*PYTEST, "tests"],
            cwd=work,
            capture_output=True,
            text=True,
            env={"PYTHONDONTWRITEBYTECODE": "1", "PATH": "/usr/bin:/bin"},
            timeout=300,
        )
        return parse_pytest_outcomes(proc.stdout)


def build_one(spec: Bug | Change | WriteTests) -> dict:
    repo = REPOS / spec.repo
    pkg = spec.repo if (repo / spec.repo).is_dir() else ""
    snapshot: dict = {"dir": f"repos/{spec.repo}"}
    hidden: dict[str, str] = {}
    extra_checks: list[dict] = []
    if isinstance(spec, Bug):
        good_text = _read(repo, spec.file)
        bad_text = _replace_once(good_text, spec.good, spec.bad, spec.id)
        snapshot["patch"] = diff_texts(spec.file, good_text, bad_text)
        reference = diff_texts(spec.file, bad_text, good_text)
        hidden = dict(spec.hidden)
        scope = spec.scope or ([spec.file] if spec.tier == "easy" else [f"{pkg}/*", "tests/*"])
    elif isinstance(spec, Change):
        reference = _edits_patch(repo, spec.edits, spec.id)
        hidden = dict(spec.hidden)
        scope = spec.scope or [f"{pkg}/*", "tests/*"]
    else:
        reference = diff_texts(spec.test_file, None, spec.reference)
        hidden = {CHECK_SCRIPT: CHECK_TESTS}
        for n, (rel, good, bad) in enumerate(spec.mutants, 1):
            text = _replace_once(_read(repo, rel), good, bad, f"{spec.id} mutant {n}")
            hidden[f".grading/mutants/{n}/{rel}"] = text
        extra_checks = [
            {"command": f"python {CHECK_SCRIPT} {spec.test_file}", "name": "tests catch mutants"}
        ]
        scope = ["tests/*"]
    start = [snapshot["patch"]] if "patch" in snapshot else []
    before = _outcomes(repo, hidden, start)
    after = _outcomes(repo, hidden, [*start, reference])
    if isinstance(spec, WriteTests):  # the agent's test names are its own: check by command
        after = {k: v for k, v in after.items() if not k.startswith(spec.test_file)}
    broken = sorted(k for k, v in after.items() if v != "PASSED")
    if broken:
        raise SystemExit(f"{spec.id}: tests fail with the reference patch: {broken}")
    f2p = sorted(k for k in after if before.get(k) != "PASSED")
    p2p = sorted(k for k in after if before.get(k) == "PASSED")
    if not f2p and not extra_checks:
        raise SystemExit(f"{spec.id}: no test fails before the reference patch")
    return {
        "id": spec.id,
        "query": spec.query,
        "snapshot": snapshot,
        "fail_to_pass": [*f2p, *extra_checks],
        "pass_to_pass": p2p,
        "hidden_files": hidden,
        "reference_patch": reference,
        "scope": scope,
        "kind": spec.kind,
        "tier": spec.tier,
        "split": spec.split,
        "tags": [spec.repo, spec.kind, spec.tier],
    }


def load_specs() -> list[Bug | Change | WriteTests]:
    specs = []
    for path in sorted((HERE / "specs").glob("*.py")):
        mod_spec = importlib.util.spec_from_file_location(f"specs_{path.stem}", path)
        assert mod_spec and mod_spec.loader
        module = importlib.util.module_from_spec(mod_spec)
        sys.modules[mod_spec.name] = module
        mod_spec.loader.exec_module(module)
        specs.extend(getattr(module, "TASKS", []))
    return specs


def main() -> None:
    sys.modules.setdefault("build", sys.modules[__name__])
    specs = load_specs()
    records = []
    for spec in specs:
        records.append(build_one(spec))
        print(f"{spec.id}: {len(records[-1]['fail_to_pass'])} fail-to-pass", file=sys.stderr)
    OUT.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    print(f"wrote {len(records)} tasks to {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
