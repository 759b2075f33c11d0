"""``cheetah dashboard``: the web UI over runs, the env fleet and background jobs.

Everything the server trusts is decided here, before it listens: the token (``--token-file``;
without one it only binds loopback, and refuses jobs), the snapshot roots jobs may copy
(``--snapshot-root``; without one, no jobs), the model roots a job's ``scripted:FILE`` or
model path may come from (``--model-root``), and the request limits (``--limits``). A bad
setting exits with status 2 and a line naming it.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class _Refused(Exception):
    """A setting that stops the dashboard before it starts; the message names it."""


@dataclass(frozen=True)
class _Settings:
    token: str | None
    env_token: str | None
    limits: Any  # ServerLimits (imported late: the CLI's import stays light)
    snapshot_roots: tuple[Path, ...]
    model_roots: tuple[Path, ...]


def _settings(args: argparse.Namespace) -> _Settings:
    """The checked settings for ``serve``, or _Refused naming the first bad one."""
    from cheetah.config import ConfigError
    from cheetah.core.http_gate import SettingError, check_bind, read_token
    from cheetah.dashboard.jobs import resolve_roots
    from cheetah.limits import ServerLimits

    if not args.runs.is_dir():
        raise _Refused(f"--runs {str(args.runs)!r} is not a directory")
    try:
        token = read_token(args.token_file) if args.token_file else None
        env_token = read_token(args.env_token_file) if args.env_token_file else None
        check_bind("cheetah dashboard", args.host, token)
    except SettingError as e:  # read_token and check_bind say why in their message
        raise _Refused(str(e)) from None
    if args.env_url and env_token is None:
        raise _Refused("--env-url needs --env-token-file")
    try:
        limits = ServerLimits.load(args.limits)
    except ConfigError as e:
        raise _Refused(str(e)) from None
    try:
        snapshot_roots = resolve_roots(args.snapshot_root or [], "--snapshot-root")
        model_roots = resolve_roots(args.model_root or [], "--model-root")
    except ValueError as e:
        raise _Refused(str(e)) from None
    return _Settings(token, env_token, limits, snapshot_roots, model_roots)


def _dashboard(args: argparse.Namespace) -> int:
    from cheetah.dashboard.app import serve

    try:
        s = _settings(args)
    except _Refused as e:
        print(f"cheetah dashboard: {e}", file=sys.stderr)
        return 2
    serve(
        args.host,
        args.port,
        args.runs,
        args.jobs_dir,
        args.env_url or [],
        s.env_token,
        s.token,
        snapshot_roots=s.snapshot_roots,
        model_roots=s.model_roots,
        limits=s.limits,
    )
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    dash = sub.add_parser(
        "dashboard",
        help="web UI: training runs, the env fleet, background agent jobs",
        description="Serve the dashboard: per run, reward/pass-rate curves, the rollout "
        "timeline and every trajectory (read-only, also while training writes the run); the "
        "env servers' health and load; and background `cheetah agent` jobs on isolated "
        "copies of repos under --snapshot-root. Jobs run code, so they need --token-file; "
        "without one the dashboard binds only to loopback and shows runs and jobs read-only. "
        "Open the URL it prints (with #token=... when a token is set).",
    )
    dash.add_argument(
        "--runs",
        type=Path,
        default=Path("runs"),
        help="directory of runs (each a folder with run.sqlite), or one run's folder",
    )
    dash.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1); anything beyond loopback needs --token-file",
    )
    dash.add_argument("--port", type=int, default=8800)
    dash.add_argument(
        "--jobs-dir",
        type=Path,
        default=Path.home() / ".cache" / "cheetah" / "jobs",
        help="where background jobs and their trajectories are kept (nothing is written "
        "there while jobs are off)",
    )
    dash.add_argument("--env-url", action="append", help="an env server to show (repeatable)")
    dash.add_argument("--env-token-file", help="bearer token of the env servers")
    dash.add_argument(
        "--token-file",
        help="a file holding the bearer token (at least 16 characters) every API request "
        "must carry; the page reads it from #token=... in its URL. Without it, jobs are "
        "refused (403) and the read-only views are open to this machine",
    )
    dash.add_argument(
        "--snapshot-root",
        type=Path,
        action="append",
        metavar="DIR",
        help="a directory whose subdirectories (and itself) jobs may copy and work on "
        "(repeatable); a job's repo must resolve, after links, to a directory under one. "
        "Whoever holds the token can read everything under it. Without one, no jobs",
    )
    dash.add_argument(
        "--model-root",
        type=Path,
        action="append",
        metavar="DIR",
        help="a directory whose files a job's model may name: scripted:FILE or a model "
        "directory/file under it (repeatable). 'default', 'tiny' and http(s) URLs need none",
    )
    dash.add_argument(
        "--limits",
        type=Path,
        metavar="FILE",
        help="TOML file of server limits (dashboard_max_body_bytes, "
        "dashboard_max_query_chars; CHEETAH_<FIELD> overrides)",
    )
    dash.set_defaults(func=_dashboard)
