"""(query, code) pairs for training and measuring the embedder, made from code we can read.

Two sources, both without a download:

- **Docstrings**: every function or method with a docstring in a corpus of Python
  source (modules of the standard library, and the third-party packages that
  ``make install`` brings, ``TRAIN_PACKAGES``) gives the docstring's first sentence as
  the query and the function *without its docstring* as the code, so the model must
  match a description to an implementation rather than to a copy of itself. Each such
  pair also carries a hard negative: another function of the same file. The corpus of
  one evaluation is a list of files, with the other chunks of those files as
  distractors.
- **Tasks**: a task's query and the chunks its reference patch changes, in its repo
  snapshot (the bundled benchmark: the query is a user's request, the chunk is where
  the fix goes).

Train and evaluation sources are kept apart by module, by package (``DEV_PACKAGES``
choose settings, ``HELDOUT_PACKAGES`` are reported; ``dataset.RESERVED`` is never read)
and by split (tasks). Deliberately left out: mining pairs from commit messages or issues.
"""

from __future__ import annotations

import ast
import random
import re
import sysconfig
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from cheetah.search.chunks import Chunk, chunk_file

# Standard-library modules (pure Python) split into a training and an evaluation set.
TRAIN_MODULES = (
    "argparse", "calendar", "configparser", "csv", "difflib", "email/message.py",
    "email/utils.py", "fractions", "ftplib", "gettext", "gzip", "heapq", "http/client.py",
    "http/cookies.py", "imaplib", "inspect", "ipaddress", "logging/__init__.py", "mailbox",
    "netrc", "optparse", "pathlib", "pickle", "plistlib", "poplib", "pprint", "queue",
    "random", "shlex", "shutil", "smtplib", "statistics", "string", "subprocess", "tarfile",
    "tempfile", "textwrap", "threading", "tokenize", "urllib/parse.py", "urllib/request.py",
    "uuid", "warnings", "zipfile",
)  # fmt: skip
EVAL_MODULES = (
    "base64", "bisect", "datetime", "decimal", "fnmatch", "ftplib", "glob", "json/decoder.py",
    "json/encoder.py", "locale", "ntpath", "numbers", "operator", "posixpath", "quopri",
    "sched", "secrets", "selectors", "socketserver", "sre_parse", "stringprep", "timeit",
    "wave", "weakref", "webbrowser", "zipapp",
)  # fmt: skip
EVAL_MODULES = tuple(m for m in EVAL_MODULES if m not in TRAIN_MODULES)

_FIRST_SENTENCE = re.compile(r"^(.+?[.!?])(\s|$)", re.S)
_BLANKS = re.compile(r"\n(?:[ \t]*\n){2,}")  # where a docstring was cut out


# Third-party packages that `make install` brings (dependencies of cheetah's extras), split
# by package: training, choosing settings (dev), and the held-out set BENCHMARKS.md reports.
# dataset.RESERVED (pip, setuptools, what pip vendors) is in none of them.
TRAIN_PACKAGES = (
    "torch", "transformers", "numpy", "pandas", "sympy", "matplotlib", "ray", "datasets",
    "pydantic", "fastapi", "_pytest", "hypothesis", "wandb", "mpmath", "fontTools", "PIL",
    "uvicorn", "openai", "gguf", "safetensors", "pyarrow", "multiprocess", "opentelemetry",
    "referencing", "tensorboardX", "torchgen", "mdurl", "pathspec", "tokenizers", "xxhash",
)  # fmt: skip
DEV_PACKAGES = (
    "networkx", "fsspec", "huggingface_hub", "tqdm", "filelock", "h11", "httpcore", "pluggy",
    "sortedcontainers", "typer",
)  # fmt: skip
HELDOUT_PACKAGES = (
    "jinja2", "click", "httpx", "starlette", "dateutil", "jsonschema", "markdown_it", "yaml",
    "anyio", "attr",
)  # fmt: skip
PAIRS_PER_PACKAGE = 1500  # so that torch and transformers do not drown the rest


@dataclass
class Pair:
    query: str
    positive: Chunk
    negative: Chunk | None = None  # a hard negative: another function of the same file


@dataclass
class Corpus:
    """Queries with their correct chunks among ``chunks`` (the haystack of one evaluation)."""

    name: str
    chunks: list[Chunk] = field(default_factory=list)
    queries: list[tuple[str, set[tuple[str, int]]]] = field(default_factory=list)  # (path, start)


def stdlib_files(modules: tuple[str, ...]) -> list[tuple[str, Path]]:
    """(name, path) of the standard-library modules that exist here."""
    base = Path(sysconfig.get_paths()["stdlib"])
    out = []
    for m in modules:
        path = base / m if m.endswith(".py") else base / f"{m}.py"
        if path.is_file():
            out.append((f"stdlib/{m if m.endswith('.py') else m + '.py'}", path))
    return out


def _summary(doc: str) -> str | None:
    text = " ".join(doc.strip().split())
    m = _FIRST_SENTENCE.match(text)
    summary = (m.group(1) if m else text).strip()
    words = summary.split()
    if len(words) < 4 or len(words) > 40 or summary.lower().startswith(("deprecated", "see ")):
        return None
    return summary


