"""``TrainerGroup``: two Ray actor ranks (gloo on CPU) step like one ``Trainer``, gather their
weights for engines, and checkpoint sharded: killed after a checkpoint, a new group resumes
and takes the next step exactly as the first group did; the weights of the checkpoint load
with plain transformers."""

import asyncio

import pytest
import ray
import torch

from cheetah.model.loading import build_tiny
from cheetah.rl.trainer import Trainer
from cheetah.rl.trainer_group import TrainerGroup
from tests.conftest import local_ray
from tests.rl.test_sharding import CFG, batch

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
    reason="torch.distributed with gloo is not available",
)


@pytest.fixture(scope="module")
def cluster():
    with local_ray(num_cpus=2):
        yield


class Sink:
    """An in-process engine: keeps what it was sent."""

    def __init__(self):
        self.state, self.version = None, None

    async def load_weights(self, state, version):
        self.state, self.version = state, version

    def get(self):
        return self.state, self.version


ActorSink = ray.remote(Sink)  # an engine actor: gets rank 0's object without the driver


def close_to(a: dict, b: dict, before: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:  # as in test_sharding: all but a few elements of each update agree
        differ = ((b[k] - before[k]) - (a[k] - before[k])).abs() > 1e-3 * CFG.lr
        assert differ.float().mean() <= 0.01, k


def test_two_rank_group_steps_syncs_and_resumes_after_a_kill(cluster, tmp_path):
    before = {k: v.clone() for k, v in build_tiny().model.state_dict().items()}
    ref = build_tiny()
    single = Trainer(ref.model, ref.tokenizer, CFG)
    first = single.rl_step(batch())

    group = TrainerGroup(2, "tiny", CFG)
    try:
        met = group.rl_step(batch())
        assert met.samples == 5 and met.tokens == first.tokens
        assert met.loss == pytest.approx(first.loss, rel=1e-5)
        assert met.grad_norm == pytest.approx(first.grad_norm, rel=1e-4)
        from cheetah.inference.ray_engine import RayEngine

        sink, actor = Sink(), ActorSink.remote()
        asyncio.run(group.sync_to([sink, RayEngine(actor)]))
        assert sink.version == 1
        close_to(single.engine_state(), sink.state, before)
        state, version = ray.get(actor.get.remote())
        assert version == 1 and all(torch.equal(state[k], v) for k, v in sink.state.items())

        group.save_checkpoint(tmp_path / "ck", {"step": 1})
        after_ckpt = sink.state
        second = group.sft_step(batch()[::-1])
        asyncio.run(group.sync_to([sink]))
        expected = sink.state
    finally:
        group.close()  # killed: nothing of the first group survives but the checkpoint

    assert {p.name for p in (tmp_path / "ck").iterdir()} >= {
        "config.json", "cursor.json", "model.safetensors", "optimizer", "rng-0.pt",
        "rng-1.pt", "trainer_state.pt",
    }  # fmt: skip
    from transformers import AutoModelForCausalLM

    plain = AutoModelForCausalLM.from_pretrained(tmp_path / "ck")  # no cheetah involved
    for k, v in plain.state_dict().items():
        assert torch.equal(v, after_ckpt[k]), k

    again = TrainerGroup(2, "tiny", CFG)
    try:
        assert again.load_checkpoint(tmp_path / "ck") == {"step": 1}
        assert (again.step_count, again.version) == (1, 1)
        resumed = again.sft_step(batch()[::-1])
        sink = Sink()
        asyncio.run(again.sync_to([sink]))
    finally:
        again.close()
    assert resumed.loss == pytest.approx(second.loss, rel=1e-6)
    for k, v in expected.items():  # the optimizer state came back: the same update
        assert torch.allclose(sink.state[k], v, rtol=0, atol=1e-6), k

    alone = build_tiny()
    with pytest.raises(ValueError, match="saved by 2 rank"):
        Trainer(alone.model, alone.tokenizer, CFG).load_checkpoint(tmp_path / "ck")


def test_a_group_needs_two_ranks():
    with pytest.raises(ValueError, match="2 ranks or more"):
        TrainerGroup(1, "tiny", CFG)
