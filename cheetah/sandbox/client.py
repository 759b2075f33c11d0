"""`EnvClient`: the `Environment` protocol over HTTP to one env server.

Transport failures (refused, reset, timed out) raise ``ServerDown`` so the fleet
can tell a dead server from an answer it should pass on.
"""

from __future__ import annotations

import httpx

from cheetah.core.wire import ToolCall, ToolResult
from cheetah.sandbox.protocol import (
    CallModel,
    CreateSessionRequest,
    DiffResponse,
    EnvError,
    ExecRequest,
    ExecResponse,
    FilesResponse,
    Health,
    RunToolsRequest,
    RunToolsResponse,
    SessionInfo,
    Stats,
    WriteFilesRequest,
)


class ServerDown(EnvError):
    def __init__(self, message: str) -> None:
        super().__init__(message, 503)


class EnvClient:
    def __init__(self, base_url: str, token: str, timeout_s: float = 900.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout_s, connect=5.0),
            headers={"Authorization": f"Bearer {token}"},
            limits=httpx.Limits(max_connections=256, max_keepalive_connections=64),
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _request(
        self,
        method: str,
        path: str,
        json: dict | None = None,
        content: bytes | None = None,
        timeout_s: float | None = None,
    ) -> httpx.Response:
        timeout = httpx.Timeout(timeout_s, connect=5.0) if timeout_s else httpx.USE_CLIENT_DEFAULT
        try:
            resp = await self._client.request(
                method, path, json=json, content=content, timeout=timeout
            )
        except httpx.TransportError as e:
            raise ServerDown(f"{self.base_url}: {type(e).__name__}: {e}") from None
        if resp.status_code >= 400:
            try:
                detail = resp.json().get("detail", resp.text)
            except ValueError:
                detail = resp.text
            retry = resp.headers.get("Retry-After")
            raise EnvError(
                f"{self.base_url}{path}: {detail}",
                resp.status_code,
                retry_after=float(retry) if retry else None,
            )
        return resp

    async def health(self) -> Health:
        return Health.model_validate((await self._request("GET", "/health")).json())

    async def stats(self) -> Stats:
        return Stats.model_validate((await self._request("GET", "/stats")).json())

    async def create_session(
        self,
        snapshot: str,
        session_id: str | None = None,
        refresh: bool = False,
        env: str | None = None,
    ) -> SessionInfo:
        body = CreateSessionRequest(
            snapshot=snapshot, session_id=session_id, refresh=refresh, env=env
        ).model_dump(exclude_none=True)
        return SessionInfo.model_validate((await self._request("POST", "/sessions", body)).json())

    async def run_tools(self, session_id: str, calls: list[ToolCall]) -> list[ToolResult]:
        body = RunToolsRequest(calls=[CallModel.of(c) for c in calls]).model_dump()
        resp = await self._request("POST", f"/sessions/{session_id}/tools", body)
        return [r.to_result() for r in RunToolsResponse.model_validate(resp.json()).results]

    async def diff(self, session_id: str) -> DiffResponse:
        resp = await self._request("GET", f"/sessions/{session_id}/diff")
        return DiffResponse.model_validate(resp.json())

    async def reset(self, session_id: str) -> None:
        await self._request("POST", f"/sessions/{session_id}/reset")

    async def fork(self, session_id: str) -> SessionInfo:
        resp = await self._request("POST", f"/sessions/{session_id}/fork")
        return SessionInfo.model_validate(resp.json())

    async def close(self, session_id: str) -> None:
        await self._request("DELETE", f"/sessions/{session_id}")

    async def read_files(self, session_id: str) -> FilesResponse:
        resp = await self._request("GET", f"/sessions/{session_id}/files")
        return FilesResponse.model_validate(resp.json())

    async def write_files(self, session_id: str, request: WriteFilesRequest) -> None:
        await self._request("PUT", f"/sessions/{session_id}/files", request.model_dump())

    async def exec(self, session_id: str, request: ExecRequest) -> ExecResponse:
        # A command may legitimately run longer than the client's default read timeout.
        resp = await self._request(
            "POST",
            f"/sessions/{session_id}/exec",
            request.model_dump(),
            timeout_s=max(self.timeout_s, request.timeout_s + 60),
        )
        return ExecResponse.model_validate(resp.json())

    async def stop(self, session_id: str) -> None:
        await self._request("POST", f"/sessions/{session_id}/stop")

    async def has_snapshot(self, sha: str) -> bool:
        try:
            await self._request("HEAD", f"/snapshots/{sha}")
        except EnvError as e:
            if e.status == 404 and not isinstance(e, ServerDown):
                return False
            raise
        return True

    async def put_snapshot(self, sha: str, data: bytes) -> None:
        await self._request("PUT", f"/snapshots/{sha}", content=data)
