"""CLI flags derived from typed config fields: a flag's name, type, default and help come
from the pydantic model that defines the setting, so each setting has one definition for
TOML configs and command lines alike (``--max-turns`` is ``AgentLimits.max_turns``).

Deliberately left out: nested models and list-valued fields (no verb needs them as flags).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import TypeVar

from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def add_flags(parser: argparse.ArgumentParser, model: type[BaseModel], fields: Iterable[str]):
    """One flag per field of ``model`` (its description as help, its default shown)."""
    for name in fields:
        info = model.model_fields[name]
        kind = info.annotation
        help_text = f"{info.description or name} (default: {info.default})"
        if kind is bool:
            parser.add_argument(
                flag_name(name),
                dest=name,
                action=argparse.BooleanOptionalAction,
                default=info.default,
                help=help_text,
            )
        elif kind in (int, float, str):
            parser.add_argument(
                flag_name(name), dest=name, type=kind, default=info.default, help=help_text
            )
        else:
            raise TypeError(f"{model.__name__}.{name}: no flag for a {kind} field")


def from_flags(model: type[M], args: argparse.Namespace, fields: Iterable[str]) -> M:
    """The model built from the parsed flags; ``ValueError`` naming the flag when a value is
    out of range (e.g. ``--max-turns 0``)."""
    names = list(fields)
    try:
        return model(**{n: getattr(args, n) for n in names})
    except ValidationError as e:
        first = e.errors()[0]
        where = flag_name(str(first["loc"][0])) if first["loc"] else model.__name__
        raise ValueError(f"{where}: {first['msg']}") from None


LIMIT_FLAGS = ("max_turns", "max_tokens", "max_wall_s")  # AgentLimits fields as flags
