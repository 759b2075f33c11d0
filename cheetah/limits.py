"""`ServerLimits`: every bound a cheetah server puts on one request, in one place.

The env server, ``cheetah serve`` and the dashboard each read one ``ServerLimits`` at
start (``--limits FILE``, a flat TOML table of these fields) and refuse a request that
passes a bound before doing its work, with a 400 or 413 that names the bound.
``CHEETAH_`` + the field's name in capitals (``CHEETAH_SNAPSHOT_MAX_BYTES``) overrides a
field from the environment; a bad value, in a file or the environment, is a
``ConfigError`` naming it. ``docs/security.md`` lists the same fields (a test keeps the
two in step).

Left out: per-client quotas and rates (one token is one client), time limits on a
request as a whole (each kind of work has its own: commands, generation length).
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from cheetah.config import ConfigError, read_toml, validate

MiB = 1 << 20
GiB = 1 << 30


class ServerLimits(BaseModel):
    """Bounds on one request's work, per server. All are positive."""

    model_config = {"extra": "forbid"}

    # -- env server -------------------------------------------------------------------
    env_max_body_bytes: int = Field(
        64 * MiB, gt=0, description="a JSON request body to the env server"
    )
    env_max_upload_bytes: int = Field(
        GiB, gt=0, le=GiB, description="a snapshot tarball PUT to the env server"
    )
    env_max_calls: int = Field(
        256, gt=0, description="tool calls in one batch (one assistant message)"
    )
    snapshot_max_bytes: int = Field(
        512 * MiB, gt=0, description="bytes one snapshot tarball may expand to"
    )
    snapshot_max_members: int = Field(100_000, gt=0, description="members of one tarball")
    snapshot_max_depth: int = Field(
        64,
        gt=0,
        le=256,
        description="directory levels of a snapshot (a tarball member's path, a copied directory)",
    )
    snapshot_store_bytes: int = Field(
        20 * GiB,
        gt=0,
        description="disk the snapshot store (uploads and unpacked snapshots) keeps; "
        "past it, the least recently used ones no session uses are removed",
    )
    shutdown_grace_s: float = Field(
        10.0,
        ge=0,
        le=3600,
        description="after SIGTERM, how long running commands may go on before they are killed",
    )
    # -- cheetah serve ------------------------------------------------------------------
    serve_max_body_bytes: int = Field(
        32 * MiB, gt=0, description="a JSON request body to cheetah serve"
    )
    serve_max_delta_bytes: int | None = Field(
        None,
        gt=0,
        description="a weight delta body; default: twice the served model's bytes + 64 MiB",
    )
    serve_max_messages: int = Field(
        1024,
        gt=0,
        description="messages of one chat request (tokenizing a chat costs the square of its "
        "messages: 1,024 tiny ones take seconds)",
    )
    serve_max_prompt_chars: int = Field(
        2_000_000, gt=0, description="characters of one prompt (all messages of a chat together)"
    )
    serve_max_inputs: int = Field(
        256, gt=0, description="texts of one embeddings request, documents of one re-rank"
    )
    serve_max_input_chars: int = Field(
        100_000, gt=0, description="characters of one text to embed or re-rank"
    )
    serve_max_request_chars: int = Field(
        1_000_000, gt=0, description="characters of all texts of one embeddings or re-rank request"
    )
    # -- dashboard --------------------------------------------------------------------
    dashboard_max_body_bytes: int = Field(
        MiB, gt=0, description="a JSON request body to the dashboard"
    )
    dashboard_max_query_chars: int = Field(
        20_000, gt=0, description="characters of a background job's query"
    )

    @classmethod
    def load(cls, path: str | Path | None = None) -> ServerLimits:
        """The defaults, then ``path`` (TOML), then ``CHEETAH_<FIELD>`` environment variables."""
        data = read_toml(path, "limits file") if path is not None else {}
        where = f"limits file {str(path)!r}" if path is not None else "limits"
        merged = validate(cls, data, where).model_dump()
        for name in cls.model_fields:
            text = os.environ.get(env_name(name))
            if text is not None:
                merged[name] = text
        try:
            return cls.model_validate(merged)
        except ValidationError as e:
            err = e.errors()[0]
            name = str(err["loc"][0]) if err.get("loc") else "?"
            raise ConfigError(f"{env_name(name)}={merged.get(name)!r}: {err['msg']}") from None


def env_name(field: str) -> str:
    return "CHEETAH_" + field.upper()
