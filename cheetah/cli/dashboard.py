"""``cheetah dashboard``: the web UI over runs, the env fleet and background jobs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _dashboard(args: argparse.Namespace) -> int:
    from cheetah.dashboard.app import serve
    from cheetah.core.http_gate import read_token

    if not args.runs.is_dir():
        print(f"cheetah dashboard: --runs {str(args.runs)!r} is not a directory", file=sys.stderr)
        return 2
    token = read_token(args.token_file) if args.token_file else None
    env_token = read_token(args.env_token_file) if args.env_token_file else None
    if args.env_url and env_token is None:
        print("cheetah dashboard: --env-url needs --env-token-file", file=sys.stderr)
        return 2
    serve(args.host, args.port, args.runs, args.jobs_dir, args.env_url or [], env_token, token)
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    dash = sub.add_parser(
        "dashboard",
        help="web UI: training runs, the env fleet, background agent jobs",
        description="Serve the dashboard: per run, reward/pass-rate curves, the rollout "
        "timeline and every trajectory (read-only, also while training writes the run); the "
        "env servers' health and load; and background `cheetah agent` jobs on isolated "
        "copies of a repo. Jobs run code: keep --host on localhost or set --token-file.",
    )
    dash.add_argument("--runs", type=Path, default=Path("runs"), help="directory of runs")
    dash.add_argument("--host", default="127.0.0.1")
    dash.add_argument("--port", type=int, default=8800)
    dash.add_argument(
        "--jobs-dir",
        type=Path,
        default=Path.home() / ".cache" / "cheetah" / "jobs",
        help="where background jobs and their trajectories are kept",
    )
    dash.add_argument("--env-url", action="append", help="an env server to show (repeatable)")
    dash.add_argument("--env-token-file", help="bearer token of the env servers")
    dash.add_argument("--token-file", help="require this bearer token on the API")
    dash.set_defaults(func=_dashboard)
