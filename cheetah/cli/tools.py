"""``cheetah tools run|list``: run one assistant message's calls; print the tool descriptions."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from cheetah.search.code_search import EmbeddingCodeSearch


def _tools_run(args: argparse.Namespace) -> int:
    from cheetah.harness.protocol import parse_message, render_results

    if not args.repo.is_dir():
        print(f"cheetah tools run: repo {str(args.repo)!r} is not a directory", file=sys.stderr)
        return 2
    calls = parse_message(sys.stdin.read())
    if not calls:
        print("cheetah tools run: the message holds no <tool> calls", file=sys.stderr)
        return 0
    try:
        results = asyncio.run(_run_calls(args, calls))
    except Exception as e:  # an environment that cannot start: say why, no traceback
        from cheetah.sandbox.isolated import SandboxUnavailable
        from cheetah.sandbox.protocol import EnvError

        if isinstance(e, SandboxUnavailable | EnvError):
            print(f"cheetah tools run: {e}", file=sys.stderr)
            return 2
        raise
    sys.stdout.write(render_results(results) + "\n")
    return 0


async def _run_calls(args: argparse.Namespace, calls: list) -> list:
    """Run the calls on the repo itself, in an isolated session, or through an env server."""
    if not args.sandbox and not args.server:
        from cheetah.core.workspace import LocalWorkspace
        from cheetah.harness.loop import LocalTools

        return await LocalTools(
            LocalWorkspace(args.repo), code_search=EmbeddingCodeSearch()
        ).run_tools(calls)
    snapshot = f"dir:{args.repo.resolve()}"
    if args.server:  # the server copies no path of ours: the repo goes up as a tarball
        import hashlib

        from cheetah.core.http_gate import read_token
        from cheetah.sandbox.client import EnvClient
        from cheetah.tasks.checkout import pack_tree

        env = EnvClient(args.server, read_token(args.token_file))
        tarball = pack_tree(args.repo.resolve())
        sha = hashlib.sha256(tarball).hexdigest()
        if not await env.has_snapshot(sha):
            await env.put_snapshot(sha, tarball)
        snapshot = f"upload:{sha}"
    else:
        from cheetah.sandbox.env import LocalEnv

        env = LocalEnv("isolated", code_search=EmbeddingCodeSearch())
    info = await env.create_session(snapshot, refresh=True)
    try:
        results = await env.run_tools(info.session_id, calls)
        if args.diff:
            print((await env.diff(info.session_id)).diff, file=sys.stderr, end="")
        return results
    finally:
        await env.close(info.session_id)
        if args.server:
            await env.aclose()


def _tools_list(args: argparse.Namespace) -> int:
    from cheetah.harness.protocol import render_tool_specs
    from cheetah.tools import default_tools

    sys.stdout.write(render_tool_specs([t.spec for t in default_tools().values()]))
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    tools = sub.add_parser("tools", help="the agent's tools")
    tools_sub = tools.add_subparsers(dest="tools_verb", metavar="ACTION", required=True)
    run = tools_sub.add_parser(
        "run",
        help="run one assistant message's calls and print the results",
        description="Read one assistant message on stdin, run its <tool> calls in --repo "
        "(concurrently) and print the <tool_result> blocks exactly as the model sees them.",
    )
    run.add_argument("--repo", required=True, type=Path, help="the repository to work in")
    where = run.add_mutually_exclusive_group()
    where.add_argument(
        "--sandbox",
        action="store_true",
        help="run in an isolated session over a snapshot of --repo "
        "(changes are discarded; --diff prints them)",
    )
    where.add_argument(
        "--server",
        metavar="URL",
        help="run through the env server at URL (it must see --repo's path)",
    )
    run.add_argument(
        "--token-file",
        default=os.environ.get("CHEETAH_ENV_TOKEN_FILE"),
        help="bearer token for --server (default: $CHEETAH_ENV_TOKEN_FILE)",
    )
    run.add_argument(
        "--diff",
        action="store_true",
        help="with --sandbox or --server: print the session's diff on stderr",
    )
    run.set_defaults(func=_tools_run)
    lst = tools_sub.add_parser("list", help="print the tool descriptions the model is given")
    lst.set_defaults(func=_tools_list)
