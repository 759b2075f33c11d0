"""Generality: do packages the generator was never tuned on yield validated tasks? (issue 49)

For each package of a list (TOML, the format of ``cheetah/data/packages.toml``; default: the
held-out-style ``cheetah/data/packages-generality.toml``, chosen by the rule in BENCHMARKS.md):
``tasks fetch`` (archive, repo, its Python environment), ``tasks curriculum`` on that repo alone
(how its tests run is found by the generator, no hand edits), then ``tasks validate`` on the
first ``--validate`` generated mutants (every tier of one mutant runs the same checks, so one
task per mutant). Prints one markdown row per package as it finishes, and writes every row to
``--report`` (default ``OUT/generality.json``):

    package | runner detected | baseline s | mutants kept | tasks | validated | cause of a skip

A package "yields validated tasks" when at least one of its tasks validates. Runs in isolated
sandbox sessions by default, as ``tasks curriculum`` does.

    .venv/bin/python bench/generality.py --out /tmp/generality [--list FILE] [--only NAME ...]

Deliberately left out: running packages in parallel (one machine's cores go to each
package's own test runs) and validating every tier of every mutant.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path

from cheetah import bundled
from cheetah.tasks.curriculum import build_curriculum
from cheetah.tasks.fetch import FetchError, fetch_packages, load_package_list
from cheetah.tasks.generate import GenerateConfig
from cheetah.tasks.session import local_sessions
from cheetah.tasks.validate import validate_tasks

COLUMNS = (
    "package",
    "runner detected",
    "baseline s",
    "mutants kept",
    "tasks",
    "validated",
    "cause of a skip",
)


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return (lines[0] if lines else "?")[:500].replace("|", "/")


async def one_package(pkg, args: argparse.Namespace, sessions) -> dict:
    out: Path = args.out
    row = {"package": f"{pkg.name} {pkg.version}", "runner detected": "-", "baseline s": "-",
           "mutants kept": 0, "tasks": 0, "validated": "-", "cause of a skip": ""}  # fmt: skip
    t0 = time.monotonic()
    repos, failed = await asyncio.to_thread(
        fetch_packages, [pkg], out / "repos", args.cache, envs=out / "envs"
    )
    if failed:
        row["cause of a skip"] = "fetch: " + _first_line(next(iter(failed.values())))
        return row
    [repo] = repos
    config = GenerateConfig(
        max_mutants=args.max_mutants,
        max_tasks=args.max_mutants,
        concurrency=args.concurrency,
        timeout_s=args.timeout,
    )
    skipped: dict[str, str] = {}
    results: dict = {}
    tasks, stats = await build_curriculum(
        [Path(repo.path)],
        out / "tasks",
        heldout_repos=set(),
        config=config,
        sessions=sessions,
        envs=out / "envs",
        skipped=skipped,
        results=results,
    )
    if skipped:
        row["cause of a skip"] = _first_line(next(iter(skipped.values())))
        row["wall s"] = round(time.monotonic() - t0)
        return row
    result = results[repo.name]
    s = stats[repo.name]
    row.update({"runner detected": result.runner, "baseline s": f"{result.baseline_s:.1f}",
                "mutants kept": s["killed"] - s["duplicates"], "tasks": len(tasks)})  # fmt: skip
    behaviour = [t for t in tasks if t.tier == "behaviour"][: args.validate]
    if behaviour:
        checked = await validate_tasks(behaviour, sessions, concurrency=args.concurrency)
        row["validated"] = f"{sum(v.ok for v in checked)}/{len(checked)}"
        bad = [p for v in checked for p in v.problems]
        if bad and not any(v.ok for v in checked):
            row["cause of a skip"] = "validate: " + _first_line(bad[0])
    else:
        row["cause of a skip"] = "no mutant made a baseline-passing test fail"
    row["wall s"] = round(time.monotonic() - t0)
    return row


async def main(args: argparse.Namespace) -> None:
    # Tasks name fetched repos by package; sessions find them (and their envs) here.
    os.environ["CHEETAH_REPOS_DIR"] = str((args.out / "repos").resolve())
    os.environ["CHEETAH_ENVS_DIR"] = str((args.out / "envs").resolve())
    packages = load_package_list(args.list)
    if args.only:
        packages = [p for p in packages if p.name in args.only or p.repo_name in args.only]
    sessions = local_sessions(args.sandbox)
    print("| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS), flush=True)
    rows = []
    for pkg in packages:
        try:
            row = await one_package(pkg, args, sessions)
        except FetchError as e:
            row = {"package": f"{pkg.name} {pkg.version}", "cause of a skip": f"fetch: {e}"}
        rows.append(row)
        print("| " + " | ".join(str(row.get(c, "-")) for c in COLUMNS) + " |", flush=True)
        (args.report or args.out / "generality.json").write_text(json.dumps(rows, indent=1) + "\n")
    good = sum(str(r.get("validated", "-")).split("/")[0] not in ("-", "0") for r in rows)
    print(f"\n{good}/{len(rows)} packages yield validated tasks")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--list", type=Path, default=bundled.DATA / "packages-generality.toml")
    p.add_argument("--out", type=Path, required=True, help="work folder (repos, envs, tasks)")
    p.add_argument("--cache", type=Path, default=Path.home() / ".cache/cheetah/sdists")
    p.add_argument("--only", nargs="+", metavar="NAME")
    p.add_argument("--report", type=Path, help="rows as JSON (default: OUT/generality.json)")
    p.add_argument("--max-mutants", type=int, default=12, help="mutants tried per package")
    p.add_argument("--validate", type=int, default=2, help="mutants validated per package")
    p.add_argument("--timeout", type=float, help="seconds per test run (default: measured)")
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--sandbox", choices=["isolated", "local"], default="isolated")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    asyncio.run(main(args))
