"""vLLM and SGLang for real (gpu): ``bench/gpu_remote_engines.sh`` starts the server on the
default model, runs one RL step whose rollouts it serves, syncs the new weights back to it,
and prints the trainer/server logprob agreement. Never part of the default run; the CPU tests
of the same calls are in test_remote.py (a recorded stand-in server)."""

import os
import re
import shutil
import subprocess

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.gpu


@pytest.mark.timeout(900)
@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_a_real_server_rolls_out_takes_a_weight_update_and_agrees_on_logprobs(kind, tmp_path):
    if shutil.which("nvidia-smi") is None:
        pytest.skip("no CUDA GPU here")
    out = subprocess.run(
        ["bash", REPO_ROOT / "bench" / "gpu_remote_engines.sh", kind, tmp_path],
        capture_output=True,
        text=True,
        timeout=880,
        env=os.environ,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    kl = re.search(r"train_mismatch_kl\s+(\S+)", out.stdout)
    assert kl, out.stdout[-3000:]
    assert float(kl.group(1)) < 0.05  # the server sampled from what the trainer trains
    assert "generation after the update" in out.stdout
