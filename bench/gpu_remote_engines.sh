#!/usr/bin/env bash
# Remote engines for real (issue 15, part 3), on a machine with a CUDA GPU:
#
#   bash bench/gpu_remote_engines.sh [vllm|sglang] [OUT_DIR]     # default: vllm, /tmp/remote-engines
#
# 1. exports the default model (SmolLM2-135M-Instruct, from its PyPI package) as a HF directory;
# 2. installs the server in its own venv (it brings its own CUDA torch; cheetah's .venv keeps
#    its CPU build), starts it on that directory with the flags inference/remote.py documents;
# 3. runs one `cheetah train` RL step whose rollouts go to the server
#    (--set model.engine_urls=... model.engine_kind=...), then one weight update back to it
#    (a checkpoint under model.staging_dir that the server reloads in place);
# 4. prints the step's logprob agreement between trainer and server (train_mismatch_kl,
#    train_mismatch_max_abs: the behaviour logprobs the server returned against the
#    trainer's own), the weight-sync time, and generates once more after the update to show
#    the server serves the new version.
#
# The trainer runs on the CPU (cheetah's torch); the server has the GPU. Needs `make install`
# first. tests/inference/test_remote_gpu.py (marked gpu) runs this script.
set -euo pipefail
KIND="${1:-vllm}"
OUT="${2:-/tmp/remote-engines}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="$ROOT/.venv/bin/python"
PORT=8123
mkdir -p "$OUT"
MODEL="$OUT/model"
SERVER_VENV="$OUT/$KIND-venv"
LOG="$OUT/$KIND-server.log"
t_start=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t_start ))s] $*"; }

stamp "exporting the default model to $MODEL"
"$PY" - "$MODEL" <<'PYEOF'
import sys
from cheetah.model.loading import load_policy
m = load_policy("default")
m.model.save_pretrained(sys.argv[1], safe_serialization=True)
m.tokenizer.save_pretrained(sys.argv[1])
PYEOF

if [ ! -x "$SERVER_VENV/bin/python" ]; then
  stamp "installing $KIND into $SERVER_VENV"
  python3 -m venv "$SERVER_VENV"
  "$SERVER_VENV/bin/pip" install -q --upgrade pip
  if [ "$KIND" = vllm ]; then "$SERVER_VENV/bin/pip" install -q vllm
  else "$SERVER_VENV/bin/pip" install -q "sglang[all]"; fi
fi

stamp "starting $KIND on port $PORT (log $LOG)"
if [ "$KIND" = vllm ]; then
  VLLM_SERVER_DEV_MODE=1 "$SERVER_VENV/bin/vllm" serve "$MODEL" --port "$PORT" \
    --logprobs-mode processed_logprobs --gpu-memory-utilization 0.5 --max-model-len 4096 \
    >"$LOG" 2>&1 &
else
  "$SERVER_VENV/bin/python" -m sglang.launch_server --model-path "$MODEL" --port "$PORT" \
    --mem-fraction-static 0.5 --context-length 4096 >"$LOG" 2>&1 &
fi
SERVER_PID=$!
trap 'kill $SERVER_PID 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do
  if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null; then break; fi
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then tail -50 "$LOG"; echo "$KIND exited"; exit 1; fi
  sleep 1
done
curl -sf "http://127.0.0.1:$PORT/health" >/dev/null || { tail -50 "$LOG"; exit 1; }
stamp "$KIND is up"

stamp "one RL step on $KIND, weights synced back"
"$ROOT/.venv/bin/cheetah" train --config quickstart \
  --set "model.spec=$MODEL" \
  --set "model.engine_urls=[\"http://127.0.0.1:$PORT/v1\"]" \
  --set "model.engine_kind=$KIND" \
  --set "model.staging_dir=$OUT/staging" \
  --set "run.out_dir=$OUT/runs" --set "run.name=$KIND" \
  --set train.steps=1 --set train.sft_steps=0 \
  --set rollout.format_weight=0.2 --set tasks.eval_limit=2 \
  --set rollout.sandbox=local 2>&1 | tail -20

stamp "what the step measured"
"$PY" - "$OUT/runs/$KIND/run.sqlite" "$OUT/staging" "$PORT" <<'PYEOF'
import asyncio, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
rows = dict(db.execute(
    "SELECT name, value FROM metrics WHERE name IN ('train_mismatch_kl', "
    "'train_mismatch_max_abs', 'weight_sync_s', 'reward_mean', 'train_tokens')"
).fetchall())
for k in sorted(rows):
    print(f"  {k:26s} {rows[k]:.6g}")
if "train_mismatch_kl" not in rows:
    print("  no RL step trained (every group had equal rewards): rerun")
from cheetah.inference.remote import RemoteEngine
from cheetah.inference.protocol import SamplingParams
async def after():
    eng = RemoteEngine(f"http://127.0.0.1:{sys.argv[3]}/v1")
    out = await eng.generate([1, 2, 3, 4], SamplingParams(temperature=0.0, max_tokens=8))
    print(f"  generation after the update: {len(out.token_ids)} ids, logprobs {out.logprobs[:3]}")
    await eng.aclose()
asyncio.run(after())
PYEOF
stamp "done"
