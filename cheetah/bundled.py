"""Task sets and configs that ship inside the package (``cheetah/data``), found by name.

So that an installed ``cheetah`` works outside the checkout: ``cheetah train --config
quickstart``, ``cheetah eval --tasks benchmark`` and ``tasks.file = "curriculum"`` in a TOML
file all name bundled files. A value that is an existing file is that file; a bare name (no
directory, no suffix) that is not a file names the bundled one of that name; anything else
stays a path, so the caller's "no such file" error names what the user wrote (``missing``
words it with the bundled names listed).

Deliberately left out: downloading task sets or configs (no network at run time), and
search paths beyond the working directory and the package.
"""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
TASK_SETS = DATA / "tasks"
CONFIGS = DATA / "configs"
SAMPLE_REPO = DATA / "sample_repo"
EMBEDDER = DATA / "embedder"  # the LoRA adapter codebase_search uses by default
RERANKER = DATA / "reranker"  # the cross-encoder that re-ranks codebase_search's top candidates


def names(folder: Path, suffix: str) -> list[str]:
    """The bundled names in ``folder`` (files ending in ``suffix``), sorted."""
    return sorted(p.name.removesuffix(suffix) for p in folder.glob(f"*{suffix}"))


def _resolve(value: str | Path, folder: Path, suffix: str) -> Path:
    path = Path(value)
    bare = len(path.parts) == 1 and not path.suffix
    if bare and not path.is_file() and (folder / f"{path}{suffix}").is_file():
        return folder / f"{path}{suffix}"
    return path


def task_file(value: str | Path) -> Path:
    """A task file path, or the bundled task set ``value`` names (``benchmark``, ``curriculum``,
    ``real``: a set may ship xz-compressed, ``NAME.jsonl.xz``)."""
    path = _resolve(value, TASK_SETS, ".jsonl")
    return path if path.is_file() else _resolve(value, TASK_SETS, ".jsonl.xz")


def config_file(value: str | Path) -> Path:
    """A TOML config path, or the bundled config ``value`` names (``quickstart``, ...)."""
    return _resolve(value, CONFIGS, ".toml")


def missing(path: Path, what: str, folder: Path, *suffixes: str) -> str:
    """The error for a ``what`` file that does not exist, listing the bundled names."""
    found = sorted({n for s in suffixes for n in names(folder, s)})
    return f"{path}: no such {what} (bundled: {', '.join(found)})"
