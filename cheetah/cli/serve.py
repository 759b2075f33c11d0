"""``cheetah serve``: load a model and serve it over the OpenAI-compatible API.

Left out: TLS, auth, multiple models per server.
"""

from __future__ import annotations

import argparse
import sys


def add_commands(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "serve",
        help="serve a model over an OpenAI-compatible HTTP API",
        description="Serve a model over /v1/chat/completions, /v1/completions, /v1/models, "
        "/v1/weights and /health; with --embedder also /v1/embeddings, with --reranker also "
        "/v1/rerank.",
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
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-batch", type=int, default=32, help="most requests per step")
    parser.add_argument("--name", default=None, help="model id to report (default: --model)")
    parser.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from cheetah.inference.local import LocalEngine
    from cheetah.inference.server import create_app
    from cheetah.model.loading import CheckpointError, ModelLoadError, load_model
    from cheetah.search.embedder import EmbedderUnavailable, load_embedder

    if args.model == "none" and not (args.embedder or args.reranker):
        print("cheetah serve: --model none serves nothing without --embedder or --reranker",
              file=sys.stderr)  # fmt: skip
        return 2
    embedder = None
    if args.embedder:
        try:
            embedder = load_embedder(args.embedder)
        except (EmbedderUnavailable, OSError) as e:
            print(f"cheetah serve: cannot load embedder {args.embedder!r}: {e}", file=sys.stderr)
            return 2
    reranker = None
    if args.reranker:
        from cheetah.search.rerank import RerankerUnavailable, load_reranker

        try:
            reranker = load_reranker(args.reranker)
        except (RerankerUnavailable, OSError) as e:
            print(f"cheetah serve: cannot load re-ranker {args.reranker!r}: {e}", file=sys.stderr)
            return 2
    engine, name = None, args.name or "none"
    if args.model != "none":
        try:
            loaded = load_model(args.model)
        except (ModelLoadError, CheckpointError) as e:
            print(f"cheetah serve: {e}", file=sys.stderr)
            return 2
        engine = LocalEngine.from_loaded(loaded, max_batch=args.max_batch)
        name = args.name or loaded.name
    app = create_app(engine, name, embedder=embedder, reranker=reranker)
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level="info")
    finally:
        if engine is not None:
            engine.close()
    return 0
