"""How the grader runs pytest: steered by the grader, outcomes from its own plugin's report.

A test run the agent's repo could steer would grade what the repo says, so the grader decides
every input of pytest's start itself:

- ``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1``, and the plugins the task's environment installs named
  with ``-p`` (``find_runner`` lists its ``pytest11`` entry points once, in a pristine
  session, and leaves out those the repo's config blocks with ``-p no:NAME``);
- the config file pytest would pick in the pristine tree, named with ``-c``
  (``pytest_config_file``: pytest's own search order, including ``.pytest.ini`` and the
  ``pytest.toml`` names of pytest 9);
- ``-p no:cacheprovider`` and ``PYTHONDONTWRITEBYTECODE=1``: no cache, no bytecode written;
- each test's outcome from ``tasks/grade_plugin.py``, written under a module name made per
  run into a directory outside the workspace; the shell prints its report after a marker line
  made per run once pytest has exited (``split_report``), so nothing the tests print decides.

The task generator runs its tests through ``pytest_command`` too (``tasks/suite_run.py``), so
a task's checks run at grading as they ran when it was made; unittest suites and test files
pytest does not collect by name run under it as well (``tasks/suite_layout.py``).
``parse_pytest_outcomes`` reads pytest's ``-rA`` text instead, for the bundled task sets' build
script. Deliberately left out: runners other than pytest (no report to read), reading the
report through a side channel of the session API (a session's ``/tmp`` is private to each
command, so the report is printed by the same command).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from functools import cache
from pathlib import Path, PurePosixPath

from cheetah.tasks.session import TaskSession

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _summary_id(word: str, rest: str) -> str:
    """The node id in the rest of a ``-rA`` line: a PASSED line is all id; others may end in
    `` - message``, and a parametrized id may itself hold `` - `` inside its brackets."""
    if word == "PASSED":
        return rest
    bracket = rest.find("[")
    if 0 <= bracket < rest.find(" - ") or (bracket >= 0 and " - " not in rest):
        for i in range(bracket, len(rest)):
            if rest[i] == "]" and (i == len(rest) - 1 or rest.startswith(" - ", i + 1)):
                return rest[: i + 1]
    return rest.split(" - ", 1)[0]


def parse_pytest_outcomes(output: str) -> dict[str, str]:
    """Node id -> PASSED/FAILED/ERROR/... from pytest's ``-rA`` summary (colours, which a
    repo's own ``addopts = --color=yes`` turns on, are stripped first). For the
    bundled task sets' build script; the grader and the generator read the plugin's report."""
    out: dict[str, str] = {}
    for line in _ANSI.sub("", output).splitlines():
        word, _, rest = line.strip().partition(" ")
        if word in ("PASSED", "FAILED", "ERROR", "XPASS", "XFAIL") and rest:
            out[_summary_id(word, rest)] = word
    return out


@dataclass(frozen=True)
class Runner:
    """How pytest runs for a task, found in a pristine session: the plugins its environment
    has (named with ``-p``, autoload being off) and the repo's config file (``-c``)."""

    plugins: tuple[str, ...] = ()
    config: str | None = None


PYTEST_CONFIGS = (
    "pytest.ini",
    ".pytest.ini",
    "pytest.toml",
    ".pytest.toml",
    "pyproject.toml",
    "tox.ini",
    "setup.cfg",
)
_DECLARES = {
    "pyproject.toml": re.compile(r"^\[tool\.pytest(\.ini_options)?\]", re.M),
    "tox.ini": re.compile(r"^\[pytest\]", re.M),
    "setup.cfg": re.compile(r"^\[tool:pytest\]", re.M),
}
_PLUGINS_PROBE = (
    "import importlib.metadata as m\n"
    "eps = m.entry_points()\n"
    "eps = eps.select(group='pytest11') if hasattr(eps, 'select') else eps.get('pytest11', [])\n"
    "print('CHEETAH-PLUGINS:', *sorted({e.name for e in eps}))\n"
)
_PLUGIN_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")


