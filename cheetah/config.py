"""Reading typed TOML configs: one place for file errors and validation messages.

Each config is a pydantic model owned by its package (``SandboxConfig``,
``TrainRunConfig``); this module only reads files and turns errors into one line
that names the file and the field.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


class ConfigError(ValueError):
    """A config file or setting is wrong; the message names which and why."""


def read_toml(path: str | Path, what: str = "config") -> dict[str, Any]:
    try:
        return tomllib.loads(Path(path).read_text())
    except OSError as e:
        raise ConfigError(f"cannot read {what} {str(path)!r}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{what} {str(path)!r} is not valid TOML: {e}") from None


def validate(model: type[M], data: dict[str, Any], where: str) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors()
        )
        raise ConfigError(f"{where}: {problems}") from None
