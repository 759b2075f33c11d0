"""Per-repo Python environments: what a repo's tests need, built once on the host.

A fetched repo's tests often need packages this interpreter lacks (``simplejson``,
``pytest-cov``) or must not see (a plugin such as ``pytest-asyncio`` that turns a warning into
an error under the repo's ``filterwarnings = error``). ``build_env`` makes one virtualenv per
repo, apart from cheetah's own: ``python -m venv --copies --without-pip`` (the interpreter is
copied, so the folder works wherever it is mounted: sessions see it read-only at ``/env``),
then this interpreter's pip installs into it (``pip --python``): pytest at the version
cheetah runs, the repo's runtime requirements (``Requires-Dist`` of its ``PKG-INFO``, extras
left out) and what its entry of the package list adds (``test_requires``); its bytecode is
compiled as ``unchecked-hash`` (valid without the source timestamps a packed tarball drops).

An env is rebuilt only when what it should hold changes (``cheetah-env.json`` records it).
Deliberately left out: other interpreters than this one (the env's ``pyvenv.cfg`` points at
this interpreter's home, which sandboxes already mount) and packages that must compile
(the list holds pure-Python packages; their deps come as wheels).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

PIP_TIMEOUT_S = 900.0
MARKER = "cheetah-env.json"
_EXTRA = re.compile(r"\bextra\s*==")


class EnvBuildError(RuntimeError):
    """An environment could not be built; the message ends with pip's last lines."""


def runtime_requirements(repo: Path) -> list[str]:
    """``Requires-Dist`` lines of the repo's ``PKG-INFO`` that no extra guards."""
    info = repo / "PKG-INFO"
    if not info.is_file():
        return []
    out = []
    for line in info.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            break  # the headers end at the first blank line; the long description follows
        if line.startswith("Requires-Dist:"):
            req = line.split(":", 1)[1].strip()
            if not _EXTRA.search(req):
                out.append(req)
    return out


def env_requirements(repo: Path, test_requires: list[str]) -> list[str]:
    """Everything the repo's env holds: pytest as cheetah runs it, then the repo's needs."""
    return [f"pytest=={version('pytest')}", *runtime_requirements(repo), *test_requires]


def build_env(
    dest: Path, requirements: list[str], index_url: str | None = None, python: str | None = None
) -> Path:
    """The env at ``dest`` holding ``requirements`` (built, or kept if it already does)."""
    marker = dest / MARKER
    want = {"python": sys.version.split()[0], "requirements": requirements, "pyc": "unchecked"}
    if marker.is_file():
        try:
            if json.loads(marker.read_text()) == want:
                return dest
        except ValueError:
            pass
    if dest.exists():
        shutil.rmtree(dest)
    python = python or sys.executable
    _run([python, "-m", "venv", "--copies", "--without-pip", str(dest)], "venv")
    pip = [python, "-m", "pip", "--python", str(dest / "bin" / "python"), "install"]
    pip += ["--quiet", "--no-input", "--disable-pip-version-check"]
    if index_url:
        pip += ["--index-url", index_url]
    try:
        _run([*pip, *requirements], "pip install")
        # Bytecode that holds without source timestamps: sessions get the env from a
        # tarball with every mtime zeroed, where timestamp-checked .pyc files would all be
        # stale and each import would compile again (3-4x slower test runs, measured).
        _run(
            [str(dest / "bin" / "python"), "-m", "compileall", "-q", "-j0",
             "--invalidation-mode", "unchecked-hash", str(dest / "lib")],
            "compileall",
        )  # fmt: skip
    except EnvBuildError:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    marker.write_text(json.dumps(want, indent=1) + "\n")
    return dest


def _run(argv: list[str], what: str) -> None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise EnvBuildError(f"{what} did not finish in {PIP_TIMEOUT_S:g} s") from None
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
        raise EnvBuildError(f"{what} failed (exit {proc.returncode}):\n{tail}")
