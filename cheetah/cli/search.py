"""``cheetah search index|query|train``: parsing and printing; the work is in ``cheetah.search``.

``index`` and ``query`` keep the index of a repo under ``--index-dir`` (default
``~/.cache/cheetah/search/<repo hash>-<model>``), so a later run re-embeds only the
files that changed. ``train`` fine-tunes the embedder and prints retrieval before
and after on held-out data.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path


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
    index = _open_index(args)
    for h in index.search(args.text, k=args.k, under=args.path):
        c = h.chunk
        print(f"{h.score:.3f}  {c.path}:{c.start}-{c.end}  {c.name}".rstrip())
    return 0


def _train(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    from cheetah.search.train import TrainConfig, train_embedder

    cfg = TrainConfig(
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        temperature=args.temperature,
        max_steps=args.max_steps,
        seed=args.seed,
    )
    tasks = None if args.no_tasks else args.tasks
    if tasks is not None and not tasks.is_file():
        print(f"cheetah search train: no task file {tasks}", file=sys.stderr)
        return 2
    with Progress(transient=True) as progress:
        bar = progress.add_task("training", total=None)

        def step(i: int, total: int, loss: float) -> None:
            progress.update(bar, completed=i, total=total, description=f"loss {loss:.3f}")

        figures = train_embedder(args.base, args.out, tasks, cfg, log=print, on_step=step)
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

    q = sub.add_parser("query", help="the chunks most similar to a description")
    q.add_argument("text", help="what to look for, in words")
    q.add_argument("-k", type=int, default=10, help="how many results")
    q.add_argument("--path", help="only results under this directory")
    common(q)
    q.set_defaults(func=_query)

    t = sub.add_parser(
        "train",
        help="fine-tune the embedder on query -> code pairs; report retrieval before/after",
        description="Contrastive fine-tuning (in-batch negatives) on docstring -> function "
        "pairs from standard-library modules and task query -> changed code pairs from the "
        "train split of --tasks; recall@1/@5 and MRR are measured on held-out modules and "
        "held-out tasks before and after. The model is written to --out (use it with "
        "--embedder or CHEETAH_EMBEDDER).",
    )
    t.add_argument("--out", type=Path, required=True, help="directory for the fine-tuned model")
    t.add_argument("--base", default="default", help="model to start from (default or a dir)")
    t.add_argument(
        "--tasks", type=Path, default=Path("benchmark"), help="task file or bundled set's name"
    )
    t.add_argument("--no-tasks", action="store_true", help="docstring pairs only")
    t.add_argument("--epochs", type=int, default=1)
    t.add_argument("--batch-size", type=int, default=32)
    t.add_argument("--lr", type=float, default=3e-5)
    t.add_argument("--temperature", type=float, default=0.05)
    t.add_argument("--max-steps", type=int, default=0, help="stop after N steps (0: all)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--json", help="also write the figures to this JSON file")
    t.set_defaults(func=_train)
