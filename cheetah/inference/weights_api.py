"""``POST /v1/weights`` and ``POST /v1/weights/delta``: replacing the served policy's weights.

``/v1/weights`` takes ``{"path": dir, "version"?: int}`` and loads that checkpoint's
safetensors; ``/v1/weights/delta`` takes a ``cheetah.inference.weight_delta`` blob as the raw
body and applies it to the engine's current weights (409, ``DeltaMismatch``, when it was made
against another version or other weights, and the sender falls back to ``/v1/weights``). The
two take turns, so a delta never reads weights that a load is changing.

Both routes change what every client of the server gets back, so ``server.create_app``
puts them behind the token even on loopback (403 without one). What they read is bounded
before it is used: a delta body by the gate's cap for this route, its header checked against
the engine's own tensor names and shapes before anything is allocated or decoded; a checkpoint
path must be readable by this server and lie outside ``/proc``, ``/sys`` and ``/dev``. Left
out: limiting checkpoint paths to configured roots (the token holder is the trainer, which
names its own checkpoints).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from pydantic import BaseModel, Field

from cheetah.inference.local import LocalEngine
from cheetah.inference.protocol import InvalidRequest
from cheetah.inference.weight_delta import DeltaMismatch, MalformedDelta, apply_delta, read_header
from cheetah.model.loading import CheckpointError, read_state_dict

PSEUDO_FILESYSTEMS = ("proc", "sys", "dev")  # never a checkpoint; reading them can hang or leak


class WeightsRequest(BaseModel):
    path: str
    version: int | None = Field(None, ge=0, lt=2**63)


def add_weight_routes(app: FastAPI, engine: LocalEngine) -> None:
    weights_turn = asyncio.Lock()  # one weight load at a time (see the module docstring)

    @app.post("/v1/weights")
    async def weights(body: WeightsRequest) -> dict[str, Any]:
        async with weights_turn:
            state = await asyncio.to_thread(read_checkpoint, body.path)
            version = body.version if body.version is not None else engine.policy_version + 1
            try:
                await engine.load_weights(state, version)
            except CheckpointError as e:
                raise InvalidRequest(str(e)) from None
        return {"status": "ok", "policy_version": engine.policy_version, "path": body.path}

    @app.post("/v1/weights/delta")
    async def weights_delta(request: Request) -> dict[str, Any]:
        blob = await request.body()  # at most the gate's cap for this route (413 past it)
        async with weights_turn:
            try:
                state, version = await asyncio.to_thread(
                    apply_fitting_delta, engine.model.state_dict(), blob, engine.policy_version
                )
                await engine.load_weights(state, version)
            except (MalformedDelta, CheckpointError) as e:
                raise InvalidRequest(str(e)) from None
        return {"status": "ok", "policy_version": engine.policy_version, "bytes": len(blob)}


def read_checkpoint(path: str) -> dict[str, Any]:
    """The tensors of the checkpoint at ``path``, or ``InvalidRequest`` naming why not: a
    path under /proc, /sys or /dev, one that cannot be read, or no safetensors there."""
    if "\0" in path:
        raise InvalidRequest("path: contains a NUL character")
    try:
        if _under_pseudo_filesystem(os.path.abspath(os.path.expanduser(path))) or (
            _under_pseudo_filesystem(os.path.realpath(os.path.expanduser(path)))
        ):
            roots = ", ".join(f"/{name}" for name in PSEUDO_FILESYSTEMS)
            raise InvalidRequest(f"{path}: a checkpoint may not lie under {roots}")
        return read_state_dict(path)
    except CheckpointError as e:
        raise InvalidRequest(str(e)) from None
    except OSError as e:  # a directory or file this server's user may not read
        raise InvalidRequest(f"{path}: cannot read it ({e.strerror or e})") from None


def _under_pseudo_filesystem(path: str) -> bool:
    parts = Path(path).parts
    return len(parts) > 1 and parts[1] in PSEUDO_FILESYSTEMS


def apply_fitting_delta(
    held: dict[str, Any], blob: bytes, version: int
) -> tuple[dict[str, Any], int]:
    """``apply_delta`` once the blob's header names only tensors the engine holds, each with
    the shape it holds (``DeltaMismatch`` naming the first that does not): nothing is
    allocated or decoded for a delta that could never load."""
    header, _ = read_header(blob)
    for entry in header["tensors"]:
        name, shape = entry["name"], entry["shape"]
        if name not in held:
            raise DeltaMismatch(f"tensor {name}: the delta has it, the served model does not")
        if list(held[name].shape) != shape:
            raise DeltaMismatch(
                f"tensor {name}: the delta's shape is {shape}, the served model's "
                f"{list(held[name].shape)}"
            )
    return apply_delta(held, blob, version)
