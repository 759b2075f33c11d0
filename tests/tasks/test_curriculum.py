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
        if t.tier in ("line", "named"):
            assert {"compare", "arith", "boolop"} & set(t.tags) and "` in " in t.query
        if t.tier == "line":  # the quoted line is the mutated one, and unique in its file
            quoted = t.query.split("in the line `", 1)[1].split("`", 1)[0]
            removed = [x[1:].strip() for x in t.reference_patch.splitlines() if x[:2] == "- "]
            assert [quoted] == removed
        if t.snapshot.dir == "repo_b":
            assert t.split == "heldout" and "heldout-repo" in t.tags
    # No function is both trained on and held out.
    split_of: dict[str, set[str]] = {}
    for t in tasks:
        if t.snapshot.dir == "repo_a":
            func = next(tag for tag in t.tags if tag.startswith("function:"))
            split_of.setdefault(func, set()).add(t.split)
    assert split_of and all(len(s) == 1 for s in split_of.values())
    assert {t.tier for t in tasks} >= {"line", "file", "behaviour"}


def test_the_shipped_curriculum_keeps_its_splits():
    from cheetah.tasks.loaders import load_tasks

    tasks = load_tasks("curriculum")
    tiers = {t.tier for t in tasks}
    assert len(tasks) >= 400 and tiers == {"line", "named", "file", "behaviour"}
    line_heldout = [t for t in tasks if t.tier == "line" and t.split == "heldout"]
    assert len(line_heldout) >= 64  # what the quickstart config evaluates
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
