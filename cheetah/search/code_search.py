"""``EmbeddingCodeSearch``: the ``codebase_search`` tool's backend (``tools.base.CodeSearch``).

The workspace is chunked (functions, classes, windows of other files) and embedded
once; later searches re-embed only the files that changed since (``CodeIndex``, a
Merkle tree of file hashes). Each instance keeps one index per workspace root (least
recently used dropped beyond ``max_indexes``), so a session's first search pays for the
whole repo and the rest pay for its edits. The embedder, loaded on the first search, is
``spec``: ``default``, ``stock``, a model directory (e.g. one ``cheetah search train``
wrote), the URL of an embedding service (``cheetah serve --embedder``: this process then
loads no torch), or when not given the ``CHEETAH_EMBEDDER`` environment variable. Files
reach the index only through the workspace root by descriptor (``SafeRoot``). The indexes
share one ``FileCache``: sessions forked from the same snapshot embed each file once.

Ranking is what ``cheetah search eval`` measured best (BENCHMARKS.md): the embedder's cosine
fused with BM25 on split identifiers, then the re-ranker (``search/rerank.py``) re-scores the
best ``RERANK_K``. The re-ranker is ``reranker``: ``default`` (the shipped cross-encoder),
a directory from ``cheetah search train-reranker``, the URL of a re-rank service, or
``none``; when not given, ``CHEETAH_RERANKER``, else the embedding service's own
``/v1/rerank`` when the embedder is a URL (none if it offers none), else ``default``.

Whoever builds the tool contexts owns an instance and hands it in (the CLI verbs, the
env server, eval and RL rollouts); nothing here is process-global. Deliberately left out:
persisting sandbox sessions' indexes (``cheetah search index`` persists the user's).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from pathlib import Path

from cheetah.tools.base import CodeHit, CodeHits, ToolError

MAX_INDEXES = 32


class EmbeddingCodeSearch:
    def __init__(
        self, spec: str | None = None, max_indexes: int = MAX_INDEXES, reranker: str | None = None
    ) -> None:
        self.spec = spec or os.environ.get("CHEETAH_EMBEDDER", "default")
        self.reranker_spec = reranker or os.environ.get("CHEETAH_RERANKER") or None
        self.max_indexes = max_indexes
        self._embedder = None
        self._reranker = None
        self._files = None  # the FileCache every index of this instance shares
        self._indexes: OrderedDict[str, object] = OrderedDict()
        self._lock = threading.Lock()

    def _index_for(self, root: Path):
        from cheetah.search.embedder import EmbedderUnavailable, load_embedder
        from cheetah.search.index import CodeIndex, FileCache
        from cheetah.search.rerank import RerankerUnavailable

        key = str(root)
        with self._lock:
            index = self._indexes.get(key)
            if index is None:
                if self._embedder is None:
                    try:
                        self._embedder = load_embedder(self.spec)
                        self._reranker = self._load_reranker()
                    except (EmbedderUnavailable, RerankerUnavailable) as e:
                        raise ToolError(f"codebase_search is unavailable here: {e}") from None
                    self._files = FileCache()
                index = CodeIndex(root, self._embedder, self._files)
                self._indexes[key] = index
                while len(self._indexes) > self.max_indexes:
                    self._indexes.popitem(last=False)
            self._indexes.move_to_end(key)
            return index

    def _load_reranker(self):
        from cheetah.search.rerank import RerankerUnavailable, load_reranker

        spec = self.reranker_spec
        if spec == "none":
            return None
        if spec is None and self.spec.startswith(("http://", "https://")):
            try:  # the embedding service's own re-ranker, if it has one
                return load_reranker(self.spec)
            except RerankerUnavailable:
                return None
        return load_reranker(spec or "default")

    def search(self, root: Path, query: str, k: int, under: str | None) -> CodeHits:
        from cheetah.search.rerank import RerankerUnavailable

        index = self._index_for(root)
        stats = index.update()
        try:
            found = index.search(query, k=k, under=under, hybrid=True, reranker=self._reranker)
        except RerankerUnavailable as e:
            raise ToolError(f"codebase_search could not re-rank: {e}") from None
        hits = [
            CodeHit(h.chunk.path, h.chunk.start, h.chunk.end, h.chunk.name, h.chunk.text, h.score)
            for h in found
        ]
        return CodeHits(hits, reindexed_files=len(stats.changed), indexed_files=stats.files)
