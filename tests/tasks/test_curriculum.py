"""The curriculum: tiers from generated mutants, held out by function and by whole repo."""

import json
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
        if t.tier in ("line", "locate"):  # the quoted line is the mutated one, and unique
            quoted = t.query.split("in the line `", 1)[1].split("`", 1)[0]
            removed = [x[1:].strip() for x in t.reference_patch.splitlines() if x[:2] == "- "]
            assert [quoted] == removed
        if t.tier == "locate":  # ... but where it is, the agent must find
            [source] = {x[6:] for x in t.reference_patch.splitlines() if x.startswith("+++ b/")}
            assert source not in t.query and "`" + quoted + "`" in t.query
            assert any(o.id == t.id.replace("-locate", "-line") for o in tasks)
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
    assert len(tasks) >= 400 and tiers == {"line", "locate", "named", "file", "behaviour"}
    for tier in ("line", "locate"):  # what the quickstart config evaluates: 32 of each
        assert sum(t.tier == tier and t.split == "heldout" for t in tasks) >= 32
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


async def test_unusable_repos_are_skipped_and_fetched_ones_named_by_package(tmp_path):
    good, broken = tmp_path / "good", tmp_path / "broken"
    for repo in (good, broken):
        shutil.copytree(SAMPLE_REPO, repo, ignore=shutil.ignore_patterns("__pycache__"))
    for test in (broken / "tests").glob("test_*.py"):
        test.write_text("def test_fails():\n    assert False\n")
    (tmp_path / "fetched.json").write_text(json.dumps([{"name": "good", "version": "1.2"}]))
    skipped: dict[str, str] = {}
    cfg = GenerateConfig(max_mutants=6, max_tasks=6, seed=1)
    tasks, stats = await build_curriculum(
        [good, broken], tmp_path, heldout_repos=set(), config=cfg, skipped=skipped
    )
    assert list(stats) == ["good"] and "no test passed" in skipped["broken"]
    assert tasks and all(t.snapshot.package == "good==1.2" and not t.snapshot.dir for t in tasks)


def test_the_shipped_real_code_curriculum_names_pinned_packages():
    from cheetah import bundled
    from cheetah.tasks.fetch import load_package_list
    from cheetah.tasks.loaders import load_tasks

    tasks = load_tasks("real")  # real.jsonl.xz: read without fetching anything
    pinned = {f"{p.name}=={p.version}" for p in load_package_list(bundled.DATA / "packages.toml")}
    assert len(tasks) >= 2000
    assert {t.tier for t in tasks} == {"line", "locate", "named", "file", "behaviour"}
    assert all(t.snapshot.package in pinned and t.snapshot.dir is None for t in tasks)
    held_repos = {t.snapshot.package for t in tasks if "heldout-repo" in t.tags}
    assert len(held_repos) >= 3
    assert not any(t.split == "train" for t in tasks if t.snapshot.package in held_repos)
    split_of: dict[tuple[str, str], set[str]] = {}
    for t in tasks:
        if t.snapshot.package not in held_repos:
            func = next(tag for tag in t.tags if tag.startswith("function:"))
            split_of.setdefault((t.snapshot.package, func), set()).add(t.split)
    assert all(len(s) == 1 for s in split_of.values())  # no held-out function is trained on
    assert 0 < sum(s == {"heldout"} for s in split_of.values()) < len(split_of)
