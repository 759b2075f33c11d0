"""``cheetah``: one entry point, one verb per job. Parsing only; the work lives in packages."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from cheetah import __version__


def _agent(args: argparse.Namespace) -> int:
    from rich.console import Console

    from cheetah.harness.display import TurnPrinter
    from cheetah.harness.loop import AgentLimits, run_agent
    from cheetah.harness.policy import PolicyError
    from cheetah.harness.select import policy_from_spec
    from cheetah.sandbox.workspace import LocalWorkspace

    console = Console(stderr=args.quiet)
    try:
        workspace = LocalWorkspace(args.repo)
        policy = policy_from_spec(
            args.model,
            model_name=args.model_name,
            temperature=args.temperature,
            max_tokens=args.max_new_tokens,
        )
    except (FileNotFoundError, PolicyError) as e:
        print(f"cheetah agent: {e}", file=sys.stderr)
        return 2
    limits = AgentLimits(
        max_turns=args.max_turns, max_tokens=args.max_tokens, max_wall_s=args.max_wall_s
    )
    printer = TurnPrinter(console)
    traj = asyncio.run(
        run_agent(args.query, policy, workspace, limits, on_turn=None if args.quiet else printer)
    )
    printer.summary(traj)
    if args.out:
        path = traj.save(args.out)
        console.print(f"trajectory written to {path}")
    return 0 if traj.stop_reason != "error" else 1


def _tools_run(args: argparse.Namespace) -> int:
    from cheetah.harness.loop import LocalTools
    from cheetah.harness.protocol import parse_message, render_results
    from cheetah.sandbox.workspace import LocalWorkspace

    try:
        workspace = LocalWorkspace(args.repo)
    except FileNotFoundError as e:
        print(f"cheetah tools run: {e}", file=sys.stderr)
        return 2
    message = sys.stdin.read()
    calls = parse_message(message)
    if not calls:
        print("cheetah tools run: the message holds no <tool> calls", file=sys.stderr)
        return 0
    results = asyncio.run(LocalTools(workspace).run_tools(calls))
    sys.stdout.write(render_results(results) + "\n")
    return 0


def _tools_list(args: argparse.Namespace) -> int:
    from cheetah.harness.protocol import render_tool_specs
    from cheetah.tools import default_tools

    sys.stdout.write(render_tool_specs([t.spec for t in default_tools().values()]))
    return 0


def build_parser() -> argparse.ArgumentParser:
    from cheetah.harness.select import MODEL_HELP

    parser = argparse.ArgumentParser(
        prog="cheetah",
        description="Fast tool-using coding agents: run the agent, its tools, and its training.",
    )
    parser.add_argument("--version", action="version", version=f"cheetah {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True)

    agent = sub.add_parser(
        "agent",
        help="run the agent on a repository",
        description="Run the agent on QUERY in the repo at --repo, showing "
        "each turn's calls, results and diffs. Runs commands unsandboxed: "
        "use it on your own repos.",
    )
    agent.add_argument("query", help="what the agent should do")
    agent.add_argument("--repo", required=True, type=Path, help="the repository to work in")
    agent.add_argument("--model", required=True, help=MODEL_HELP)
    agent.add_argument("--model-name", help="model name to send to the server (default: its first)")
    agent.add_argument("--out", type=Path, help="write the trajectory JSON here")
    agent.add_argument("--max-turns", type=int, default=30, help="stop after this many turns")
    agent.add_argument(
        "--max-tokens",
        type=int,
        default=32_000,
        help="stop once the model has written this many tokens in all",
    )
    agent.add_argument("--max-wall-s", type=float, default=600.0, help="stop after this long")
    agent.add_argument(
        "--max-new-tokens", type=int, default=2048, help="tokens per assistant message"
    )
    agent.add_argument("--temperature", type=float, default=0.0)
    agent.add_argument("--quiet", action="store_true", help="print only the summary")
    agent.set_defaults(func=_agent)

    tools = sub.add_parser("tools", help="the agent's tools")
    tools_sub = tools.add_subparsers(dest="tools_verb", metavar="ACTION", required=True)
    run = tools_sub.add_parser(
        "run",
        help="run one assistant message's calls and print the results",
        description="Read one assistant message on stdin, run its <tool> calls in --repo "
        "(concurrently) and print the <tool_result> blocks exactly as the model sees them.",
    )
    run.add_argument("--repo", required=True, type=Path, help="the repository to work in")
    run.set_defaults(func=_tools_run)
    lst = tools_sub.add_parser("list", help="print the tool descriptions the model is given")
    lst.set_defaults(func=_tools_list)

    try:
        from cheetah.inference.cli import add_serve_command
    except ImportError:
        pass
    else:
        add_serve_command(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
