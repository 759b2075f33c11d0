"""Incremental detokenization: pieces join to the full decode, no partial characters, linear
work; the engine's stop strings and streaming built on it."""

from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cheetah.inference.detokenize import IncrementalDetokenizer
from cheetah.inference.protocol import Completion, SamplingParams
from cheetah.inference.request import EngineRequest, TokenEvent
from cheetah.model.loading import default_tokenizer

TEXTS = [
    "naïve café 🚀 数据",
    "👩‍👩‍👧 家族 Ελληνικά ñ, Ünïcödé — “quotes” …",
    "日本語のテキスト、中文字符和한국어",
    "emoji run 🎉🎉🔥🇫🇷 end",
    "def f(x):\n    return x  # ok\n",
]
# ASCII, accented letters, CJK, emoji (some in ZWJ sequences), whitespace
ALPHABET = "ab Z.\n\téüñçÆ数据日本한글🚀🎉👩‍🇫🇷€"


@functools.cache
def _tok():
    return default_tokenizer()


def _pieces(tokenizer, ids: list[int]) -> list[str]:
    detok = IncrementalDetokenizer(tokenizer)
    return [detok.push(i) for i in ids] + [detok.flush()]


def _full(ids: list[int]) -> str:
    return _tok().decode(ids, skip_special_tokens=True)


@pytest.mark.parametrize("text", TEXTS)
def test_pieces_join_to_the_full_decode_without_partial_characters(text):
    tok = _tok()
    ids = tok.encode(text, add_special_tokens=False)
    if not text.isascii():  # premise: some character is split across tokens
        assert any("\ufffd" in tok.decode([i]) for i in ids)
    ids = [*ids[:3], tok.eos_token_id, *ids[3:]]  # a skipped special token mid-stream
    pieces = _pieces(tok, ids)
    assert "".join(pieces) == _full(ids) == text
    assert not any("\ufffd" in p for p in pieces)


@settings(max_examples=150)
@given(st.text(ALPHABET, max_size=40), st.integers(0, 40), st.integers(0, 40))
def test_any_slice_of_an_encoding_detokenizes_like_a_full_decode(text, start, length):
    ids = _tok().encode(text, add_special_tokens=False)
    ids = ids[start : start + length]  # may start or end inside a character
    pieces = _pieces(_tok(), ids)
    full = _full(ids)
    assert "".join(pieces) == full
    if "\ufffd" not in full:
        assert not any("\ufffd" in p for p in pieces)
    assert not any(p.endswith("\ufffd") for p in pieces[:-1])  # only flush may end in one


@settings(max_examples=60)
@given(st.lists(st.integers(0, 49151), max_size=30))
def test_random_token_ids_detokenize_like_a_full_decode(ids):
    assert "".join(_pieces(_tok(), ids)) == _full(ids)


class _CountingTokenizer:
    def __init__(self, tokenizer):
        self.tokenizer, self.ids_decoded = tokenizer, 0

    def decode(self, ids, **kwargs):
        self.ids_decoded += len(ids)
        return self.tokenizer.decode(ids, **kwargs)


def test_decoding_work_per_token_is_bounded():
    tok = _tok()
    ids = tok.encode(" ".join(TEXTS) * 40, add_special_tokens=False)[:2000]
    assert len(ids) == 2000
    work = {}
    for n in (500, 2000):
        counting = _CountingTokenizer(tok)
        assert "".join(_pieces(counting, ids[:n])) == _full(ids[:n])
        work[n] = counting.ids_decoded
    assert work[2000] <= 8 * 2000  # a full decode per token would be ~2,000,000
    assert work[2000] / work[500] < 4.5  # linear: 4x the tokens, ~4x the work


def _run(ids: list[int], stop: tuple[str, ...]) -> tuple[list[str], str, int, bool]:
    """Feed ``ids`` through a request's text path as ``LocalEngine`` does (the tiny model's
    noise cannot be steered to multi-byte text): the streamed deltas, the completion's text,
    the tokens used, and whether a stop string ended it."""
    r = EngineRequest([1], SamplingParams(stop=stop), None, None, None, want_text=True)  # type: ignore[arg-type]
    r.detokenizer = IncrementalDetokenizer(_tok())
    deltas = []
    for i, token in enumerate(ids):
        r.ids.append(token)
        delta, stopped = r.advance_text(final=i == len(ids) - 1)
        deltas.append(delta)
        if stopped:
            break
    return deltas, "".join(r.text_parts), len(r.ids), stopped


@pytest.mark.parametrize(
    "stop", [("🚀 数",), ("é 🚀",), ("ïve c", "🚀"), ("🚀🚀",), ("据 X", "数")]
)
def test_stop_strings_split_across_multibyte_tokens(stop):
    ids = _tok().encode("naïve café 🚀 数据 X more", add_special_tokens=False)
    deltas, text, used, stopped = _run(ids, stop)
    # what a full decode after every token gives (the engine's behaviour before this module)
    first = next(
        (k for k in range(1, len(ids) + 1) if any(s in _full(ids[:k]) for s in stop)), None
    )
    full = _full(ids)
    cut = min((i for i in (full.find(s) for s in stop) if i >= 0), default=len(full))
    assert text == full[:cut]
    assert stopped == (first is not None) and used == (first or len(ids))
    assert "".join(deltas) == text
    for k in range(len(deltas)):  # streamed text never runs past the cut, even for a moment
        assert text.startswith("".join(deltas[: k + 1]))


async def test_engine_stop_string_split_across_tokens(engine, tiny):
    tok = tiny.tokenizer
    prompt = tok("The capital of France is")["input_ids"]
    full = await engine.generate(prompt, SamplingParams(temperature=0, max_tokens=16, stop=()))
    pieces = [tok.decode([t]) for t in full.token_ids]
    k = next(k for k in range(3, 15) if len(pieces[k].strip()) >= 2 and pieces[k + 1].strip())
    stop = pieces[k][-2:] + pieces[k + 1][:2]  # ends in the token after the one it starts in
    params = SamplingParams(temperature=0, max_tokens=16, stop=(stop,))
    events = [e async for e in engine.stream(prompt, params)]
    final = events[-1]
    assert isinstance(final, Completion) and final.finish_reason == "stop"
    assert final.text == full.text[: full.text.find(stop)]
    assert final.token_ids == full.token_ids[: len(final.token_ids)]
    assert all(isinstance(e, TokenEvent) for e in events[:-1])
    assert "".join(e.text for e in events[:-1]) == final.text
