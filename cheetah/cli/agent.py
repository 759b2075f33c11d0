"""``cheetah agent``: run the agent on a repository, in place or in an isolated session.

The exit status says how the run ended (``EXIT_STATUS``): 0 the agent finished, 3 a limit
stopped it first (turns, tokens, wall time, the context window, or a reply cut at
``--max-new-tokens``), 1 the model or the tools failed, 2 bad input.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from cheetah.cli.flags import LIMIT_FLAGS, add_flags, from_flags
from cheetah.harness.loop import AgentLimits
from cheetah.search.code_search import EmbeddingCodeSearch

EXIT_LIMIT = 3  # a limit stopped the agent before it finished
EXIT_STATUS = (
    "Exit status: 0 the agent finished; 3 a limit stopped it first (turns, tokens, wall time, "
    "the context window, or a reply cut at --max-new-tokens); 1 the model or the tools "
    "failed; 2 bad input."
)


def _agent(args: argparse.Namespace) -> int:
    from rich.console import Console

    from cheetah.core.workspace import LocalWorkspace
    from cheetah.harness.policy import PolicyError
    from cheetah.harness.policy_spec import close_policy, policy_from_spec

    console = Console(stderr=args.quiet)
    try:
        workspace = LocalWorkspace(args.repo)
        policy = policy_from_spec(
            args.model,
            model_name=args.model_name,
            temperature=args.temperature,
            max_tokens=args.max_new_tokens,
            token_file=args.token_file,
        )
    except (FileNotFoundError, PolicyError) as e:  # --token-file problems are PolicyErrors
        print(f"cheetah agent: {e}", file=sys.stderr)
        return 2
    try:
        limits = from_flags(AgentLimits, args, LIMIT_FLAGS)
    except ValueError as e:
        print(f"cheetah agent: {e}", file=sys.stderr)
        return 2
    try:
        return _run(args, console, policy, workspace, limits)
    finally:
        close_policy(policy)


def _run(args, console, policy, workspace, limits) -> int:
    from cheetah.harness.display import view_for
    from cheetah.harness.loop import run_agent

    view = view_for(console)  # streams on a terminal, one line per event elsewhere
    events = None if args.quiet else view
    if args.sandbox:
        try:
            traj, diff = asyncio.run(_agent_sandboxed(args, policy, limits, events))
        except Exception as e:
            from cheetah.sandbox.isolated import SandboxUnavailable

            if isinstance(e, SandboxUnavailable):
                print(f"cheetah agent: cannot isolate commands here: {e}", file=sys.stderr)
                return 2
            raise
        console.rule("changes in the sandbox (your repo is untouched)")
        console.print(diff or "(none)", markup=False, highlight=False, soft_wrap=True)
    else:
        traj = asyncio.run(
            _kept(
                run_agent(
                    args.query,
                    policy,
                    workspace,
                    limits,
                    events=events,
                    code_search=EmbeddingCodeSearch(),
                )
            )
        )
    view.summary(traj)
    if args.out:
        path = traj.save(args.out)
        console.print(f"trajectory written to {path}")
    if traj.stop_reason == "error":
        print(f"cheetah agent: stopped by an error: {traj.stop_detail}", file=sys.stderr)
        return 1
    if traj.stop_reason == "limit":
        print(f"cheetah agent: stopped at a limit: {traj.stop_detail}", file=sys.stderr)
        return EXIT_LIMIT
    return 0


async def _kept(run):
    """The trajectory of ``run``, also when the policy or the tools failed (the turns so
    far, stop reason ``error``): the user sees and saves what happened."""
    from cheetah.harness.loop import AgentError

    try:
        return await run
    except AgentError as e:
        return e.trajectory


async def _agent_sandboxed(args, policy, limits, events):
    """Run the agent in an isolated session over a snapshot of --repo; return it and its diff:
    the same diff the grader takes of an agent's change (``tasks/change.py``), the paths it
    leaves out named after it."""
    from cheetah.harness.loop import run_agent
    from cheetah.sandbox.env import LocalEnv, SessionTools
    from cheetah.tasks.change import agent_change

    env = LocalEnv("isolated", code_search=EmbeddingCodeSearch())
    info = await env.create_session(f"dir:{args.repo.resolve()}", refresh=True)
    try:
        session = SessionTools(env, info.session_id)
        before = (await env.read_files(info.session_id)).tree()
        traj = await _kept(run_agent(args.query, policy, session, limits, events=events))
        await env.stop(info.session_id)
        change = agent_change(None, before, (await env.read_files(info.session_id)).tree())
        left = "".join(f"# not in the diff: {p} ({why})\n" for p, why in change.ungraded.items())
        return traj, change.diff + left
    finally:
        await env.close_all()


def add_commands(sub: argparse._SubParsersAction) -> None:
    from cheetah.harness.policy_spec import MODEL_HELP

    agent = sub.add_parser(
        "agent",
        help="run the agent on a repository",
        description="Run the agent on QUERY in the repo at --repo, showing the model's reply "
        "as it is written (on a terminal; one line per event otherwise), each turn's calls, "
        "results and diffs, and at the end the time to first token and tokens/s. Without "
        "--sandbox, commands run unsandboxed with your rights: use it on your own repos.",
        epilog=EXIT_STATUS,
    )
    agent.add_argument("query", help="what the agent should do")
    agent.add_argument("--repo", required=True, type=Path, help="the repository to work in")
    agent.add_argument("--model", required=True, help=MODEL_HELP)
    agent.add_argument("--model-name", help="model name to send to the server (default: its first)")
    agent.add_argument(
        "--token-file",
        type=Path,
        help="file holding the bearer token of an OpenAI-compatible --model server (cheetah "
        "serve --token-file); default: $CHEETAH_API_TOKEN, then $OPENAI_API_KEY",
    )
    agent.add_argument("--out", type=Path, help="write the trajectory JSON here")
    add_flags(agent, AgentLimits, LIMIT_FLAGS)
    agent.add_argument(
        "--max-new-tokens", type=int, default=2048, help="tokens per assistant message"
    )
    agent.add_argument("--temperature", type=float, default=0.0)
    agent.add_argument("--quiet", action="store_true", help="print only the summary")
    agent.add_argument(
        "--sandbox",
        action="store_true",
        help="work in an isolated session over a snapshot of --repo; prints the diff at the end "
        "and leaves your repo untouched",
    )
    agent.set_defaults(func=_agent)
