"""``cheetah``: one entry point, one verb per job. Parsing only; the work lives in packages."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from cheetah import __version__


def _agent(args: argparse.Namespace) -> int:
    from rich.console import Console

    from cheetah.core.workspace import LocalWorkspace
    from cheetah.harness.display import TurnPrinter
    from cheetah.harness.loop import AgentLimits, run_agent
    from cheetah.harness.policy import PolicyError
    from cheetah.harness.select import policy_from_spec

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
    on_turn = None if args.quiet else printer
    if args.sandbox:
        try:
            traj, diff = asyncio.run(_agent_sandboxed(args, policy, limits, on_turn))
        except Exception as e:
            from cheetah.sandbox.isolated import SandboxUnavailable

            if isinstance(e, SandboxUnavailable):
                print(f"cheetah agent: cannot isolate commands here: {e}", file=sys.stderr)
                return 2
            raise
        console.rule("changes in the sandbox (your repo is untouched)")
        console.print(diff or "(none)", markup=False, highlight=False)
    else:
        traj = asyncio.run(run_agent(args.query, policy, workspace, limits, on_turn=on_turn))
    printer.summary(traj)
    if args.out:
        path = traj.save(args.out)
        console.print(f"trajectory written to {path}")
    return 0 if traj.stop_reason != "error" else 1


async def _agent_sandboxed(args, policy, limits, on_turn):
    """Run the agent in an isolated session over a snapshot of --repo; return it and its diff."""
    from cheetah.harness.loop import run_agent
    from cheetah.sandbox.env import EnvSession, LocalEnv

    env = LocalEnv("isolated")
    info = await env.create_session(f"dir:{args.repo.resolve()}", refresh=True)
    try:
        traj = await run_agent(
            args.query, policy, EnvSession(env, info.session_id), limits, on_turn=on_turn
        )
        return traj, (await env.diff(info.session_id)).diff
    finally:
        await env.close_all()


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

        return await LocalTools(LocalWorkspace(args.repo)).run_tools(calls)
    snapshot = f"dir:{args.repo.resolve()}"
    if args.server:
        from cheetah.sandbox.client import EnvClient
        from cheetah.sandbox.server import read_token

        env = EnvClient(args.server, read_token(args.token_file))
    else:
        from cheetah.sandbox.env import LocalEnv

        env = LocalEnv("isolated")
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


def _train(args: argparse.Namespace) -> int:
    from cheetah.rl.config import ConfigError, load_config

    try:
        cfg = load_config(args.config, args.set or [])
    except ConfigError as e:
        print(f"cheetah {args.verb}: {e}", file=sys.stderr)
        return 2
    from cheetah.rl.train import TrainJob

    try:
        job = TrainJob(cfg, resume=getattr(args, "resume", False))
    except (FileExistsError, ValueError) as e:
        print(f"cheetah {args.verb}: {e}", file=sys.stderr)
        return 2
    if args.verb == "sft":
        print(f"sft checkpoint: {asyncio.run(job.sft_only())}")
        return 0
    summary = asyncio.run(job.run())  # the driver has printed the stage table
    print(f"summary: {summary['run_dir']}/summary.json (wall {summary['wall_s']:.0f} s)")
    return 0


def _moe_upcycle(args: argparse.Namespace) -> int:
    from cheetah.model.loading import ModelLoadError
    from cheetah.model.moe import UpcycleError, upcycle_checkpoint

    try:
        out = upcycle_checkpoint(args.model, args.out, args.experts, args.top_k, args.seed)
    except (ModelLoadError, UpcycleError) as e:
        print(f"cheetah moe upcycle: {e}", file=sys.stderr)
        return 2
    print(f"{args.experts} experts (top {args.top_k}) written to {out}")
    return 0


def _dashboard(args: argparse.Namespace) -> int:
    from cheetah.dashboard.app import serve
    from cheetah.sandbox.server import read_token

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


def _env_serve(args: argparse.Namespace) -> int:
    from cheetah.config import ConfigError
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
        )
    except SandboxUnavailable as e:
        print(f"cheetah env serve: cannot isolate commands here: {e}", file=sys.stderr)
        return 2
    except ConfigError as e:
        print(f"cheetah env serve: {e}", file=sys.stderr)
        return 2
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
        "each turn's calls, results and diffs. Without --sandbox, commands run "
        "unsandboxed with your rights: use it on your own repos.",
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
    agent.add_argument(
        "--sandbox",
        action="store_true",
        help="work in an isolated session over a snapshot of --repo; prints the diff at the end "
        "and leaves your repo untouched",
    )
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

    for verb, text in (
        ("train", "RL training: rollouts on Ray, GRPO-style trainer, checkpoints (the main job)"),
        ("sft", "warm start: supervised steps on oracle trajectories, saved as a checkpoint"),
    ):
        p = sub.add_parser(verb, help=text, description=text)
        p.add_argument("--config", type=Path, help="TOML config (e.g. configs/quickstart.toml)")
        p.add_argument(
            "--set",
            action="append",
            metavar="SECTION.KEY=VALUE",
            help="override one setting, e.g. --set train.steps=2 (repeatable)",
        )
        if verb == "train":
            p.add_argument(
                "--resume",
                action="store_true",
                help="continue the run in the run directory from its newest checkpoint",
            )
        p.set_defaults(func=_train)

    env = sub.add_parser("env", help="sandboxed environment servers")
    env_sub = env.add_subparsers(dest="env_verb", metavar="ACTION", required=True)
    srv = env_sub.add_parser(
        "serve",
        help="serve isolated sessions over HTTP",
        description="Serve sandboxed sessions (create from a snapshot, run tool calls, diff, "
        "reset, fork, grade, close) over HTTP. Every endpoint but /health needs the bearer "
        "token held in --token-file.",
    )
    srv.add_argument("--host", default="127.0.0.1")
    srv.add_argument("--port", type=int, default=8700)
    srv.add_argument("--token-file", required=True, help="file holding the bearer token")
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
        "file_size_mb, disk_mb, tmp_mb, uid, gid, base_dir)",
    )
    srv.set_defaults(func=_env_serve)

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

    moe = sub.add_parser("moe", help="mixture-of-experts checkpoints")
    moe_sub = moe.add_subparsers(dest="moe_verb", metavar="ACTION", required=True)
    up = moe_sub.add_parser(
        "upcycle",
        help="turn a dense Llama-style checkpoint into a Mixtral MoE (HF format)",
        description="Copy each decoder MLP into --experts experts and add a router with small "
        "random weights: at step 0 the MoE computes what the dense model did. The output is a "
        "MixtralForCausalLM directory usable as --model / model.spec (train.mxfp8 trains it "
        "with MXFP8 GEMMs).",
    )
    up.add_argument("--model", default="default", help="default | tiny | an HF directory")
    up.add_argument("--experts", type=int, default=4, help="experts per layer")
    up.add_argument("--top-k", type=int, default=2, help="experts each token uses")
    up.add_argument("--seed", type=int, default=0, help="seed of the router weights")
    up.add_argument("--out", type=Path, required=True, help="directory to write")
    up.set_defaults(func=_moe_upcycle)

    from cheetah.tasks.cli import add_eval_command, add_tasks_command

    add_tasks_command(sub)
    add_eval_command(sub)

    from cheetah.search.cli import add_search_command

    add_search_command(sub)

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