def docstring_pairs(name: str, source: str) -> tuple[list[Pair], list[Chunk]]:
    """Pairs of (docstring summary, function without its docstring) and every chunk of the
    file with docstrings removed (the haystack)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return [], []
    lines = source.splitlines(keepends=True)
    drop: set[int] = set()  # docstring lines, 1-based
    summaries: dict[tuple[int, int], str] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        doc = ast.get_docstring(node)
        body0 = node.body[0] if node.body else None
        if doc and isinstance(body0, ast.Expr) and len(node.body) > 1:
            drop.update(range(body0.lineno, (body0.end_lineno or body0.lineno) + 1))
            s = _summary(doc)
            if s and not isinstance(node, ast.ClassDef):
                summaries[(node.lineno, node.end_lineno or node.lineno)] = s
    stripped = "".join("\n" if i + 1 in drop else line for i, line in enumerate(lines))
    chunks = [
        Chunk(c.path, c.start, c.end, c.name, _BLANKS.sub("\n\n", c.text))
        for c in chunk_file(name, stripped)
        if c.text.strip()
    ]
    pairs = []
    for (start, _end), summary in summaries.items():
        best = [c for c in chunks if c.name and c.start <= start <= c.end]
        if best:
            pairs.append(Pair(summary, best[0]))
    return pairs, chunks


def docstring_corpus(name: str, files: list[tuple[str, Path]]) -> tuple[list[Pair], Corpus]:
    corpus = Corpus(name)
    pairs: list[Pair] = []
    for rel, path in files:
        p, chunks = docstring_pairs(rel, path.read_text(encoding="utf-8", errors="replace"))
        pairs.extend(p)
        corpus.chunks.extend(chunks)
    corpus.queries = [(p.query, {(p.positive.path, p.positive.start)}) for p in pairs]
    return pairs, corpus


def task_corpora(tasks_file: Path, split: str) -> tuple[list[Pair], list[Corpus]]:
    """Pairs from the tasks of ``split``, and one corpus per repo snapshot they use."""
    from cheetah.core.safefs import read_tree
    from cheetah.tasks.checkout import materialize
    from cheetah.tasks.loaders import load_tasks
    from cheetah.tasks.patch import parse_patch

    pairs: list[Pair] = []
    corpora: dict[str, Corpus] = {}
    for task in load_tasks(tasks_file):
        if task.split != split or not task.reference_patch:
            continue
        key = task.snapshot.model_dump_json()
        with tempfile.TemporaryDirectory(prefix="cheetah-pairs-") as tmp:
            root = materialize(task.snapshot, Path(tmp) / "repo")
            tree = read_tree(root)
        chunks = [
            c
            for path, data in tree.items()
            if path.endswith(".py")
            for c in chunk_file(path, data.decode("utf-8", errors="replace"))
        ]
        changed: set[tuple[str, int]] = set()
        for fp in parse_patch(task.reference_patch):
            for h in fp.hunks:
                lo, hi = h.old_start, h.old_start + max(len(h.old), 1) - 1
                changed.update(
                    (c.path, c.start)
                    for c in chunks
                    if c.path == fp.old_path and c.start <= hi and c.end >= lo
                )
        if not changed:
            continue
        corpus = corpora.setdefault(key, Corpus(f"tasks-{split}", chunks))
        corpus.queries.append((task.query, changed))
        by_key = {(c.path, c.start): c for c in chunks}
        pairs.extend(Pair(task.query, by_key[k]) for k in sorted(changed))
    return pairs, list(corpora.values())


def with_negatives(pairs: list[Pair], chunks: list[Chunk], seed: int) -> list[Pair]:
    """Each pair with a hard negative: another named chunk of the same file (None if none)."""
    rng = random.Random(seed)
    by_path: dict[str, list[Chunk]] = {}
    for c in chunks:
        if c.name:
            by_path.setdefault(c.path, []).append(c)
    out = []
    for p in pairs:
        others = [c for c in by_path.get(p.positive.path, []) if c.text != p.positive.text]
        out.append(Pair(p.query, p.positive, rng.choice(others) if others else None))
    return out


def package_training_pairs(
    names: tuple[str, ...], per_package: int = PAIRS_PER_PACKAGE, seed: int = 0
) -> list[Pair]:
    """Docstring pairs (with hard negatives) from installed packages, at most ``per_package``
    of each (a seeded sample); packages not installed are skipped."""
    from cheetah.search.dataset import package_pairs

    out: list[Pair] = []
    for name in names:
        found, chunks = package_pairs(name)
        pairs = with_negatives([Pair(q, c) for q, c in found], chunks, seed)
        random.Random(f"{seed}:{name}").shuffle(pairs)
        out += pairs[:per_package]
    return out


def training_pairs(
    tasks_file: Path | None,
    seed: int = 0,
    packages: tuple[str, ...] = TRAIN_PACKAGES,
    per_package: int = PAIRS_PER_PACKAGE,
) -> list[Pair]:
    """Docstring pairs from ``TRAIN_MODULES`` and ``packages``, task pairs from the train
    split, shuffled; docstring pairs carry a hard negative from their own file."""
    pairs, corpus = docstring_corpus("train", stdlib_files(TRAIN_MODULES))
    pairs = with_negatives(pairs, corpus.chunks, seed)
    pairs += package_training_pairs(packages, per_package, seed)
    if tasks_file is not None:
        pairs += task_corpora(tasks_file, "train")[0]
    random.Random(seed).shuffle(pairs)
    return pairs


def eval_corpora(tasks_file: Path | None) -> list[Corpus]:
    """Held-out corpora: ``EVAL_MODULES`` docstrings and held-out tasks."""
    _, stdlib = docstring_corpus("stdlib-heldout", stdlib_files(EVAL_MODULES))
    out = [stdlib]
    if tasks_file is not None:
        out += task_corpora(tasks_file, "heldout")[1]
    return out
