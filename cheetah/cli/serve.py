"""``cheetah serve``: load a model and serve it over the OpenAI-compatible API.

The server trusts the holder of its bearer token (``--token-file``) and no one else: with a
token, every route but ``GET /health`` needs it; without one it binds loopback only, answers
only loopback ``Host`` names, and refuses the weight routes. ``--limits FILE`` (a TOML table
of ``ServerLimits`` fields; ``CHEETAH_SERVE_*`` variables override) bounds each request; see
``inference/server.py``. The token is never printed. Left out: TLS (put a proxy in front),
multiple models per server.
"""

from __future__ import annotations

import argparse
import sys

SHUTDOWN_GRACE_S = 30  # after SIGTERM, how long open requests may finish before they are cut


def add_commands(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "serve",
        help="serve a model over an OpenAI-compatible HTTP API",
        description="Serve a model over /v1/chat/completions, /v1/completions, /v1/models, "
        "/v1/weights and /health; with --embedder also /v1/embeddings, with --reranker also "
        "/v1/rerank. With --token-file every route but /health needs 'Authorization: Bearer "
        "TOKEN'; without it the server binds loopback only and refuses the weight routes.",
    )
    parser.add_argument(
        "--model",
        default="default",
        help="'default' (SmolLM2-135M-Instruct), 'tiny' (random, for tests), a model "
        "directory, a .safetensors file next to config.json, a .gguf file, or 'none' "
        "(only what --embedder and --reranker give)",
    )
    parser.add_argument(
        "--embedder",
        help="also serve /v1/embeddings with this embedder: 'default' (what codebase_search "
        "uses), 'stock' (all-MiniLM-L6-v2) or a directory from `cheetah search train`; env "
        "servers and agents then search through it (--embedder http://HOST:PORT/v1)",
    )
    parser.add_argument(
        "--reranker",
        help="also serve /v1/rerank with this cross-encoder: 'default' (what codebase_search "
        "re-ranks with) or a directory from `cheetah search train-reranker`",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind; one beyond loopback (0.0.0.0, a LAN address) needs --token-file",
    )
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--token-file",
        help="file holding the bearer token (at least 16 characters) that every route but "
        "/health then requires; clients send it as 'Authorization: Bearer TOKEN' "
        "(cheetah's own read $CHEETAH_API_TOKEN, then $OPENAI_API_KEY). Without it the weight "
        "routes (/v1/weights, /v1/weights/delta) answer 403",
    )
    parser.add_argument(
        "--limits",
        help="TOML file of per-request bounds (ServerLimits: serve_max_body_bytes, "
        "serve_max_delta_bytes, serve_max_messages, serve_max_prompt_chars, serve_max_inputs, "
        "serve_max_input_chars, serve_max_request_chars); CHEETAH_<FIELD> variables override",
    )
    parser.add_argument("--max-batch", type=int, default=32, help="most requests per step")
    parser.add_argument(
        "--engine",
        choices=["cheetah", "llama.cpp"],
        default="cheetah",
        help="what runs the model: cheetah's engine (default), or llama.cpp on a .gguf --model "
        "(llama-server from $LLAMA_SERVER or PATH, else llama-cpp-python's server; needs "
        "--token-file, which it checks as its API key)",
    )
    parser.add_argument(
        "--name",
        default=None,
        help="the model id the server reports (/v1/models, /health, each response's 'model'); "
        "default: the model's own name, not the --model value: smollm2-135m-instruct for "
        "'default', 'tiny', the directory's or the .gguf file's name (without .gguf)",
    )
    parser.set_defaults(func=run_serve)


class CannotServe(Exception):
    """A setting or a model that stops the server before it starts; the message says which."""


def _fail(message: str) -> int:
    prefix = "" if message.startswith("cheetah serve:") else "cheetah serve: "
    print(f"{prefix}{message}", file=sys.stderr)
    return 2


