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
        "/v1/weights and /health.",
    )
    parser.add_argument(
        "--model",
        default="default",
        help="'default' (SmolLM2-135M-Instruct), 'tiny' (random, for tests), a model "
        "directory, a .safetensors file next to config.json, or a .gguf file",
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

    try:
        loaded = load_model(args.model)
    except (ModelLoadError, CheckpointError) as e:
        print(f"cheetah serve: {e}", file=sys.stderr)
        return 2
    engine = LocalEngine.from_loaded(loaded, max_batch=args.max_batch)
    app = create_app(engine, args.name or loaded.name)
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level="info")
    finally:
        engine.close()
    return 0
