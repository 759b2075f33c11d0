"""The curriculum: tiers from generated mutants, held out by function and by whole repo."""

import shutil

from cheetah.tasks.curriculum import build_curriculum, enclosing_function
from cheetah.tasks.generate import GenerateConfig
from tests.conftest import SAMPLE_REPO

SOURCE = """
def top(x):
    return x + 1


class Box:
    def size(self):
        if self.items:
            return len(self.items)
        return 0
"""


def test_enclosing_function_is_the_innermost_def():
    assert enclosing_function(SOURCE, 3) == "top"
    assert enclosing_function(SOURCE, 9) == "Box.size"
    assert enclosing_function(SOURCE, 6) is None  # the class line itself
    assert enclosing_function("def broken(:", 1) is None


async def test_tiers_and_splits(tmp_path):
    a, b = tmp_path / "repo_a", tmp_path / "repo_b"
    for repo in (a, b):
        shutil.copytree(SAMPLE_REPO, repo, ignore=shutil.ignore_patterns("__pycache__"))
    cfg = GenerateConfig(max_mutants=10, max_tasks=10, seed=1)
    tasks, stats = await build_curriculum(
        [a, b], tmp_path, heldout_repos={"repo_b"}, heldout_fraction=0.5, config=cfg
    )
    assert stats["repo_a"]["tried"] == 10 and tasks
    assert len({t.id for t in tasks}) == len(tasks)
    for t in tasks:
        assert t.snapshot.dir in ("repo_a", "repo_b")  # relative to the output's folder
        if t.tier == "named":
            assert {"compare", "arith"} & set(t.tags) and "` in " in t.query
        if t.snapshot.dir == "repo_b":
            assert t.split == "heldout" and "heldout-repo" in t.tags
    # No function is both trained on and held out.
    split_of: dict[str, set[str]] = {}
    for t in tasks:
        if t.snapshot.dir == "repo_a":
            func = next(tag for tag in t.tags if tag.startswith("function:"))
            split_of.setdefault(func, set()).add(t.split)
    assert split_of and all(len(s) == 1 for s in split_of.values())
    assert {t.tier for t in tasks} >= {"file", "behaviour"}


def test_the_shipped_curriculum_keeps_its_splits():
    from cheetah.tasks.loaders import load_tasks
    from tests.conftest import REPO_ROOT

    tasks = load_tasks(REPO_ROOT / "benchmarks" / "curriculum.jsonl")
    assert len(tasks) >= 400 and {t.tier for t in tasks} == {"named", "file", "behaviour"}
    split_of: dict[tuple[str, str], set[str]] = {}
    for t in tasks:
        repo = t.snapshot.dir.rsplit("/", 1)[-1]
        if repo == "webapi":
            assert t.split == "heldout" and "heldout-repo" in t.tags
            continue
        func = next(tag for tag in t.tags if tag.startswith("function:"))
        split_of.setdefault((repo, func), set()).add(t.split)
    assert all(len(s) == 1 for s in split_of.values())  # no held-out function is trained on
    held = sum(s == {"heldout"} for s in split_of.values())
    assert 0 < held < len(split_of)