def pytest_config_file(tree: dict[str, bytes], files: list[str]) -> str | None:
    """The config file pytest picks for ``files`` in ``tree``, by pytest's own search: from
    each file's directory up, the first name in its order that declares pytest settings;
    else the first ``pyproject.toml`` seen."""
    first_pyproject = None
    for f in files:
        for base in PurePosixPath(f).parents:
            for name in PYTEST_CONFIGS:
                rel = name if str(base) == "." else f"{base}/{name}"
                if rel not in tree:
                    continue
                if name == "pyproject.toml" and first_pyproject is None:
                    first_pyproject = rel
                pattern = _DECLARES.get(name)
                if pattern is None or pattern.search(tree[rel].decode("utf-8", "replace")):
                    return rel
    return first_pyproject


async def find_runner(
    session: TaskSession, tree: dict[str, bytes], files: list[str], python: str, timeout_s: float
) -> Runner:
    """The ``Runner`` for a pristine ``session`` (call it before any change is written):
    ``python`` lists the environment's plugins there."""
    res = await session.exec(
        f"PYTHONDONTWRITEBYTECODE=1 {python} -c {shlex.quote(_PLUGINS_PROBE)}",
        timeout_s=timeout_s,
        output_limit=64_000,
    )
    line = next((x for x in res.output.splitlines() if x.startswith("CHEETAH-PLUGINS:")), "")
    cfg = pytest_config_file(tree, files)
    blocked = tree.get(cfg, b"").decode("utf-8", "replace") if cfg else ""
    plugins = tuple(
        n
        for n in line.split()[1:]
        if _PLUGIN_NAME.match(n) and f"no:{n}" not in blocked and n != "cacheprovider"
    )
    return Runner(plugins, cfg)


@cache
def _plugin_source() -> str:
    return (Path(__file__).parent / "grade_plugin.py").read_text(encoding="utf-8")


def pytest_command(base: str, runner: Runner, nonce: str, files: list[str]) -> str:
    """Write the grade plugin outside the workspace, run pytest steered by the grader, then
    print the plugin's report after a line made per run (``split_report`` reads it back)."""
    source = _plugin_source()
    work, module = f"/tmp/cheetah-grade-{nonce}", f"cheetah_grade_{nonce}"
    args = [
        "-p",
        module,
        "-p",
        "no:cacheprovider",
        "-W",
        "ignore::pytest.PytestAssertRewriteWarning",
    ]
    for name in runner.plugins:
        args += ["-p", name]
    if runner.config:
        args += ["-c", runner.config]
    return (
        f"mkdir -m 700 {work} && printf '%s' {shlex.quote(source)} > {work}/{module}.py && "
        f"export PYTHONPATH={work}${{PYTHONPATH:+:$PYTHONPATH}} PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 "
        f"PYTHONDONTWRITEBYTECODE=1 CHEETAH_GRADE_REPORT={work}/report.json && "
        f"{base} {shlex.join(args)} {shlex.join(files)}; "
        f"printf '\\n%s\\n' {marker(nonce)}; cat {work}/report.json 2>/dev/null; rm -rf {work}"
    )


def marker(nonce: str) -> str:
    return f"CHEETAH-GRADE-REPORT-{nonce}"


@dataclass(frozen=True)
class Report:
    """What the grade plugin reported: each node id's outcome, and what of the run it found
    replaced or planted (``tampered``; empty for an honest run)."""

    outcomes: dict[str, str]
    tampered: list[str]


def split_report(output: str, nonce: str) -> tuple[str, Report | None]:
    """The test run's own output (what was printed before the run's marker line), and the
    grade plugin's report printed after it, or None when there is none (pytest did not start,
    timed out, or the report is damaged)."""
    at = output.rfind(f"\n{marker(nonce)}\n")
    if at < 0:
        return output, None
    own = output[:at]
    try:
        data = json.loads(output[at + len(marker(nonce)) + 2 :])
        outcomes, tampered = data["outcomes"], data.get("tampered", [])
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
        return own, None
    if not isinstance(outcomes, dict) or not isinstance(tampered, list):
        return own, None
    return own, Report({str(k): str(v) for k, v in outcomes.items()}, [str(t) for t in tampered])