def run_serve(args: argparse.Namespace) -> int:
    from cheetah.config import ConfigError
    from cheetah.core.http_gate import SettingError, check_bind, read_token
    from cheetah.limits import ServerLimits

    if args.model == "none" and not (args.embedder or args.reranker):
        return _fail("--model none serves nothing without --embedder or --reranker")
    try:  # everything that can refuse the settings comes before any model is loaded
        limits = ServerLimits.load(args.limits)
        token = read_token(args.token_file) if args.token_file else None
        check_bind("cheetah serve", args.host, token)
    except ConfigError as e:
        return _fail(str(e))
    except SettingError as e:  # read_token and check_bind say why in their message
        return _fail(str(e))
    if args.engine == "llama.cpp":
        return _serve_llama_cpp(args, token)
    try:
        engine, name, embedder, reranker = _load(args)
    except CannotServe as e:
        return _fail(str(e))
    return _serve(args, limits, token, engine, name, embedder, reranker)


def _serve_llama_cpp(args: argparse.Namespace, token: str | None) -> int:
    """llama.cpp in the foreground on --host/--port until interrupted."""
    from cheetah.inference.llama_cpp_server import LlamaCppError, LlamaCppServer

    if token is None:
        return _fail("--engine llama.cpp needs --token-file (llama.cpp checks it as its API key)")
    if args.embedder or args.reranker:
        return _fail("--engine llama.cpp serves the model only; leave out --embedder/--reranker")
    try:
        server = LlamaCppServer(
            args.model,
            host=args.host,
            port=args.port,
            parallel=args.max_batch,
            api_key=token,
            alias=args.name,
        )
        server.start()
    except LlamaCppError as e:
        return _fail(str(e))
    print(
        f"llama.cpp serving model {server.name!r} at {server.url} ({server.command[0]})",
        flush=True,
    )
    try:
        assert server.proc is not None
        return server.proc.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        server.stop()


def _load(args: argparse.Namespace) -> tuple:
    """(engine or None, model id, embedder or None, re-ranker or None); ``CannotServe``
    naming what failed to load."""
    from cheetah.inference.local import LocalEngine
    from cheetah.model.loading import CheckpointError, ModelLoadError, load_model
    from cheetah.search.embedder import EmbedderUnavailable, load_embedder

    embedder = None
    if args.embedder:
        try:
            embedder = load_embedder(args.embedder)
        except (EmbedderUnavailable, OSError) as e:
            raise CannotServe(f"cannot load embedder {args.embedder!r}: {e}") from None
    reranker = None
    if args.reranker:
        from cheetah.search.rerank import RerankerUnavailable, load_reranker

        try:
            reranker = load_reranker(args.reranker)
        except (RerankerUnavailable, OSError) as e:
            raise CannotServe(f"cannot load re-ranker {args.reranker!r}: {e}") from None
    engine, name = None, args.name or "none"
    if args.model != "none":
        try:
            loaded = load_model(args.model)
        except (ModelLoadError, CheckpointError) as e:
            raise CannotServe(str(e)) from None
        engine = LocalEngine.from_loaded(loaded, max_batch=args.max_batch)
        name = args.name or loaded.name
    return engine, name, embedder, reranker


def _serve(args, limits, token, engine, name, embedder, reranker) -> int:
    import uvicorn

    from cheetah.core.http_gate import loopback_hosts
    from cheetah.inference.server import create_app

    app = create_app(
        engine,
        name,
        embedder=embedder,
        reranker=reranker,
        token=token,
        limits=limits,
        allowed_hosts=loopback_hosts(args.host),
    )
    if token is not None:
        who = f"every route but /health needs the bearer token in {args.token_file}"
    else:
        who = "no --token-file: open to local clients, the weight routes refused (403)"
    what = f"model {name!r}" if engine is not None else "no model"
    print(
        f"cheetah serve on http://{args.host}:{args.port} ({what}): {who}",
        file=sys.stderr,
        flush=True,
    )
    try:
        uvicorn.run(
            app,
            host=args.host,
            port=args.port,
            log_level="info",
            timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
        )
    finally:
        if engine is not None:
            engine.close()
    return 0
