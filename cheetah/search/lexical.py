"""Keyword search over code: BM25 on identifiers split the way programmers write them.

``code_tokens`` lowercases words and splits identifiers on underscores, case changes and
digits (``parseHTTPDate2`` -> ``parse``, ``http``, ``date``, and the whole word
``parsehttpdate``; ``parse_date`` gives ``parsedate``), so a query's "parse the date" meets ``parse_date`` and ``parseDate``;
a trailing plural ``s`` is dropped from longer words ("dates" meets ``date``). ``BM25``
ranks documents with those tokens through ``bm25s`` (sparse matrices; a well-kept library,
fast enough for 100k chunks); what cheetah adds is the tokenizer, a field weight for the
name a chunk defines (its first ``def``/``class`` name counts ``NAME_WEIGHT`` times more, as
BM25F weighs a title), and the handling of queries that share no word with the corpus
(every score zero).

Settings (``NAME_WEIGHT``, ``K1``, ``B``) were chosen on the development packages of
``search/pairs.py`` (docstring -> function, 1,125 queries over 9,889 chunks; MRR@10 0.257
with plain BM25 at k1 1.2, b 0.75 -> 0.350), never on a test set.

Deliberately left out: stemming beyond plurals and stop-word lists (BM25's idf already
weighs ``self``, ``return`` and "the" down), and phrase or proximity scoring.
"""

from __future__ import annotations

import re

import numpy as np

NAME_WEIGHT = 5  # the defined name counts this many times (once in the code, 4 more)
K1, B = 2.0, 1.0
_DEFINES = re.compile(r"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+([A-Za-z_][A-Za-z0-9_]*)", re.M)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+")
_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


def _norm(token: str) -> str:
    return (
        token[:-1] if len(token) > 4 and token.endswith("s") and not token.endswith("ss") else token
    )


def code_tokens(text: str) -> list[str]:
    """Lowercase tokens of ``text``: each identifier's parts, plus the identifier whole when
    it has several parts (see the module docstring)."""
    out: list[str] = []
    for word in _WORD.findall(text):
        parts = _PART.findall(word)
        if len(parts) > 1:  # parse_date and parseDate both give "parsedate"
            out.append(_norm(word.replace("_", "").lower()))
        out.extend(_norm(p.lower()) for p in parts if len(p) > 1 or p.isdigit())
    return out


def doc_tokens(code: str, name_weight: int = NAME_WEIGHT) -> list[str]:
    """``code_tokens`` of a chunk, with the tokens of the name it defines repeated."""
    tokens = code_tokens(code)
    m = _DEFINES.search(code)
    return tokens + code_tokens(m.group(1)) * (name_weight - 1) if m else tokens


class BM25:
    """BM25 over ``docs`` (code chunks), tokenized with ``doc_tokens``; or over ``tokens``
    already made by ``doc_tokens`` (an index that keeps each file's tokens re-tokenizes only
    the files that changed)."""

    def __init__(
        self,
        docs: list[str] | None = None,
        k1: float = K1,
        b: float = B,
        name_weight: int = NAME_WEIGHT,
        tokens: list[list[str]] | None = None,
    ) -> None:
        import bm25s

        if tokens is None:
            tokens = [doc_tokens(d, name_weight) for d in docs or []]
        self.size = len(tokens)
        self._index = bm25s.BM25(k1=k1, b=b)
        # bm25s wants a token in every document; "" stands for an empty one and never matches.
        self._index.index([t or [""] for t in tokens] or [[""]], show_progress=False)
        self._vocab = self._index.vocab_dict

    def scores(self, query: str) -> np.ndarray:
        """One score per document (zeros when the query shares no token with them)."""
        tokens = [t for t in code_tokens(query) if t in self._vocab]
        if not tokens or not self.size:
            return np.zeros(self.size, dtype=np.float32)
        return np.asarray(self._index.get_scores(tokens), dtype=np.float32)
