"""Semantic search at repository scale: query latency at ~100k chunks and re-indexing after a
one-file edit on a 2,000-file repo, each against brute force in the same run.

The corpus is real third-party Python from the installed packages (``--packages``, in that
order, each package's files sorted): a *repo* of the first ``--files`` files, and a *large
tree* of those files and as many more as it takes to reach ``--chunks`` chunks. Both are
indexed by ``CodeIndex`` with the embedder ``--embedder`` (the large tree reuses the repo's
vectors through a shared ``FileCache``); ``--cache DIR`` keeps the large index between runs.

1. **Query latency** on the large tree, over ``--queries`` docstring summaries of its
   functions: brute force as before this bench (matrix product, full sort), ``CodeIndex``'s
   search (matrix product, partial sort of the top k), and, when the package is installed, an
   HNSW graph from usearch (a well-kept ANN library) with its recall@10 against the exact top
   10. Query embedding is timed apart (``embed``) and end to end (``search``).
2. **Re-indexing** the repo: a full index (every file embedded: the brute-force way to be
   current) against ``update()`` after appending a function to one file (medians of
   ``--repeat`` edits, a different file each time) and after no change.

    python bench/search_scale.py [--files 2000] [--chunks 100000] [--queries 200] [--repeat 5]
                                 [--embedder default] [--cache /tmp/cheetah-scale] [--quick]

The last line reads ``query p50 X.XX ms at N chunks (brute force Y.YY ms)  one-file re-index
Z.ZZ s on F files (full W s)``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

PACKAGES = (
    "sympy", "pandas", "numpy", "transformers", "torch", "matplotlib", "networkx", "ray",
    "pyarrow", "datasets", "fontTools", "PIL", "hypothesis", "jinja2", "click",
)  # fmt: skip


def source_files(packages: tuple[str, ...]) -> list[tuple[str, Path]]:
    from cheetah.search.dataset import package_files

    out = []
    for name in packages:
        out.extend((rel, p) for rel, p in package_files(name) if p.stat().st_size < 400_000)
    return out


def build_trees(tmp: Path, files: int, chunks: int) -> tuple[Path, Path, int]:
    """The repo (first ``files`` files) and the large tree (``chunks`` chunks or more)."""
    from cheetah.search.chunks import chunk_file

    repo, large = tmp / "repo", tmp / "large"
    total = 0
    sources = source_files(PACKAGES)
    for i, (rel, path) in enumerate(sources):
        if i >= files and total >= chunks:
            break
        text = path.read_text(encoding="utf-8", errors="replace")
        for root in (repo, large) if i < files else (large,):
            dest = root / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text, encoding="utf-8")
        total += len(chunk_file(rel, text))
    if total < chunks:
        print(f"  note: the installed packages give {total} chunks (asked {chunks})")
    return repo, large, min(files, len(sources))


def queries_of(tree: Path, n: int) -> list[str]:
    from cheetah.search.pairs import docstring_pairs

    out: list[str] = []
    for path in sorted(tree.rglob("*.py")):
        pairs, _ = docstring_pairs(path.relative_to(tree).as_posix(), path.read_text())
        out.extend(p.query for p in pairs[:2])
    step = max(1, len(out) // n)
    return out[::step][:n]


def timed(fn, items) -> tuple[float, list]:
    """Median milliseconds of ``fn`` over ``items`` and its results."""
    times, results = [], []
    for x in items:
        t0 = time.perf_counter()
        results.append(fn(x))
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), results


def bench_queries(index, queries: list[str], embedder) -> tuple[float, float]:

    matrix, rows, _, _ = index._stack()
    vectors = embedder.embed(queries)
    print(f"query latency over {len(queries)} queries, {len(rows)} chunks x {matrix.shape[1]}:")

    def brute(q):  # what CodeIndex.search did before: score every row, sort them all
        scores = matrix @ q
        return [int(i) for i in np.argsort(-scores)[:10]]

    brute_ms, brute_top = timed(brute, vectors)
    exact_ms, exact_hits = timed(lambda q: index.search_vector(q, 10), vectors)
    key = {(c.path, c.start): i for i, c in enumerate(rows)}
    exact_top = [[key[(h.chunk.path, h.chunk.start)] for h in hits] for hits in exact_hits]
    agree = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(brute_top, exact_top, strict=True)])
    embed_ms, _ = timed(lambda q: embedder.embed([q]), queries)
    search_ms, _ = timed(lambda q: index.search(q, 10), queries)
    print(f"  brute force (product + full sort)   p50 {brute_ms:7.2f} ms")
    print(
        f"  CodeIndex (product + top-k select)  p50 {exact_ms:7.2f} ms  (same top 10: {agree:.3f})"
    )
    try:
        from usearch.index import Index
    except ImportError:
        print("  HNSW (usearch)                      not installed: pip install usearch")
    else:
        ann = Index(ndim=matrix.shape[1], metric="ip", dtype="f32")
        t0 = time.perf_counter()
        ann.add(np.arange(len(matrix)), matrix)
        build_s = time.perf_counter() - t0
        for ef in (64, 256):
            ann.expansion_search = ef
            ann_ms, ann_top = timed(lambda q: ann.search(q, 10).keys.tolist(), vectors)
            recall = np.mean(
                [len(set(a) & set(b)) / 10 for a, b in zip(ann_top, exact_top, strict=True)]
            )
            print(
                f"  HNSW (usearch, ef {ef:>3})             p50 {ann_ms:7.2f} ms  "
                f"recall@10 {recall:.3f}  (built in {build_s:.1f} s)"
            )
    print(f"  query embedding                     p50 {embed_ms:7.2f} ms")
    print(f"  CodeIndex.search end to end         p50 {search_ms:7.2f} ms")
    return exact_ms, brute_ms


def bench_reindex(repo: Path, embedder, shared, repeat: int) -> tuple[float, float, int]:
    from cheetah.search.index import CodeIndex

    t0 = time.perf_counter()
    index = CodeIndex(repo, embedder, shared)
    first = index.update(log=lambda line: print(" ", line, flush=True))
    full_s = time.perf_counter() - t0
    print(f"re-indexing {first.files} files ({first.chunks_embedded} chunks):")
    print(f"  full index (all embedded)           {full_s:7.2f} s")
    victims = sorted(repo.rglob("*.py"))[:: max(1, first.files // repeat)][:repeat]
    edits, idle = [], []
    for n, victim in enumerate(victims):
        victim.write_text(victim.read_text() + f"\n\ndef added_by_bench_{n}(x):\n    return x\n")
        t0 = time.perf_counter()
        stats = index.update()
        edits.append(time.perf_counter() - t0)
        assert stats.changed == [victim.relative_to(repo).as_posix()], stats.changed
        t0 = time.perf_counter()
        index.update()
        idle.append(time.perf_counter() - t0)
    edit_s = statistics.median(edits)
    print(f"  update after a one-file edit        {edit_s:7.3f} s  median of {len(edits)}")
    print(f"  update with nothing changed         {statistics.median(idle):7.3f} s")
    return edit_s, full_s, first.files


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=2000, help="files in the re-indexed repo")
    ap.add_argument("--chunks", type=int, default=100_000, help="chunks in the large tree")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5, help="one-file edits to time")
    ap.add_argument("--embedder", default="default", help="default, stock, a dir or a URL")
    ap.add_argument("--cache", type=Path, help="keep the large tree's index here between runs")
    ap.add_argument("--quick", action="store_true", help="300 files, 10k chunks, 50 queries")
    args = ap.parse_args()
    if args.quick:
        args.files, args.chunks, args.queries, args.repeat = 300, 10_000, 50, 3
    from cheetah.search.embedder import load_embedder
    from cheetah.search.index import CodeIndex, FileCache

    embedder = load_embedder(args.embedder)
    with tempfile.TemporaryDirectory() as tmp:
        repo, large, _ = build_trees(Path(tmp), args.files, args.chunks)
        shared = FileCache()  # the large tree reuses the repo's vectors
        edit_s, full_s, files = bench_reindex(repo, embedder, shared, args.repeat)
        index = CodeIndex(large, embedder, shared)
        if not (args.cache and index.load(args.cache)):
            print("indexing the large tree (progress below) ...", flush=True)
        t0 = time.perf_counter()
        stats = index.update(log=lambda line: print(" ", line, flush=True))
        print(
            f"large tree: {stats.files} files, {stats.chunks_embedded} chunks embedded, "
            f"{stats.reused} files reused, {time.perf_counter() - t0:.0f} s"
        )
        if args.cache:
            index.save(args.cache)
        exact_ms, brute_ms = bench_queries(index, queries_of(large, args.queries), embedder)
        chunks = len(index._stack()[1])
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        f"query p50 {exact_ms:.2f} ms at {chunks} chunks (brute force {brute_ms:.2f} ms)  "
        f"one-file re-index {edit_s:.2f} s on {files} files (full {full_s:.0f} s)"
    )


if __name__ == "__main__":
    main()
