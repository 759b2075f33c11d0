"""`cheetah search eval`: data set files, BM25 on split identifiers, pessimistic ranks, the
hybrid's fusion, metrics worked by hand, data sets from packages (reserved ones refused)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cheetah.search.dataset import (
    DatasetError,
    Row,
    package_files,
    package_rows,
    read_rows,
    write_rows,
)
from cheetah.search.fusion import fuse
from cheetah.search.lexical import BM25, code_tokens, doc_tokens
from cheetah.search.ranking_eval import evaluate_rows, paired_bootstrap, ranks, summarize

BIN = Path(sys.executable).parent


def write(path: Path, lines: list) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


@pytest.mark.parametrize(
    "line,why",
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "expected an object"),
        ({"id": "b"}, "'code' must be a non-empty string"),
        ({"id": "", "code": "x"}, "'id' must be a non-empty string"),
        ({"id": "b", "code": "x", "query": 3}, "'query', when given, must be"),
        ({"id": "a", "code": "y"}, "id 'a' appears twice"),
    ],
)
def test_bad_rows_are_named_by_line(tmp_path, line, why):
    path = write(tmp_path / "d.jsonl", [{"id": "a", "code": "def f(): pass", "query": "q"}, line])
    with pytest.raises(DatasetError, match=rf"d\.jsonl:2: {why}"):
        read_rows(path)


def test_files_that_cannot_be_ranked(tmp_path):
    with pytest.raises(DatasetError, match="no such file"):
        read_rows(tmp_path / "missing.jsonl")
    with pytest.raises(DatasetError, match="no row has a query"):
        read_rows(write(tmp_path / "d.jsonl", [{"id": 1, "code": "x = 1"}]))
    (tmp_path / "bin.jsonl").write_bytes(b"\xff\xfe")
    with pytest.raises(DatasetError, match="not UTF-8"):
        read_rows(tmp_path / "bin.jsonl")


def test_code_tokens_split_identifiers_the_way_they_are_written():
    assert code_tokens("parseHTTPDate2(dates)") == ["parsehttpdate2", "parse", "http", "date",
                                                     "2", "date"]  # fmt: skip
    assert code_tokens("max_line_length") == ["maxlinelength", "max", "line", "length"]
    assert code_tokens("The class") == ["the", "class"]  # "ss" is no plural
    # the defined name counts NAME_WEIGHT times
    assert doc_tokens("def go():\n    pass", name_weight=3) == ["def", "go", "pass", "go", "go"]


def test_bm25_prefers_the_defined_name_and_scores_unknown_words_zero():
    docs = [
        "def parse_date(text):\n    return strptime(text)",
        "def render(page):\n    # parse later, date it\n    return page",
        "",
    ]
    bm = BM25(docs)
    s = bm.scores("Parse a date from text.")
    assert s.argmax() == 0 and s[2] == 0.0
    assert not bm.scores("zebra quux").any() and not bm.scores("").any()


def test_ranks_count_ties_against_the_right_answer():
    scores = np.array([[0.0, 0.0, 0.0], [0.9, 0.5, 0.1], [0.2, 0.7, 0.7]])
    assert ranks(scores, np.array([1, 0, 1])).tolist() == [3, 1, 2]
    r = summarize("m", np.array([1, 2, 11, 4]), candidates=20)
    assert (r.r_at_1, r.r_at_10) == (0.25, 0.75)
    assert r.mrr_at_10 == pytest.approx((1 + 1 / 2 + 0 + 1 / 4) / 4)


def test_paired_bootstrap_brackets_the_mean_difference():
    rng = np.random.default_rng(1)
    b = rng.random(500)
    assert paired_bootstrap(b + 0.25, b) == pytest.approx((0.25, 0.25, 0.25))  # no spread
    a = b + rng.normal(0.05, 0.1, size=500)
    diff, low, high = paired_bootstrap(a, b)
    assert diff == pytest.approx(float(np.mean(a - b)))
    assert low < diff < high and low > 0 and high - low < 0.05  # ~4 standard errors of 0.0045
    assert paired_bootstrap(a, b) == (diff, low, high)  # fixed resamples: the same interval
    flipped = paired_bootstrap(b, a)
    assert flipped[0] == pytest.approx(-diff) and flipped[2] < 0
    for x, y in (([], []), ([1.0, 2.0], [1.0]), ([[1.0]], [[0.0]])):
        with pytest.raises(ValueError, match="paired_bootstrap"):
            paired_bootstrap(np.array(x), np.array(y))


def test_fusion_is_a_convex_combination_of_z_scores():
    dense = np.array([[0.9, 0.8, 0.1]])
    lexical = np.array([[0.0, 6.0, 0.0]])  # BM25's scale is not cosine's
    z = lambda x: (x - x.mean()) / x.std()  # noqa: E731
    expected = 0.8 * z(dense[0]) + 0.2 * z(lexical[0])
    assert fuse(dense, lexical, 0.8)[0] == pytest.approx(expected)
    assert fuse(dense, lexical, 1.0).argmax() == 0 and fuse(dense, lexical, 0.3).argmax() == 1
    assert not fuse(np.zeros((1, 3)), np.zeros((1, 3))).any()  # no spread: no signal


class WordEmbedder:
    """A deterministic stand-in: bag of hashed words, normalized."""

    name, dim = "words", 64

    def embed(self, texts):
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for tok in code_tokens(t):
                out[i, sum(map(ord, tok)) % self.dim] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


def test_every_method_ranks_every_query():
    rows = [
        Row("a", "def add(x, y):\n    return x + y", "add two numbers"),
        Row("b", "def shout(text):\n    return text.upper()", "shout the text"),
        Row("c", "def nothing():\n    pass"),
        Row("d", "def lower(text):\n    return text.lower()", "make it quiet"),
    ]
    results = {r.method: r for r in evaluate_rows(rows, [WordEmbedder()])}
    assert set(results) == {"bm25", "words", "hybrid(bm25+words)"}
    bm25 = results["bm25"]
    assert (bm25.queries, bm25.candidates) == (3, 4)
    # "make it quiet" shares no word with any code: rank 4 of 4 by the tie rule
    assert bm25.r_at_1 == pytest.approx(2 / 3) and bm25.mrr_at_10 == pytest.approx(
        (1 + 1 + 1 / 4) / 3
    )


def test_cli_prints_each_method_and_the_best_last(tmp_path):
    path = write(
        tmp_path / "d.jsonl",
        [
            {"id": "a", "code": "def add(x, y):\n    return x + y", "query": "add numbers"},
            {"id": "b", "code": "def shout(t):\n    return t.upper()", "query": "shout it"},
            {"id": "c", "code": "def zzz():\n    pass", "query": "sleep quietly"},
        ],
    )
    r = subprocess.run(
        [BIN / "cheetah", "search", "eval", "--dataset", path, "--no-stock",
         "--json", tmp_path / "out.json"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == f"MRR@10 {(1 + 1 + 1 / 3) / 3:.4f}"
    assert "R@1 0.6667" in r.stdout and "R@10 1.0000" in r.stdout
    figures = json.loads((tmp_path / "out.json").read_text())
    assert [f["method"] for f in figures] == ["bm25"] and "reciprocal" not in figures[0]
    assert "best minus this" not in r.stdout  # one method: nothing to compare it with
    write(path, ["oops"])
    r = subprocess.run(
        [BIN / "cheetah", "search", "eval", "--dataset", path], capture_output=True, text=True
    )
    assert r.returncode == 2 and "d.jsonl:1: not JSON" in r.stderr and "Traceback" not in r.stderr


def test_cli_gives_the_best_methods_lead_over_each_other_one(tmp_path, monkeypatch, capsys):
    import argparse

    import cheetah.search.ranking_eval as evaluate
    from cheetah.cli.search import _eval

    path = write(tmp_path / "d.jsonl", [{"id": "a", "code": "x = 1", "query": "q"}])
    ranks_of = {"worse": [3, 11, 2, 5], "mid": [1, 11, 2, 5], "best": [1, 2, 1, 5]}
    worse, mid, best = (summarize(m, np.array(r * 50), 50) for m, r in ranks_of.items())
    monkeypatch.setattr(evaluate, "evaluate_rows", lambda *a, **k: [best, worse, mid])
    args = argparse.Namespace(dataset=path, no_stock=True, embedder=None, reranker=None,
                              json=str(tmp_path / "out.json"))  # fmt: skip
    assert _eval(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == f"MRR@10 {best.mrr_at_10:.4f}"  # still the best last
    leads = [line for line in out if line.startswith("best minus this: ")]
    assert len(leads) == 2 and leads[0].startswith(
        f"best minus this: {best.mrr_at_10 - worse.mrr_at_10:+.4f}"
    )
    figures = json.loads((tmp_path / "out.json").read_text())
    assert [f["method"] for f in figures] == ["worse", "mid", "best"]
    lead = figures[1]["best_minus_this"]
    assert lead["mrr_at_10"] == pytest.approx(best.mrr_at_10 - mid.mrr_at_10)
    assert 0 < lead["ci95"][0] <= lead["mrr_at_10"] <= lead["ci95"][1]
    assert "best_minus_this" not in figures[2] and "reciprocal" not in figures[2]


def test_package_rows_skip_vendored_and_test_code(tmp_path, monkeypatch):
    pkg = tmp_path / "site" / "toypkg"
    for rel in ("core.py", "_vendor/six.py", "tests/test_core.py"):
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(
            "def area(r):\n    '''Compute the area of a circle from its radius.'''\n"
            "    return 3.14 * r * r\n\n\n"
            "def twice(x):\n    '''Return twice the value given to it.'''\n    return 2 * x\n"
        )
    (pkg / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert [rel for rel, _ in package_files("toypkg")] == ["toypkg/__init__.py", "toypkg/core.py"]
    rows = package_rows(["toypkg"])
    asked = {r.query: r.code for r in rows if r.query}
    assert set(asked) == {"Compute the area of a circle from its radius.",
                          "Return twice the value given to it."}  # fmt: skip
    assert all("'''" not in code for code in asked.values())  # the docstring is cut out
    write_rows(rows, tmp_path / "out.jsonl")
    assert read_rows(tmp_path / "out.jsonl") == rows


def test_reserved_packages_are_refused(tmp_path):
    with pytest.raises(ValueError, match="reserved as an external test set"):
        package_files("pip")
    r = subprocess.run(
        [BIN / "cheetah", "search", "dataset", "--package", "urllib3", "--out", tmp_path / "x"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "urllib3 is reserved" in r.stderr
