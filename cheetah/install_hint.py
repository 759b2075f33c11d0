"""The command that adds an extra (``ml``) to *this* cheetah, for hints in error messages.

The distribution is named ``cheetah``, and on the package index that name belongs to an
unrelated project, so a hint never says ``pip install 'cheetah[ml]'``. It names where this
cheetah was installed from, as pip recorded it (``direct_url.json``, PEP 610): the checkout
(with ``-e`` when it was installed editable) or the wheel file. When pip recorded nothing,
the source tree this module is in, if it is a checkout; else a placeholder for the
checkout's path. For ``ml``, torch comes first and pinned, as the README says: without it
pip resolves the newest torch with its CUDA wheels, several GB.

Deliberately left out: publishing cheetah under a free name on the index.
"""

from __future__ import annotations

import json
import shlex
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlsplit

TORCH = "torch==2.13.0"  # the README's and the Makefile's pin
PLACEHOLDER = "/path/to/your/cheetah/checkout"


def installed_from() -> tuple[str, bool]:
    """(the checkout or wheel this cheetah was installed from, whether it is editable)."""
    try:
        raw = metadata.distribution("cheetah").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        raw = None
    try:
        info = json.loads(raw) if raw else {}
    except ValueError:
        info = {}
    url = info.get("url", "") if isinstance(info, dict) else ""
    if url.startswith("file://"):
        editable = bool((info.get("dir_info") or {}).get("editable"))
        return unquote(urlsplit(url).path), editable
    tree = Path(__file__).resolve().parent.parent
    if (tree / "pyproject.toml").is_file() and (tree / "cheetah").is_dir():
        return str(tree), True
    return PLACEHOLDER, False


def extra_hint(extra: str = "ml") -> str:
    """``pip install ...`` that adds ``extra`` to this cheetah (torch first for ``ml``)."""
    where, editable = installed_from()
    pip = f"pip install {'-e ' if editable else ''}{shlex.quote(f'{where}[{extra}]')}"
    return f"pip install {TORCH} && {pip}" if extra == "ml" else pip
