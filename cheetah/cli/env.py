"""``cheetah env serve``: an env server (sandboxed sessions over HTTP)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from cheetah.search.code_search import EmbeddingCodeSearch


def _env_serve(args: argparse.Namespace) -> int:
    from cheetah.config import ConfigError
    from cheetah.core.http_gate import SettingError
    from cheetah.sandbox.isolated import SandboxUnavailable
    from cheetah.sandbox.server import serve

    try:
        serve(
            args.host,
            args.port,
            args.token_file,
            args.backend,
            args.capacity,
            args.idle_timeout_s,
            args.config,
            args.reap_interval_s,
            code_search=None if args.embedder == "none" else EmbeddingCodeSearch(args.embedder),
            snapshot_roots=args.snapshot_root or [],
            limits_file=args.limits,
        )
    except SandboxUnavailable as e:
        print(f"cheetah env serve: cannot isolate commands here: {e}", file=sys.stderr)
        return 2
    except (ConfigError, SettingError) as e:  # a bad config, limit, root or token file
        print(f"cheetah env serve: {e}", file=sys.stderr)
        return 2
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    env = sub.add_parser("env", help="sandboxed environment servers")
    env_sub = env.add_subparsers(dest="env_verb", metavar="ACTION", required=True)
    srv = env_sub.add_parser(
        "serve",
        help="serve isolated sessions over HTTP",
        description="Serve sandboxed sessions (create from a snapshot, run tool calls, diff, "
        "reset, fork, grade, close) over HTTP. Every endpoint but /health needs the bearer "
        "token held in --token-file. Sessions start from uploaded tarballs (PUT "
        "/snapshots/SHA256, what the fleet client does) or from paths under a --snapshot-root; "
        "every request is bounded by the limits in --limits (docs/security.md lists them).",
    )
    srv.add_argument("--host", default="127.0.0.1")
    srv.add_argument("--port", type=int, default=8700)
    srv.add_argument(
        "--token-file", required=True, help="file holding the bearer token (16+ characters)"
    )
    srv.add_argument(
        "--snapshot-root",
        action="append",
        type=Path,
        metavar="DIR",
        help="a directory whose subtrees clients may name as dir:/tar:/git: snapshots "
        "(repeatable); without one, sessions start from uploads only",
    )
    srv.add_argument(
        "--limits",
        type=Path,
        metavar="FILE",
        help="TOML table of request limits (cheetah.limits.ServerLimits: body and upload "
        "bytes, calls per batch, tarball bytes/members/depth, snapshot store budget, "
        "shutdown grace); CHEETAH_<NAME> environment variables override single fields",
    )
    srv.add_argument(
        "--backend",
        choices=["isolated", "local"],
        default="isolated",
        help="'local' runs commands UNSANDBOXED (trusted use only)",
    )
    srv.add_argument("--capacity", type=int, default=64, help="sessions before answering 429")
    srv.add_argument(
        "--idle-timeout-s", type=float, default=1800.0, help="close sessions idle this long"
    )
    srv.add_argument(
        "--reap-interval-s", type=float, default=30.0, help="how often to look for idle sessions"
    )
    srv.add_argument(
        "--config",
        type=Path,
        help="TOML file of sandbox limits (memory_mb, pids_max, cpus, cpu_time_s, "
        "file_size_mb, disk_mb, tmp_mb, open_files, nproc, uid, gid, base_dir, seccomp)",
    )
    srv.add_argument(
        "--embedder",
        default=os.environ.get("CHEETAH_EMBEDDER", "default"),
        help="codebase_search's embedder: 'default', 'stock' (all-MiniLM-L6-v2), a model "
        "directory written by `cheetah search train`, the URL of an embedding service "
        "(`cheetah serve --model none --embedder default` -> http://HOST:PORT/v1: this server "
        "then loads no torch), or 'none' to turn the tool off (env CHEETAH_EMBEDDER; loaded "
        "on the first search)",
    )
    srv.set_defaults(func=_env_serve)
