"""The environment boundary: wire types and the `Environment` protocol.

Imported by both ends: ``LocalEnv`` (in process), ``EnvServer`` (FastAPI) and
``EnvClient`` / ``EnvFleet`` (HTTP). A session is a workspace made from a snapshot
that keeps its state (files, todo list) across batches of tool calls.

Besides the agent's tool calls, a session answers what task code needs around a
rollout: ``exec`` (a setup command, a check), ``read_files``/``write_files`` (the
grader's baseline, its hidden tests) and ``stop`` (kill what the agent left running
before grading). Paths always stay inside the session root.
"""

from __future__ import annotations

import base64
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from cheetah.core.wire import ToolCall, ToolResult


class CreateSessionRequest(BaseModel):
    snapshot: str = Field(
        description="dir:PATH, tar:PATH, git:PATH@COMMIT, a bare path (all on the server), "
        "or upload:SHA256 (a tarball put at /snapshots/SHA256)"
    )
    session_id: str | None = None
    refresh: bool = Field(False, description="re-read a directory snapshot even if cached")
    env: str | None = Field(
        None,
        description="a Python environment the commands run with, named as a snapshot is "
        "(upload:SHA256 of a tarball of a venv made with --copies): read-only at /env, "
        "its bin first on PATH",
    )


class SessionInfo(BaseModel):
    session_id: str
    snapshot: str
    isolation: str


class CallModel(BaseModel):
    index: int
    name: str
    args: dict[str, str] = Field(default_factory=dict)
    error: str | None = None

    @classmethod
    def of(cls, call: ToolCall) -> CallModel:
        return cls(index=call.index, name=call.name, args=call.args, error=call.error)

    def to_call(self) -> ToolCall:
        return ToolCall(index=self.index, name=self.name, args=dict(self.args), error=self.error)


class ResultModel(BaseModel):
    index: int
    name: str
    output: str
    is_error: bool = False
    started_s: float = 0.0
    wall_s: float = 0.0
    meta: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def of(cls, r: ToolResult) -> ResultModel:
        return cls(
            index=r.index,
            name=r.name,
            output=r.output,
            is_error=r.is_error,
            started_s=r.started_s,
            wall_s=r.wall_s,
            meta=r.meta,
        )

    def to_result(self) -> ToolResult:
        return ToolResult(
            index=self.index,
            name=self.name,
            output=self.output,
            is_error=self.is_error,
            started_s=self.started_s,
            wall_s=self.wall_s,
            meta=dict(self.meta),
        )


class RunToolsRequest(BaseModel):
    calls: list[CallModel]


class RunToolsResponse(BaseModel):
    results: list[ResultModel]


class DiffResponse(BaseModel):
    paths: list[str]
    diff: str
    truncated: list[str] = Field(
        default_factory=list,
        description="directories too deep to compare (below 64 levels): not in paths or diff",
    )


class FilesResponse(BaseModel):
    """Every non-junk regular file of a session, base64-encoded (what a grader reads)."""

    files: dict[str, str]
    total_bytes: int
    truncated: list[str] = Field(
        default_factory=list, description="directories too deep to read (below 64 levels)"
    )

    def tree(self) -> dict[str, bytes]:
        return {k: base64.b64decode(v) for k, v in self.files.items()}

    @classmethod
    def of(cls, tree: dict[str, bytes], truncated: list[str] | None = None) -> FilesResponse:
        files = {k: base64.b64encode(v).decode("ascii") for k, v in tree.items()}
        total = sum(len(v) for v in tree.values())
        return cls(files=files, total_bytes=total, truncated=truncated or [])


class WriteFilesRequest(BaseModel):
    """Files to write (base64) or delete (``null``), by path relative to the session root."""

    files: dict[str, str | None]

    def changes(self) -> dict[str, bytes | None]:
        """The decoded changes; ValueError naming the file whose content is not base64."""
        out: dict[str, bytes | None] = {}
        for k, v in self.files.items():
            try:
                out[k] = None if v is None else base64.b64decode(v, validate=True)
            except ValueError:
                raise ValueError(f"file {k!r}: content is not valid base64") from None
        return out

    @classmethod
    def of(cls, changes: dict[str, bytes | None]) -> WriteFilesRequest:
        return cls(
            files={
                k: None if v is None else base64.b64encode(v).decode("ascii")
                for k, v in changes.items()
            }
        )


class ExecRequest(BaseModel):
    """One command in the session's sandbox (a task's setup, a grader's check)."""

    command: str
    timeout_s: float = Field(120.0, gt=0, le=3600)
    cwd: str = "."
    output_limit: int = Field(16_000, ge=1, le=2_000_000)


class ExecResponse(BaseModel):
    exit_code: int | None
    output: str
    timed_out: bool
    wall_s: float
    omitted_bytes: int = 0


class Stats(BaseModel):
    sessions: int
    capacity: int
    sessions_created: int = Field(0, description="sessions created since start (forks too)")
    isolation: str
    cpu_count: int
    load_avg_1m: float
    memory_total_mb: float
    memory_available_mb: float
    uptime_s: float


class Health(BaseModel):
    ok: bool
    isolation: str


class EnvError(RuntimeError):
    """An environment operation failed; ``status`` follows HTTP (404 unknown session, 429 full)."""

    def __init__(self, message: str, status: int = 400, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status, self.retry_after = status, retry_after


@runtime_checkable
class Environment(Protocol):
    async def create_session(
        self,
        snapshot: str,
        session_id: str | None = None,
        refresh: bool = False,
        env: str | None = None,
    ) -> SessionInfo: ...

    async def run_tools(self, session_id: str, calls: list[ToolCall]) -> list[ToolResult]: ...

    async def diff(self, session_id: str) -> DiffResponse: ...

    async def reset(self, session_id: str) -> None: ...

    async def fork(self, session_id: str) -> SessionInfo: ...

    async def read_files(self, session_id: str) -> FilesResponse: ...

    async def write_files(self, session_id: str, request: WriteFilesRequest) -> None: ...

    async def exec(self, session_id: str, request: ExecRequest) -> ExecResponse: ...

    async def stop(self, session_id: str) -> None: ...

    async def close(self, session_id: str) -> None: ...

    async def stats(self) -> Stats: ...
