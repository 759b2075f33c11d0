"""docs/security.md lists every server limit with its default, as ``ServerLimits`` has it."""

import re

from cheetah.limits import ServerLimits
from tests.conftest import REPO_ROOT


def _rows() -> dict[str, str]:
    text = (REPO_ROOT / "docs" / "security.md").read_text()
    return dict(re.findall(r"^\| `(\w+)` \| ([^|]+) \|", text, flags=re.MULTILINE))


def test_every_limit_is_documented_with_its_default():
    rows = _rows()
    fields = ServerLimits.model_fields
    assert set(rows) == set(fields), set(rows) ^ set(fields)
    for name, field in fields.items():
        assert rows[name].strip().startswith(str(field.default)), (name, rows[name])
