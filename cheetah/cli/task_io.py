"""``cheetah tasks fetch|import|export``: real code in, the field's task format in and out.

Parsing and printing only; the work lives in ``cheetah.tasks.fetch`` and
``cheetah.tasks.swebench``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from cheetah import bundled


def _fetch(args: argparse.Namespace) -> int:
    from cheetah.tasks.fetch import FetchError, fetch_packages, load_package_list, select

    given = args.list is not None
    listed = args.list if given else bundled.DATA / "packages.toml"
    try:
        packages = load_package_list(listed)
        if args.only:
            packages, unknown = select(packages, args.only, from_shipped=not given)
            for name, holding in sorted(unknown.items()):
                where = (
                    f"; it is in {', '.join(map(str, holding))} (pass --list)" if holding else ""
                )
                print(f"cheetah tasks fetch: {name} is not in {listed}{where}", file=sys.stderr)
            if unknown:
                return 2
    except FetchError as e:
        print(f"cheetah tasks fetch: {e}", file=sys.stderr)
        return 2
    print(f"archives: looked up in {args.cache} ({args.cache}/<sha256>/<file> or "
          f"{args.cache}/<file>), else downloaded from {args.index_url}", flush=True)  # fmt: skip
    total = len(packages)
    count = {"n": 0}

    def done(pkg, repo, error) -> None:
        count["n"] += 1
        what = f"-> {repo.path} ({repo.license})" if repo else f"FAILED: {error}"
        print(f"[{count['n']}/{total}] {pkg.name} {pkg.version} {what}", flush=True)

    envs = None if args.no_envs else args.envs
    repos, failed = fetch_packages(packages, args.out, args.cache, args.index_url, done, envs)
    print(f"{len(repos)}/{total} repos laid out in {args.out} (licenses in fetched.json)")
    return 1 if failed else 0


def _import(args: argparse.Namespace) -> int:
    from cheetah.tasks.loaders import TaskFileError, dump_tasks
    from cheetah.tasks.swebench import SwebenchError, import_instances, read_instances

    try:
        records = read_instances(args.file)
        tasks = import_instances(records, args.repos, str(args.file))
    except SwebenchError as e:
        print(f"cheetah tasks import: {e}", file=sys.stderr)
        return 2
    except TaskFileError as e:
        print(f"cheetah tasks import: {len(e.problems)} bad records:", file=sys.stderr)
        for p in e.problems:
            print(f"  {p}", file=sys.stderr)
        return 2
    dump_tasks(tasks, args.out)
    print(f"{len(tasks)} tasks written to {args.out} (check them: cheetah tasks validate)")
    return 0


def _export(args: argparse.Namespace) -> int:
    from cheetah.cli.task_common import load_task_file
    from cheetah.tasks.swebench import export_tasks, write_instances

    tasks = load_task_file(args.file, args, "tasks export")
    if tasks is None:
        return 2
    result = export_tasks(tasks, args.repos)
    write_instances(result.records, args.out)
    for task_id, why in result.skipped.items():
        print(f"skipped {task_id}: {why}", file=sys.stderr)
    print(
        f"{len(result.records)} instances written to {args.out} "
        f"({len(result.skipped)} skipped); their repos are git repos under {args.repos}"
    )
    return 0 if result.records else 1


def _add_fetch(sub: argparse._SubParsersAction) -> None:
    from cheetah.tasks.fetch import DEFAULT_INDEX
    from cheetah.tasks.fetched import cache_home, envs_dir, repos_dir

    f = sub.add_parser(
        "fetch",
        help="download pinned source archives from the package index and lay them out as repos",
        description="For each package of the list (name, version, file, sha256, license): "
        "take its source archive from --cache (CACHE/<sha256>/<file>, or laid flat as "
        "CACHE/<file>) when a file there has the pinned sha256, else download it into "
        "CACHE/<sha256>/; refuse it if its sha256 differs, extract it as a repo under --out "
        "(src/ layouts flattened), build its Python environment under --envs and record its "
        "license in --out/fetched.json. The default "
        "list holds permissively licensed pure-Python packages whose archives carry their "
        "tests. Exit status 1 if any package failed (the others are still laid out).",
    )
    f.add_argument(
        "--list",
        type=Path,
        help="package list (TOML, [[package]] tables; default: the bundled packages.toml, and "
        "for --only names not in it, the other shipped lists)",
    )
    f.add_argument("--out", type=Path, default=repos_dir(), help="where repos are laid out")
    f.add_argument(
        "--cache",
        type=Path,
        default=cache_home() / "sdists",
        help="archives: CACHE/<sha256>/<file> (what fetch downloads) or CACHE/<file> (laid "
        "flat, e.g. copied in by hand); used when the sha256 matches the pin",
    )
    f.add_argument(
        "--index-url",
        default=os.environ.get("PIP_INDEX_URL", DEFAULT_INDEX),
        help="the package index's simple API (default: $PIP_INDEX_URL or PyPI)",
    )
    f.add_argument(
        "--only",
        nargs="+",
        metavar="NAME",
        help="fetch only these packages (from --list; without --list, also from the other "
        "shipped lists)",
    )
    f.add_argument(
        "--envs",
        type=Path,
        default=envs_dir(),
        help="where each repo's Python environment is built (ENVS/<repo>: pytest, the repo's "
        "requirements and the list's test_requires, installed by pip from the index)",
    )
    f.add_argument("--no-envs", action="store_true", help="lay out the repos only")
    f.set_defaults(func=_fetch)


def add_io_verbs(sub: argparse._SubParsersAction) -> None:
    from cheetah.cli.task_common import task_filters

    _add_fetch(sub)
    i = sub.add_parser(
        "import",
        help="turn SWE-bench-style instances into a cheetah task file",
        description="Read SWE-bench instances (JSONL or a JSON array: instance_id, repo, "
        "base_commit, patch, test_patch, problem_statement, FAIL_TO_PASS, PASS_TO_PASS) and "
        "write cheetah tasks whose snapshots are local clones under --repos (owner__name or "
        "name) at base_commit, stored as absolute paths. A repo that is a path (absolute, "
        "'..') or whose clone resolves outside --repos is refused. Every bad record is named.",
    )
    i.add_argument("file", type=Path, help="SWE-bench instances")
    i.add_argument("--format", choices=["swebench"], default="swebench", help="input format")
    i.add_argument("--repos", type=Path, required=True, help="folder of local git clones")
    i.add_argument("--out", type=Path, required=True, help="task file to write (JSONL)")
    i.set_defaults(func=_import)

    e = sub.add_parser(
        "export",
        help="write a cheetah task file as SWE-bench-style instances",
        description="Commit each task's starting tree in a git repo under --repos (branch "
        "tasks/<id>; that commit is base_commit) and write one SWE-bench instance per task; "
        "test_patch holds what grading adds (hidden files and the task's test patch). Tasks "
        "with shell-command checks are skipped with the reason.",
    )
    e.add_argument("file", type=Path, help="task file (JSONL), or a bundled set's name")
    e.add_argument("--format", choices=["swebench"], default="swebench", help="output format")
    e.add_argument("--repos", type=Path, required=True, help="where the git repos are written")
    e.add_argument("--out", type=Path, required=True, help="instances file to write (JSONL)")
    task_filters(e)
    e.set_defaults(func=_export)
