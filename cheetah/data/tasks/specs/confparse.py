"""Tasks on benchmarks/repos/confparse (INI-style config parsing with typed values)."""

from build import Bug, Change, WriteTests

R = "confparse"

FORMAT_SIZE = '''

def format_size(n: int) -> str:
    """Bytes as a binary size: 512 -> "512B", 1536 -> "1.5KiB", 2**30 -> "1GiB"."""
    if n < 0:
        raise ValueError("negative size")
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            break
        value /= 1024
    else:
        unit = "TiB"
    text = f"{value:.1f}".rstrip("0").rstrip(".")
    return f"{text}{unit}"
'''

TASKS = [
    Bug(
        id="confparse-list-empty-items",
        repo=R,
        tier="easy",
        query="parse_list in confparse/values.py should drop empty items: 'a, b,,c ' must "
        "give ['a', 'b', 'c']. Fix it.",
        file="confparse/values.py",
        good='return [item.strip() for item in text.split(",") if item.strip()]',
        bad='return [item.strip() for item in text.split(",")]',
    ),
    Bug(
        id="confparse-unquote-closing",
        repo=R,
        tier="easy",
        query="unquote in confparse/values.py leaves the closing quote in the result: "
        "unquote('\"hi\"') should be 'hi'. Fix it.",
        file="confparse/values.py",
        good="return text[1:-1]",
        bad="return text[1:]",
    ),
    Bug(
        id="confparse-minutes",
        repo=R,
        tier="easy",
        query="parse_duration('1m30s') in confparse/units.py should return 90 seconds, but "
        "minutes are converted with the wrong factor. Fix it.",
        file="confparse/units.py",
        good='"m": 60.0',
        bad='"m": 6.0',
    ),
    Bug(
        id="confparse-bool-on",
        repo=R,
        tier="easy",
        split="heldout",
        query="parse_bool in confparse/values.py must accept 'on' as true (like 'true' and "
        "'yes'), but it raises ValueError. Fix it.",
        file="confparse/values.py",
        good='TRUE_WORDS = {"true", "yes", "on"}',
        bad='TRUE_WORDS = {"true", "yes"}',
    ),
    Bug(
        id="confparse-lowercase-keys",
        repo=R,
        tier="easy",
        query="Keys read by parse_raw in confparse/parser.py must be lower-cased: "
        "'MaxSize = 3' should give the key 'maxsize'. Fix it.",
        file="confparse/parser.py",
        good="key = key.strip().lower()",
        bad="key = key.strip()",
    ),
    Bug(
        id="confparse-continuation",
        repo=R,
        query="A value continued on an indented line loses its first line: 'roots = /srv/a,' "
        "followed by an indented '/srv/b' gives only '/srv/b' instead of '/srv/a, /srv/b'.",
        file="confparse/parser.py",
        good='sections[current][last_key] += " " + _strip_comment(stripped)',
        bad="sections[current][last_key] = _strip_comment(stripped)",
    ),
    Bug(
        id="confparse-format-duration",
        repo=R,
        split="heldout",
        query="format_duration(90061) should be '1d1h1m1s' but it returns a different "
        "string. Find and fix the bug.",
        file="confparse/units.py",
        good="            rest %= size",
        bad="            rest -= size",
    ),
    Change(
        id="confparse-env-interpolation",
        repo=R,
        kind="feature",
        query="Add ${NAME} interpolation to confparse.load: load(text, env=None) replaces "
        "each ${NAME} in a value with env[NAME] before the value is typed (so "
        "'port = ${PORT}' with env={'PORT': '80'} gives the int 80). Names missing from "
        "env are left as they are. Without env nothing changes.",
        edits=[
            (
                "confparse/parser.py",
                "from __future__ import annotations\n",
                "from __future__ import annotations\n\nimport re\n",
            ),
            (
                "confparse/parser.py",
                'COMMENT_PREFIXES = ("#", ";")\n',
                'COMMENT_PREFIXES = ("#", ";")\n_VAR = re.compile(r"\\$\\{(\\w+)\\}")\n',
            ),
            (
                "confparse/parser.py",
                "def load(text: str) -> dict[str, dict[str, object]]:\n"
                '    """Parse config text into sections of typed values."""\n'
                "    return {\n"
                "        name: {key: convert(value) for key, value in items.items()}\n",
                "def interpolate(value: str, env: dict[str, str]) -> str:\n"
                '    """Replace ${NAME} with env[NAME]; unknown names stay as written."""\n'
                "    return _VAR.sub(lambda m: env.get(m.group(1), m.group(0)), value)\n\n\n"
                "def load(text: str, env: dict[str, str] | None = None) -> dict[str, dict[str, object]]:\n"
                '    """Parse config text into sections of typed values, ${NAME} taken from env."""\n'
                "    env = env or {}\n"
                "    return {\n"
                "        name: {key: convert(interpolate(value, env)) for key, value in items.items()}\n",
            ),
        ],
        hidden={
            "tests/test_interpolation.py": "from confparse import load\n\n\n"
            "def test_env_values_are_substituted_then_typed():\n"
            '    cfg = load("[s]\\nport = ${PORT}\\nurl = http://${HOST}:${PORT}/\\n", '
            'env={"PORT": "80", "HOST": "h"})\n'
            '    assert cfg["s"] == {"port": 80, "url": "http://h:80/"}\n\n\n'
            "def test_unknown_names_stay():\n"
            '    assert load("[s]\\na = ${NOPE}\\n", env={})["s"]["a"] == "${NOPE}"\n'
            '    assert load("[s]\\na = ${X}\\n")["s"]["a"] == "${X}"\n'
        },
    ),
    Change(
        id="confparse-format-size",
        repo=R,
        kind="feature",
        query="Add format_size(n) to confparse/units.py, the inverse of parse_size for "
        "binary units: 512 -> '512B', 1536 -> '1.5KiB', 2**30 -> '1GiB'. At most one "
        "decimal, no trailing '.0'; negative sizes raise ValueError.",
        edits=[
            (
                "confparse/units.py",
                '    return "".join(parts) or "0s"\n',
                '    return "".join(parts) or "0s"\n' + FORMAT_SIZE,
            )
        ],
        hidden={
            "tests/test_format_size.py": "import pytest\n\nfrom confparse.units import "
            "format_size, parse_size\n\n\n"
            "@pytest.mark.parametrize(\n"
            '    ("n", "text"), [(512, "512B"), (1536, "1.5KiB"), (2**30, "1GiB"), '
            '(3 * 2**20, "3MiB")]\n'
            ")\n"
            "def test_format_size(n, text):\n"
            "    assert format_size(n) == text\n"
            "    assert parse_size(text) == n\n\n\n"
            "def test_format_size_negative():\n"
            "    with pytest.raises(ValueError):\n"
            "        format_size(-1)\n"
        },
    ),
    Change(
        id="confparse-rename-parse-raw",
        repo=R,
        kind="refactor",
        query="Refactor: rename parse_raw in confparse/parser.py to parse_sections and update "
        "its callers and tests. Keep parse_raw working as a deprecated alias that emits a "
        "DeprecationWarning and returns the same result.",
        edits=[
            (
                "confparse/parser.py",
                "from __future__ import annotations\n",
                "from __future__ import annotations\n\nimport warnings\n",
            ),
            ("confparse/parser.py", "def parse_raw(text: str)", "def parse_sections(text: str)"),
            (
                "confparse/parser.py",
                "        for name, items in parse_raw(text).items()",
                "        for name, items in parse_sections(text).items()",
            ),
            (
                "confparse/parser.py",
                "def load(",
                "def parse_raw(text: str) -> dict[str, dict[str, str]]:\n"
                '    """Deprecated name of ``parse_sections``."""\n'
                '    warnings.warn("parse_raw is deprecated; use parse_sections", '
                "DeprecationWarning, stacklevel=2)\n"
                "    return parse_sections(text)\n\n\n"
                "def load(",
            ),
            (
                "tests/test_parser.py",
                "from confparse.parser import parse_raw",
                "from confparse.parser import parse_sections",
            ),
            (
                "tests/test_parser.py",
                'assert parse_raw(SAMPLE)["paths"]',
                'assert parse_sections(SAMPLE)["paths"]',
            ),
        ],
        hidden={
            "tests/test_rename.py": "import pytest\n\nfrom confparse.parser import "
            "parse_raw, parse_sections\n\n\n"
            "def test_parse_sections():\n"
            '    assert parse_sections("[a]\\nx = 1\\n") == {"a": {"x": "1"}}\n\n\n'
            "def test_parse_raw_is_deprecated_but_works():\n"
            "    with pytest.warns(DeprecationWarning):\n"
            '        assert parse_raw("[a]\\nx = 1\\n") == {"a": {"x": "1"}}\n'
        },
    ),
    WriteTests(
        id="confparse-tests-strip-comment",
        repo=R,
        query="_strip_comment in confparse/parser.py has no direct tests. Write tests for it "
        "in a new file tests/test_strip_comment.py: inline comments with '#' and ';' after "
        "whitespace are removed (and the trailing space before them), comment characters "
        "inside quotes are kept, and a '#' not preceded by whitespace (like 'a#b') is kept.",
        test_file="tests/test_strip_comment.py",
        reference="from confparse.parser import _strip_comment\n\n\n"
        "def test_removes_inline_comments():\n"
        '    assert _strip_comment("value  # note") == "value"\n'
        '    assert _strip_comment("value ; note") == "value"\n\n\n'
        "def test_keeps_quoted_comment_chars():\n"
        "    assert _strip_comment('\"a # b\"') == '\"a # b\"'\n\n\n"
        "def test_keeps_hash_without_space():\n"
        '    assert _strip_comment("a#b") == "a#b"\n',
        mutants=[
            ("confparse/parser.py", 'elif ch in "#;" and not quote and', 'elif ch in "#;" and'),
            ("confparse/parser.py", " and i > 0 and line[i - 1].isspace():", ":"),
            ("confparse/parser.py", "return line[:i].rstrip()", "return line[:i]"),
        ],
    ),
]
