"""docs/architecture.md stays true to the code: every path it names exists, and every name in
its glossary's code column is defined in the package."""

import ast
import re

from tests.conftest import REPO_ROOT

DOC = REPO_ROOT / "docs" / "architecture.md"


def _expand(path: str) -> list[str]:
    """``a/{b,c}.py`` -> ``a/b.py``, ``a/c.py``."""
    m = re.search(r"\{([^}]*)\}", path)
    if not m:
        return [path]
    head, tail = path[: m.start()], path[m.end() :]
    return [p for alt in m.group(1).split(",") for p in _expand(head + alt + tail)]


def _named_paths(text: str) -> list[str]:
    out = []
    for token in re.findall(r"`([^`\s]+)`", text):
        if re.match(r"^(cheetah|tests|bench|docs)/", token):
            out += [p.split("::")[0] for p in _expand(token.rstrip(".,:;"))]
    return out


def test_every_path_named_in_the_architecture_exists():
    paths = _named_paths(DOC.read_text())
    assert len(paths) > 20  # the page names its modules
    missing = [p for p in paths if not list(REPO_ROOT.glob(p))]
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def _defined_names() -> set[str]:
    names: set[str] = set()
    for path in (REPO_ROOT / "cheetah").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                names.add(node.name)
    return names


def test_the_glossary_names_what_the_code_defines():
    text = DOC.read_text()
    section = text.split("## Glossary", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    nouns = {row.split("|")[1].strip() for row in rows[1:]}
    for noun in ("session", "environment", "workspace", "snapshot", "episode", "rollout",
                 "engine", "policy", "stage"):  # fmt: skip
        assert noun in nouns, f"the glossary lacks {noun!r}"
    defined = _defined_names()
    code = [c for row in rows[1:] for c in re.findall(r"`(\w+)`", row.split("|")[3])]
    assert code
    unknown = [c for c in code if c not in defined]
    assert not unknown, f"the glossary names what the code does not define: {unknown}"
