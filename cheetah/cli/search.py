"""``cheetah search index|query|train|train-reranker|eval|dataset``: parsing and printing;
the work is in ``cheetah.search``.

``index`` and ``query`` keep the index of a repo under ``--index-dir`` (default
``~/.cache/cheetah/search/<repo hash>-<model>``), so a later run re-embeds only the
files that changed. ``train`` fine-tunes the embedder and prints retrieval before
and after on held-out data; ``train-reranker`` trains the cross-encoder that re-ranks the
first stage's best candidates. ``dataset`` makes a retrieval data set from installed packages,
and ``eval`` compares BM25, embedders and hybrids on any such file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

from cheetah import bundled
from cheetah.cli.flags import add_flags, from_flags
from cheetah.search.train_config import EmbedderTrainConfig, RerankerTrainConfig


def _index_dir(args: argparse.Namespace, model_name: str) -> Path:
    if args.index_dir:
        return Path(args.index_dir)
    key = hashlib.sha256(str(Path(args.repo).resolve()).encode()).hexdigest()[:16]
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in model_name)
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "cheetah" / "search" / f"{key}-{safe}"


def _open_index(args: argparse.Namespace):
    from cheetah.search.embedder import EmbedderUnavailable, load_embedder
    from cheetah.search.index import CodeIndex

    if not Path(args.repo).is_dir():
        raise SystemExit(f"cheetah search: --repo {args.repo!r} is not a directory")
    try:
        embedder = load_embedder(args.embedder)
    except (EmbedderUnavailable, OSError) as e:
        raise SystemExit(f"cheetah search: cannot load embedder {args.embedder!r}: {e}") from None
    index = CodeIndex(args.repo, embedder)
    where = _index_dir(args, embedder.name)
    index.load(where)
    stats = index.update()
    index.save(where)
    print(
        f"{stats.files} files indexed; {len(stats.changed)} (re)embedded "
        f"({stats.chunks_embedded} chunks), {len(stats.removed)} removed, "
        f"{stats.wall_s:.2f} s; index at {where}",
        file=sys.stderr,
    )
    return index


def _index(args: argparse.Namespace) -> int:
    _open_index(args)
    return 0


def _query(args: argparse.Namespace) -> int:
    from cheetah.search.rerank import RerankerUnavailable, load_reranker

    index = _open_index(args)
    try:
        reranker = None if args.reranker == "none" else load_reranker(args.reranker)
    except (RerankerUnavailable, OSError) as e:
        raise SystemExit(f"cheetah search: cannot load re-ranker {args.reranker!r}: {e}") from None
    for h in index.search(args.text, k=args.k, under=args.path, hybrid=True, reranker=reranker):
        c = h.chunk
        print(f"{h.score:.3f}  {c.path}:{c.start}-{c.end}  {c.name}".rstrip())
    return 0


def _bad_package(packages: tuple[str, ...], verb: str) -> str | None:
    """Why ``packages`` cannot be trained on (reserved or not installed), or None."""
    from cheetah.search.dataset import RESERVED, package_root

    for p in packages:
        if p.split(".")[0] in RESERVED:
            return (f"cheetah search {verb}: {p} is reserved as an external test set "
                    "(search/dataset.py RESERVED)")  # fmt: skip
        if package_root(p) is None:
            return f"cheetah search {verb}: {p} is not installed here"
    return None


def _train(args: argparse.Namespace) -> int:
    from rich.console import Console

    from cheetah.cli.task_common import progress_for
    from cheetah.search.train import train_embedder

    try:
        cfg = from_flags(EmbedderTrainConfig, args, EmbedderTrainConfig.model_fields)
    except ValueError as e:
        print(f"cheetah search train: {e}", file=sys.stderr)
        return 2
    tasks = None if args.no_tasks else bundled.task_file(args.tasks)
    if tasks is not None and not tasks.is_file():
        print(f"cheetah search train: no task file {tasks}", file=sys.stderr)
        return 2
    packages = tuple(args.package) if args.package else None
    if bad := _bad_package(packages or (), "train"):
        print(bad, file=sys.stderr)
        return 2
    # A bar on a terminal, a line every ~10 s in logs (training takes minutes on CPU).
    progress, bar = progress_for(Console(stderr=True), 0, "training steps")
    with progress:

        def step(i: int, total: int, loss: float) -> None:
            progress.update(bar, completed=i, total=total, last=f"loss {loss:.3f}")

        try:
            figures = train_embedder(
                args.base, args.out, tasks, cfg, log=print, on_step=step, packages=packages
            )
        except ValueError as e:  # --lora-rank with another --base
            print(f"cheetah search train: {e}", file=sys.stderr)
            return 2
    print(f"{figures['steps']} steps in {figures['train_s']:.0f} s; model at {args.out}")
    print(f"{'corpus':<16} {'queries':>7} {'R@1 before':>10} {'R@1 after':>9} {'R@5 before':>10} "
          f"{'R@5 after':>9} {'MRR before':>10} {'MRR after':>9}")  # fmt: skip
    for b, a in zip(figures["before"], figures["after"], strict=True):
        print(
            f"{b['corpus']:<16} {b['queries']:>7} {b['recall_at_1']:>10.3f} "
            f"{a['recall_at_1']:>9.3f} {b['recall_at_5']:>10.3f} {a['recall_at_5']:>9.3f} "
            f"{b['mrr']:>10.3f} {a['mrr']:>9.3f}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return 0


def _eval(args: argparse.Namespace) -> int:
    from cheetah.search.dataset import DatasetError, read_rows
    from cheetah.search.embedder import EmbedderUnavailable, load_embedder
    from cheetah.search.ranking_eval import evaluate_rows, paired_bootstrap

    try:
        rows = read_rows(args.dataset)
    except DatasetError as e:
        print(f"cheetah search eval: {e}", file=sys.stderr)
        return 2
    specs = ([] if args.no_stock else ["stock"]) + list(args.embedder or [])
    embedders = []
    for spec in dict.fromkeys(specs):
        try:
            embedders.append(load_embedder(spec))
        except (EmbedderUnavailable, OSError) as e:
            print(f"cheetah search eval: cannot load embedder {spec!r}: {e}", file=sys.stderr)
            return 2
    reranker = None
    if args.reranker:
        from cheetah.search.rerank import RerankerUnavailable, load_reranker

        try:
            reranker = load_reranker(args.reranker)
        except (RerankerUnavailable, OSError) as e:
            print(f"cheetah search eval: cannot load re-ranker {args.reranker!r}: {e}",
                  file=sys.stderr)  # fmt: skip
            return 2
    results = evaluate_rows(
        rows, embedders, log=lambda line: print(line, file=sys.stderr), reranker=reranker
    )
    results.sort(key=lambda r: r.mrr_at_10)  # the best last
    best, figures = results[-1], []
    for r in results:
        print(f"== {r.method} ({r.queries} queries, {r.candidates} candidates)")
        print(f"R@1 {r.r_at_1:.4f}")
        print(f"R@10 {r.r_at_10:.4f}")
        print(f"MRR@10 {r.mrr_at_10:.4f}")
        figures.append(r.as_dict())
        if r is not best and r.queries:
            diff, low, high = paired_bootstrap(best.reciprocal, r.reciprocal)
            print(f"best minus this: {diff:+.4f} MRR@10 (95% interval {low:+.4f} to {high:+.4f}, "
                  "paired bootstrap over queries)")  # fmt: skip
            figures[-1]["best_minus_this"] = {"mrr_at_10": diff, "ci95": [low, high]}
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return 0


def _train_reranker(args: argparse.Namespace) -> int:
    import time

    from cheetah.search.rerank import save, train_reranker, training_groups

    try:
        cfg = from_flags(RerankerTrainConfig, args, RerankerTrainConfig.model_fields)
    except ValueError as e:
        print(f"cheetah search train-reranker: {e}", file=sys.stderr)
        return 2
    packages = tuple(args.package) if args.package else None
    if bad := _bad_package(packages or (), "train-reranker"):
        print(bad, file=sys.stderr)
        return 2
    init = None
    if args.init is not None:  # checked now, not after the minutes of mining
        from cheetah.search.rerank import INFO, reranker_dir

        init = reranker_dir(args.init)
        if not (init / INFO).is_file():
            print(f"cheetah search train-reranker: --init: {init} holds no re-ranker (no {INFO})",
                  file=sys.stderr)  # fmt: skip
            return 2
    embedder = None
    if args.mine_with != "none":
        from cheetah.search.embedder import EmbedderUnavailable, load_embedder

        try:
            embedder = load_embedder(args.mine_with)
        except EmbedderUnavailable as e:
            print(f"cheetah search train-reranker: --mine-with: {e}", file=sys.stderr)
            return 2
    t0 = time.perf_counter()
    groups = training_groups(cfg, args.per_package, print, packages, embedder)
    if len(groups) < cfg.groups:
        print(f"cheetah search train-reranker: only {len(groups)} training groups were mined",
              file=sys.stderr)  # fmt: skip
        return 2
    needed = cfg.steps * cfg.groups
    print(f"{len(groups)} training groups of 1 + {cfg.negatives} codes; {needed} used")
    enc, losses = train_reranker(groups, cfg, log=print, init=init)
    info = {"config": cfg.model_dump() | {"lora_rank": enc.lora_rank}, "init": args.init,
            "groups": len(groups), "steps": len(losses),
            "first_loss": losses[0] if losses else None,
            "last_loss": sum(losses[-20:]) / max(1, len(losses[-20:])),
            "seconds": time.perf_counter() - t0}  # fmt: skip
    save(enc, args.out, info)
    print(f"{len(losses)} steps in {info['seconds']:.0f} s (loss {info['first_loss']:.3f} -> "
          f"{info['last_loss']:.3f}); re-ranker at {args.out}")  # fmt: skip
    return 0


def _dataset(args: argparse.Namespace) -> int:
    from cheetah.search.dataset import package_root, package_rows, write_rows

    missing = [p for p in args.package if package_root(p) is None]
    if missing:
        print(f"cheetah search dataset: not installed here: {', '.join(missing)}", file=sys.stderr)
        return 2
    try:
        rows = package_rows(args.package, args.max_queries, args.seed)
    except ValueError as e:
        print(f"cheetah search dataset: {e}", file=sys.stderr)
        return 2
    write_rows(rows, args.out)
    queries = sum(1 for r in rows if r.query)
    print(f"{len(rows)} rows ({queries} with a query) written to {args.out}")
    return 0


def add_commands(sub_: argparse._SubParsersAction) -> None:
    s = sub_.add_parser("search", help="semantic codebase search: index, query, train")
    sub = s.add_subparsers(dest="search_verb", metavar="ACTION", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--repo", default=".", help="repository to index (default: .)")
        p.add_argument(
            "--embedder",
            default=os.environ.get("CHEETAH_EMBEDDER", "default"),
            help="'default' (all-MiniLM-L6-v2 from its PyPI package) or a model directory "
            "written by `cheetah search train` (env CHEETAH_EMBEDDER)",
        )
        p.add_argument("--index-dir", help="where the index is kept (default: ~/.cache/cheetah)")

    i = sub.add_parser(
        "index",
        help="index a repo (only changed files are re-embedded)",
        description="Chunk and embed the repo's files (.gitignore respected); a saved index "
        "is updated incrementally through a Merkle tree of file hashes.",
    )
    common(i)
    i.set_defaults(func=_index)

    q = sub.add_parser("query", help="the chunks that best answer a description")
    q.add_argument("text", help="what to look for, in words")
    q.add_argument("-k", type=int, default=10, help="how many results")
    q.add_argument("--path", help="only results under this directory")
    q.add_argument(
        "--reranker",
        default=os.environ.get("CHEETAH_RERANKER", "default"),
        help="cross-encoder for the best candidates of the hybrid (cosine + BM25): "
        "'default', a directory from `cheetah search train-reranker`, a URL, or 'none' "
        "(env CHEETAH_RERANKER)",
    )
    common(q)
    q.set_defaults(func=_query)

    t = sub.add_parser(
        "train",
        help="fine-tune the embedder on query -> code pairs; report retrieval before/after",
        description="Contrastive fine-tuning (in-batch and hard negatives) on docstring -> "
        "function pairs from standard-library modules and installed packages, and task query "
        "-> changed code pairs from the train split of --tasks; recall@1/@5 and MRR are "
        "measured on held-out modules and held-out tasks before and after. The model (or, "
        "with --lora-rank, the adapter) is written to --out: use it with --embedder or "
        "CHEETAH_EMBEDDER. Progress is a bar on a terminal, a line every ~10 s in logs.",
    )
    t.add_argument("--out", type=Path, required=True, help="directory for the fine-tuned model")
    t.add_argument(
        "--base",
        default="stock",
        help="model to start from: stock (all-MiniLM-L6-v2) or a model directory",
    )
    t.add_argument(
        "--tasks", type=Path, default=Path("benchmark"), help="task file or bundled set's name"
    )
    t.add_argument("--no-tasks", action="store_true", help="docstring pairs only")
    t.add_argument(
        "--package",
        action="append",
        help="mine docstring pairs from this installed package (repeatable; default: the 30 "
        "of search/pairs.py TRAIN_PACKAGES)",
    )
    add_flags(t, EmbedderTrainConfig, EmbedderTrainConfig.model_fields)
    t.add_argument("--json", help="also write the figures to this JSON file")
    t.set_defaults(func=_train)

    e = sub.add_parser(
        "eval",
        help="retrieval quality on a data set: BM25, embedders, hybrids (R@1, R@10, MRR@10)",
        description='Each line of --dataset is {"id", "code", "query"?}: every row\'s code '
        "is a candidate, and a row with a query is a question whose answer is its own code. "
        "Every method ranks all candidates for every query: bm25 (identifiers split on case "
        "and underscores), the stock all-MiniLM-L6-v2, each --embedder, and each embedder's "
        "hybrid with bm25 (z-scored scores, convex combination), and with --reranker the "
        "last hybrid's best 20 re-ranked by that cross-encoder. Prints R@1, R@10 and a line "
        "'MRR@10 <value>' per method, the best last; under every other method, the best "
        "one's lead in MRR@10 with a 95% interval (paired bootstrap over the queries).",
    )
    e.add_argument("--dataset", type=Path, required=True, help="JSON Lines data set")
    e.add_argument(
        "--embedder",
        action="append",
        help="also this embedder: 'default', 'stock', or a model directory (repeatable)",
    )
    e.add_argument("--no-stock", action="store_true", help="leave out the stock embedder")
    e.add_argument(
        "--reranker",
        help="also re-rank the last embedder's hybrid with this cross-encoder: 'default' (the "
        "shipped one) or a directory written by `cheetah search train-reranker`",
    )
    e.add_argument("--json", help="also write the figures to this JSON file")
    e.set_defaults(func=_eval)

    r = sub.add_parser(
        "train-reranker",
        help="train the cross-encoder that re-ranks the first stage's best candidates",
        description="A LoRA adapter and a linear head over the shipped embedder's MiniLM, "
        "reading query and code together. Each step: --groups queries, each with its right "
        "code and --negatives wrong ones (a function of the same file and the best matches of "
        "the cosine + BM25 hybrid that codebase_search runs, within a pool of 1,000 chunks of "
        "the package), a cross-entropy over each group. Pairs come from the standard-library "
        "modules of search/pairs.py and its training packages, or the --package ones (pip's "
        "are refused). --init trains a saved re-ranker further. A line every ~10 s.",
    )
    r.add_argument("--out", type=Path, required=True, help="directory for the re-ranker")
    add_flags(r, RerankerTrainConfig, RerankerTrainConfig.model_fields)
    r.add_argument("--per-package", type=int, default=300, help="pairs per package, at most")
    r.add_argument(
        "--package",
        action="append",
        help="mine pairs from this installed package (repeatable; default: the 30 of "
        "search/pairs.py TRAIN_PACKAGES); the standard-library modules are always used",
    )
    r.add_argument(
        "--mine-with",
        default="default",
        help="the embedder of the hybrid that mines negatives: 'default', 'stock', a model "
        "directory, a URL, or 'none' for BM25 alone over every chunk of the package "
        "(embedding the pools takes ~15 min on 2 cores)",
    )
    r.add_argument(
        "--init",
        help="train on from this re-ranker ('default': the shipped one, or a directory "
        "written by train-reranker) instead of a fresh adapter and head",
    )
    r.set_defaults(func=_train_reranker)

    d = sub.add_parser(
        "dataset",
        help="make a retrieval data set from installed Python packages (docstring -> function)",
        description="Each function with a docstring gives a query (the docstring's first "
        "sentence) whose answer is the function with its docstring cut out; every other "
        "chunk of the package's files is a distractor. pip, setuptools and what pip vendors "
        "are refused: they are kept unseen as an external test set.",
    )
    d.add_argument("--package", action="append", required=True, help="import name (repeatable)")
    d.add_argument("--out", type=Path, required=True, help="the .jsonl file to write")
    d.add_argument("--max-queries", type=int, default=300, help="queries per package, at most")
    d.add_argument("--seed", type=int, default=0)
    d.set_defaults(func=_dataset)
