"""``CodeIndex``: chunks and vectors of one workspace, kept current by a Merkle tree of hashes.

Each ``update`` walks the workspace (``.gitignore`` respected, binary and large files
skipped), hashes every file (a stat cache of size + mtime spares re-reading files
that did not change), and builds a Merkle tree: a directory's hash covers the names
and hashes below it. The root hash alone says whether anything changed; otherwise
only files whose hash differs are re-chunked, and of their chunks only those whose text
changed are re-embedded; subtrees whose hash is unchanged are skipped whole, and removed
files drop their chunks. ``save``/``load`` keep an index between processes so a re-index
after a small edit costs the chunks it touched.

Search is exact cosine similarity over all chunk vectors: one matrix-vector product and a
partial sort of the top k (``argpartition``, linear in rows where a full sort is not).
``bench/search_scale.py`` measures it against brute force with a full sort and against an
HNSW graph (usearch): the approximate index loses some of the exact top 10, costs a build
per index, and saves less than embedding the query costs (figures in BENCHMARKS.md). Indexes of workspaces forked from the same snapshot share what they
embedded through a ``FileCache`` keyed by path and content hash. Deliberately left out: ANN
structures for millions of chunks (exact search grows linearly with the chunks).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections import OrderedDict, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cheetah.core.safefs import SafeRoot
from cheetah.core.workspace import PathError, is_junk
from cheetah.inference.protocol import Embedder
from cheetah.progress import Pace
from cheetah.search.chunks import Chunk, chunk_file
from cheetah.search.fusion import fuse
from cheetah.search.lexical import BM25, doc_tokens
from cheetah.search.rerank import RERANK_K, Reranker, rerank
from cheetah.tools.files import looks_binary, walk_files

MAX_FILE_BYTES = 512_000
EMBED_SLICE = 512  # texts embedded between progress checks


@dataclass
class Hit:
    chunk: Chunk
    score: float


@dataclass
class UpdateStats:
    files: int = 0
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    chunks_embedded: int = 0
    reused: int = 0  # changed files whose vectors another index had made (``FileCache``)
    dirs_unchanged: int = 0
    wall_s: float = 0.0


@dataclass
class _File:
    sha: str
    chunks: list[Chunk]
    vectors: np.ndarray
    tokens: list[list[str]] | None = None  # BM25's tokens of each chunk, made on first use

    def lexical_tokens(self) -> list[list[str]]:
        if self.tokens is None:
            self.tokens = [doc_tokens(c.text) for c in self.chunks]
        return self.tokens


class FileCache:
    """(path, content hash) -> chunks and vectors, shared by the indexes of one embedder, so
    sessions forked from the same snapshot embed each file once between them; the least
    recently used files are dropped beyond ``max_files``."""

    def __init__(self, max_files: int = 100_000) -> None:
        self.max_files = max_files
        self._files: OrderedDict[tuple[str, str], _File] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, path: str, sha: str) -> _File | None:
        with self._lock:
            f = self._files.get((path, sha))
            if f is not None:
                self._files.move_to_end((path, sha))
            return f

    def put(self, path: str, f: _File) -> None:
        with self._lock:
            self._files[(path, f.sha)] = f
            self._files.move_to_end((path, f.sha))
            while len(self._files) > self.max_files:
                self._files.popitem(last=False)


def merkle(file_hashes: dict[str, str]) -> dict[str, str]:
    """Directory ("" for the root) -> hash over the sorted names and hashes right below it."""
    files: dict[str, list[tuple[str, str]]] = defaultdict(list)
    subdirs: dict[str, set[str]] = defaultdict(set)
    dirs = {""}
    for path, sha in file_hashes.items():
        parent, _, name = path.rpartition("/")
        files[parent].append((name, sha))
        while parent:
            grand = parent.rpartition("/")[0]
            subdirs[grand].add(parent)
            dirs.add(parent)
            parent = grand
    out: dict[str, str] = {}
    for d in sorted(dirs, key=lambda p: p.count("/") + bool(p), reverse=True):  # deepest first
        entries = files[d] + [(sub.rpartition("/")[2] + "/", out[sub]) for sub in subdirs[d]]
        h = hashlib.sha256()
        for name, sha in sorted(entries):
            h.update(f"{name}\0{sha}\n".encode())
        out[d] = h.hexdigest()
    return out


def embed_in_slices(embedder: Embedder, texts: list[str], log: Callable[[str], None]) -> np.ndarray:
    """``embedder.embed`` in slices, with a progress line every ~10 s (long on CPU)."""
    pace, parts = Pace(), []
    for lo in range(0, len(texts), EMBED_SLICE):
        parts.append(embedder.embed(texts[lo : lo + EMBED_SLICE]))
        done = min(lo + EMBED_SLICE, len(texts))
        if pace.due(final=done == len(texts)) and len(texts) > EMBED_SLICE:
            log(f"{embedder.name}: {done}/{len(texts)} texts embedded")
    return np.concatenate(parts) if parts else np.zeros((0, embedder.dim), np.float32)


def top_k(scores: np.ndarray, k: int) -> list[int]:
    """Indices of the ``k`` highest scores, best first (``argpartition``: linear in rows,
    where a full sort is not)."""
    k = min(k, len(scores))
    if k <= 0:
        return []
    best = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
    return [int(i) for i in best[np.argsort(-scores[best], kind="stable")]]


class CodeIndex:
    def __init__(
        self, root: str | Path, embedder: Embedder, shared: FileCache | None = None
    ) -> None:
        self.root = Path(root).resolve()
        self.tree = SafeRoot(self.root)
        self.embedder = embedder
        self.shared = shared
        self.files: dict[str, _File] = {}
        self.dirs: dict[str, str] = {}
        self._stat: dict[str, tuple[int, int, str]] = {}
        self._matrix: np.ndarray | None = None
        self._rows: list[Chunk] = []
        self._row_file = np.zeros(0, np.int64)
        self._paths: list[str] = []
        self._bm25: BM25 | None = None
        self._lock = threading.RLock()  # calls of one message may search at the same time

    # -- hashing -------------------------------------------------------------------------
    def _scan(self) -> tuple[dict[str, str], dict[str, bytes]]:
        """Path -> sha of every indexable file, and the contents read to hash them."""
        hashes: dict[str, str] = {}
        read: dict[str, bytes] = {}
        for rel, entry in walk_files(self.tree):
            if is_junk(Path(rel)) or entry.size > MAX_FILE_BYTES:
                continue
            cached = self._stat.get(rel)
            if cached and cached[:2] == (entry.size, entry.mtime_ns):
                hashes[rel] = cached[2]
                continue
            try:
                data, _ = self.tree.read(rel, MAX_FILE_BYTES)
            except PathError:
                continue
            if looks_binary(data):
                continue
            sha = hashlib.sha256(data).hexdigest()
            self._stat[rel] = (entry.size, entry.mtime_ns, sha)
            hashes[rel], read[rel] = sha, data
        return hashes, read

    # -- updating ------------------------------------------------------------------------
    def update(self, log: Callable[[str], None] | None = None) -> UpdateStats:
        """Bring the index up to date with the files; embeds only what changed (``log`` gets
        a progress line about every 10 s while it embeds)."""
        with self._lock:
            return self._update(log or (lambda _: None))

    def _update(self, log: Callable[[str], None]) -> UpdateStats:
        t0 = time.perf_counter()
        hashes, read = self._scan()
        dirs = merkle(hashes)
        stats = UpdateStats(files=len(hashes))
        if dirs.get("") == self.dirs.get("") and self.files.keys() == hashes.keys():
            stats.dirs_unchanged = len(dirs)
            stats.wall_s = time.perf_counter() - t0
            return stats
        stats.dirs_unchanged = sum(1 for d, h in dirs.items() if self.dirs.get(d) == h)
        stats.removed = sorted(p for p in self.files if p not in hashes)
        for p in stats.removed:
            del self.files[p]
            self._stat.pop(p, None)
        changed = sorted(
            p for p, sha in hashes.items() if p not in self.files or self.files[p].sha != sha
        )
        per_file: dict[str, list[Chunk]] = {}
        todo = []
        for p in changed:
            known = self.shared.get(p, hashes[p]) if self.shared is not None else None
            if known is not None:  # embedded for another index of the same content
                self.files[p] = known
                stats.reused += 1
            else:
                todo.append(p)
        for p in todo:
            data = read.get(p)
            if data is None:
                try:
                    data, _ = self.tree.read(p, MAX_FILE_BYTES)
                except PathError:  # gone since the scan
                    data = b""
            per_file[p] = chunk_file(p, data.decode("utf-8", errors="replace"))
        # Within a changed file, chunks whose text is unchanged (the functions an edit did not
        # touch; their line numbers may have moved) keep their vectors: only new text is embedded.
        previous: dict[str, np.ndarray] = {}
        for p in todo:
            if p in self.files:
                old = self.files[p]
                previous.update(zip((c.embed_text for c in old.chunks), old.vectors, strict=True))
        texts = sorted({c.embed_text for p in todo for c in per_file[p]} - previous.keys())
        fresh = dict(zip(texts, embed_in_slices(self.embedder, texts, log), strict=True))
        for p in todo:
            vectors = [fresh.get(c.embed_text, previous.get(c.embed_text)) for c in per_file[p]]
            matrix = np.stack(vectors) if vectors else np.zeros((0, self.embedder.dim), np.float32)
            self.files[p] = _File(hashes[p], per_file[p], matrix)
            if self.shared is not None:
                self.shared.put(p, self.files[p])
        self.dirs = dirs
        self._matrix, self._bm25 = None, None
        stats.changed, stats.chunks_embedded = changed, len(texts)
        stats.wall_s = time.perf_counter() - t0
        return stats

    # -- searching -----------------------------------------------------------------------
    def _stack(self) -> tuple[np.ndarray, list[Chunk], np.ndarray, list[str]]:
        """All vectors as one matrix, its rows' chunks, each row's file number and the files
        (sorted); rebuilt after an update changed something."""
        if self._matrix is None:
            paths = sorted(self.files)
            rows: list[Chunk] = []
            for p in paths:
                rows.extend(self.files[p].chunks)
            mats = [self.files[p].vectors for p in paths]
            dim = self.embedder.dim
            self._matrix = np.concatenate(mats) if mats else np.zeros((0, dim), np.float32)
            self._rows, self._paths = rows, paths
            counts = [len(self.files[p].chunks) for p in paths]
            self._row_file = np.repeat(np.arange(len(paths)), counts)
        return self._matrix, self._rows, self._row_file, self._paths

    def _lexical(self) -> BM25:
        """BM25 over the rows of ``_stack``, rebuilt after a change from each file's kept
        tokens (only changed files are tokenized again)."""
        if self._bm25 is None:
            _, _, _, paths = self._stack()
            tokens = [t for p in paths for t in self.files[p].lexical_tokens()]
            self._bm25 = BM25(tokens=tokens)
        return self._bm25

    def search(
        self,
        query: str,
        k: int = 8,
        under: str | None = None,
        *,
        hybrid: bool = False,
        reranker: Reranker | None = None,
    ) -> list[Hit]:
        """The ``k`` chunks that best answer ``query`` (only paths under ``under`` if given):
        by cosine similarity; with ``hybrid``, fused with BM25 (``fusion.fuse``); with a
        ``reranker`` (which implies the hybrid), its scores of the hybrid's ``RERANK_K`` best
        fused with theirs (``rerank.rerank``): the methods ``cheetah search eval`` measures."""
        with self._lock:
            empty = not self._stack()[1]
        if empty:
            return []
        q = self.embedder.embed([query])[0]
        if not hybrid and reranker is None:
            return self.search_vector(q, k, under)
        with self._lock:
            matrix, rows, row_file, paths = self._stack()
            lexical = self._lexical().scores(query)
        dense = matrix @ q
        scores, k = self._within(fuse(dense[None], lexical[None])[0], under, row_file, paths, k)
        if reranker is not None:
            inside = np.flatnonzero(np.isfinite(scores))
            scores[inside] = rerank(
                scores[inside],
                lambda top: reranker.score(query, [rows[inside[i]].text for i in top]),
                RERANK_K,
                dense[inside],
                lexical[inside],
            )
        return [Hit(rows[i], float(scores[i])) for i in top_k(scores, k)]

    def search_vector(self, q: np.ndarray, k: int = 8, under: str | None = None) -> list[Hit]:
        """``search`` for an embedded query: every row scored (one matrix-vector product),
        the best ``k`` picked by a partial sort."""
        with self._lock:
            matrix, rows, row_file, paths = self._stack()
        if not rows or k <= 0:
            return []
        scores, k = self._within(matrix @ q, under, row_file, paths, k)
        return [Hit(rows[i], float(scores[i])) for i in top_k(scores, k)]

    @staticmethod
    def _within(
        scores: np.ndarray, under: str | None, row_file: np.ndarray, paths: list[str], k: int
    ) -> tuple[np.ndarray, int]:
        """Rows outside ``under`` scored -inf, and ``k`` cut to the rows inside."""
        if under in (None, "", "."):
            return scores, k
        prefix = under.rstrip("/") + "/"
        inside = np.fromiter(
            (p.startswith(prefix) or p == prefix[:-1] for p in paths), bool, len(paths)
        )[row_file]
        return np.where(inside, scores, -np.inf), min(k, int(inside.sum()))

    # -- persistence ---------------------------------------------------------------------
    def save(self, directory: str | Path) -> None:
        """Write the index (vectors as .npy, the rest as JSON); atomic per file."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        matrix, rows, _, _ = self._stack()
        meta = {
            "embedder": self.embedder.name,
            "dim": self.embedder.dim,
            "files": {p: f.sha for p, f in self.files.items()},
            "stat": self._stat,
            "dirs": self.dirs,
            "chunks": [[c.path, c.start, c.end, c.name, c.text] for c in rows],
        }
        tmp = d / f"vectors.{os.getpid()}.npy"
        np.save(tmp, matrix)
        tmp.replace(d / "vectors.npy")
        tmp = d / f"index.{os.getpid()}.json"
        tmp.write_text(json.dumps(meta))
        tmp.replace(d / "index.json")

    def load(self, directory: str | Path) -> bool:
        """Read a saved index made with the same embedder; False if there is none to use."""
        d = Path(directory)
        try:
            meta = json.loads((d / "index.json").read_text())
            matrix = np.load(d / "vectors.npy")
        except (OSError, ValueError):
            return False
        if meta.get("embedder") != self.embedder.name or meta.get("dim") != self.embedder.dim:
            return False
        if len(meta["chunks"]) != len(matrix):
            return False
        by_file: dict[str, list[int]] = {}
        chunks = [Chunk(*row) for row in meta["chunks"]]
        for i, c in enumerate(chunks):
            by_file.setdefault(c.path, []).append(i)
        self.files = {
            p: _File(sha, [chunks[i] for i in by_file.get(p, [])], matrix[by_file.get(p, [])])
            for p, sha in meta["files"].items()
        }
        self._stat = {p: tuple(v) for p, v in meta["stat"].items()}  # type: ignore[misc]
        self.dirs = meta["dirs"]
        self._matrix, self._bm25 = None, None
        return True
