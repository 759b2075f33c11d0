"""Trainer against the real engine on the tiny model: same logprobs, learning moves them the
right way, weight sync and checkpoints round-trip."""

import itertools

import pytest
import torch

from cheetah.harness.engine_policy import EnginePolicy
from cheetah.harness.loop import AgentLimits, run_agent
from cheetah.inference.local import LocalEngine
from cheetah.inference.protocol import SamplingParams
from cheetah.model.loading import build_tiny, default_tokenizer
from cheetah.rl.batching import micro_batches
from cheetah.rl.data import Sample, SampleError, sample_from_trajectory
from cheetah.rl.trainer import TrainConfig, Trainer

# The engine computes in fp32, so the trainer here does too: the comparisons below are to
# float rounding (``auto`` takes bf16 autocast on a CPU with AMX).


@pytest.fixture(scope="module")
def tokenizer():
    return default_tokenizer()


@pytest.fixture
def setup(tokenizer, ws):
    engine = LocalEngine.from_loaded(build_tiny(tokenizer=tokenizer), max_batch=4)
    trainer = Trainer(
        build_tiny(tokenizer=tokenizer).model, tokenizer, TrainConfig(precision="fp32", lr=1e-2)
    )
    yield engine, trainer
    engine.close()


async def rollout(engine, tokenizer, ws, seed):
    policy = EnginePolicy(
        engine, tokenizer, SamplingParams(temperature=1.0, max_tokens=12, seed=seed)
    )
    return await run_agent("Say hi.", policy, ws, AgentLimits(max_turns=2))


async def test_trainer_logprobs_match_the_engine_and_masks_line_up(setup, tokenizer, ws):
    engine, trainer = setup
    traj = await rollout(engine, tokenizer, ws, seed=1)
    sample = sample_from_trajectory(traj, tokenizer, advantage=1.0)
    engine_ids = [i for t in traj.turns for i in t.token_ids]
    masked = [i for i, m in zip(sample.input_ids, sample.loss_mask, strict=True) if m]
    assert masked == engine_ids  # the engine's own ids, not a re-tokenization
    theirs = [lp for t in traj.turns for lp in t.logprobs]
    ours = trainer.logprobs(sample)
    assert max(abs(a - b) for a, b in zip(ours, theirs, strict=True)) < 1e-3
    m = trainer.rl_step([sample])
    assert m.mismatch_max_abs < 1e-3 and m.is_weight_mean == pytest.approx(1.0, abs=1e-3)
    assert m.tokens == len(engine_ids) and m.grad_norm > 0


async def test_rl_step_moves_logprobs_by_advantage_and_sync_reaches_the_engine(
    setup, tokenizer, ws
):
    engine, trainer = setup
    good = sample_from_trajectory(await rollout(engine, tokenizer, ws, 2), tokenizer, advantage=1.0)
    bad = sample_from_trajectory(await rollout(engine, tokenizer, ws, 3), tokenizer, advantage=-1.0)
    before = [sum(trainer.logprobs(s)) for s in (good, bad)]
    for _ in range(3):
        trainer.rl_step([good, bad])
    after = [sum(trainer.logprobs(s)) for s in (good, bad)]
    assert after[0] > before[0] and after[1] < before[1]
    seconds = await trainer.sync_to([engine])
    assert engine.policy_version == 1 and seconds >= 0
    traj = await rollout(engine, tokenizer, ws, 4)
    assert traj.turns[0].policy_version == 1
    sample = sample_from_trajectory(traj, tokenizer)
    theirs = [lp for t in traj.turns for lp in t.logprobs]
    assert max(abs(a - b) for a, b in zip(trainer.logprobs(sample), theirs, strict=True)) < 1e-3


async def test_checkpoint_round_trip(setup, tokenizer, ws, tmp_path):
    engine, trainer = setup
    sample = sample_from_trajectory(
        await rollout(engine, tokenizer, ws, 5), tokenizer, advantage=1.0
    )
    trainer.rl_step([sample])
    path = trainer.save_checkpoint(tmp_path / "step-1", {"next_group": 7})
    assert (path / "model.safetensors").is_file() and not (tmp_path / "step-1.tmp").exists()
    fresh = Trainer(
        build_tiny(tokenizer=tokenizer).model, tokenizer, TrainConfig(precision="fp32", lr=1e-2)
    )
    assert fresh.load_checkpoint(path) == {"next_group": 7}
    assert fresh.step_count == 1
    for a, b in zip(
        trainer.model.state_dict().values(), fresh.model.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b)
    m1, m2 = trainer.rl_step([sample]), fresh.rl_step([sample])
    assert m1.loss == pytest.approx(m2.loss, rel=1e-5)


async def test_kl_penalty_holds_the_policy_near_its_reference(tokenizer, ws, tmp_path):
    from cheetah.rl.config import LossConfig

    engine = LocalEngine.from_loaded(build_tiny(tokenizer=tokenizer), max_batch=4)
    try:
        traj = await rollout(engine, tokenizer, ws, 6)
    finally:
        engine.close()
    # a negative advantage pushes the sampled tokens down; k3's gradient, 1 - exp(ref - lp),
    # grows without bound as they fall below the reference (and stays under 1 as they rise)
    bad = sample_from_trajectory(traj, tokenizer, advantage=-1.0)
    start = build_tiny(tokenizer=tokenizer)
    start.model.save_pretrained(tmp_path / "ref")
    start.tokenizer.save_pretrained(tmp_path / "ref")
    drift = {}
    for coef in (0.0, 0.5):
        cfg = TrainConfig(precision="fp32", lr=1e-3, loss=LossConfig(kl_coef=coef))
        trainer = Trainer(build_tiny(tokenizer=tokenizer).model, tokenizer, cfg)
        if coef:
            with pytest.raises(RuntimeError, match="set_reference"):
                trainer.rl_step([bad])
        trainer.set_reference(str(tmp_path / "ref"))  # with kl_coef 0: reported, no penalty
        metrics = [trainer.rl_step([bad]) for _ in range(5)]
        assert metrics[0].reference_kl == pytest.approx(0.0, abs=1e-6)  # same weights
        drift[coef] = metrics[-1].reference_kl
    assert 0 < drift[0.5] < drift[0.0] / 2  # the penalty holds the policy nearer its reference


async def test_sft_step_and_bad_samples(setup, tokenizer, ws):
    from cheetah.harness.policy import ScriptedPolicy

    _, trainer = setup
    traj = await run_agent("q", ScriptedPolicy(["All done."]), ws)
    with pytest.raises(SampleError, match="no engine token ids"):
        sample_from_trajectory(traj, tokenizer)
    sft = sample_from_trajectory(traj, tokenizer, need_logprobs=False)
    first = trainer.sft_step([sft]).loss
    for _ in range(5):
        last = trainer.sft_step([sft]).loss
    assert last < first
    sft.loss_mask = [0] * len(sft.loss_mask)
    with pytest.raises(ValueError, match="no trainable tokens"):
        trainer.sft_step([sft])


def test_micro_batches_respect_the_token_budget():
    from cheetah.rl.data import Sample

    samples = [Sample([1] * n, [1] * n, [0.0] * n) for n in (10, 300, 20, 150, 5)]
    groups = micro_batches(samples, 320)
    assert sorted(len(s.input_ids) for g in groups for s in g) == [5, 10, 20, 150, 300]
    assert all(len(g[0].input_ids) * len(g) <= 320 or len(g) == 1 for g in groups)


async def test_sync_to_a_remote_engine_goes_through_a_checkpoint_directory(
    setup, tokenizer, ws, tmp_path
):
    """The trainer's weights reach a server (here `cheetah serve` in a thread) that reloads a
    checkpoint directory, the path vLLM and SGLang use; its logprobs then match the trainer's."""
    from cheetah.inference.remote import RemoteEngine
    from cheetah.inference.server import create_app
    from tests.inference.conftest import TOKEN, serve_in_thread

    engine, trainer = setup
    url, stop = serve_in_thread(create_app(engine, "tiny", token=TOKEN))
    remote = RemoteEngine(f"{url}/v1", staging_dir=tmp_path / "staging", api_key=TOKEN)
    try:
        sample = sample_from_trajectory(
            await rollout(engine, tokenizer, ws, 6), tokenizer, advantage=1.0
        )
        trainer.rl_step([sample])
        seconds = await trainer.sync_to([remote])
        assert seconds > 0 and engine.policy_version == trainer.version == 1
        assert (tmp_path / "staging" / "v1").is_dir()
        traj = await run_agent(
            "Say hi.",
            EnginePolicy(remote, tokenizer, SamplingParams(temperature=1.0, max_tokens=8, seed=7)),
            ws,
            AgentLimits(max_turns=1),
        )
        theirs = [lp for t in traj.turns for lp in t.logprobs]
        ours = trainer.logprobs(sample_from_trajectory(traj, tokenizer))
        assert traj.turns[0].policy_version == 1
        assert max(abs(a - b) for a, b in zip(ours, theirs, strict=True)) < 1e-3
    finally:
        await remote.aclose()
        stop()


async def test_activation_checkpointing_gives_the_same_step(setup, tokenizer, ws):
    engine, _ = setup
    sample = sample_from_trajectory(
        await rollout(engine, tokenizer, ws, 8), tokenizer, advantage=1.0
    )
    plain = Trainer(
        build_tiny(tokenizer=tokenizer).model, tokenizer, TrainConfig(precision="fp32", lr=1e-2)
    )
    ckpt = Trainer(
        build_tiny(tokenizer=tokenizer).model,
        tokenizer,
        TrainConfig(precision="fp32", lr=1e-2, grad_checkpointing=True),
    )
    a, b = plain.rl_step([sample]), ckpt.rl_step([sample])
    assert a.loss == pytest.approx(b.loss, rel=1e-5)
    assert a.grad_norm == pytest.approx(b.grad_norm, rel=1e-4)
    assert plain.logprobs(sample) == pytest.approx(ckpt.logprobs(sample), abs=1e-5)


async def test_mxfp8_moe_policy_trains_and_syncs_with_matching_logprobs(tokenizer, ws):
    """The upcycled MoE in MXFP8 on both sides: engine and trainer compute the same numbers."""
    from cheetah.model.moe import upcycle
    from cheetah.model.mxfp8 import convert_to_mxfp8

    def policy():
        model = upcycle(build_tiny(tokenizer=tokenizer).model, num_experts=4, top_k=2)
        convert_to_mxfp8(model)
        return model

    engine = LocalEngine(policy(), tokenizer, max_batch=4)
    trainer = Trainer(policy(), tokenizer, TrainConfig(precision="fp32", lr=1e-2))
    try:
        traj = await rollout(engine, tokenizer, ws, seed=5)
        sample = sample_from_trajectory(traj, tokenizer, advantage=1.0)
        m = trainer.rl_step([sample])
        assert m.mismatch_max_abs < 1e-3 and m.grad_norm > 0
        await trainer.sync_to([engine])
        traj = await rollout(engine, tokenizer, ws, seed=6)
        assert traj.turns[0].policy_version == 1
        sample = sample_from_trajectory(traj, tokenizer)
        theirs = [lp for t in traj.turns for lp in t.logprobs]
        ours = trainer.logprobs(sample)
        assert max(abs(a - b) for a, b in zip(ours, theirs, strict=True)) < 1e-3
    finally:
        engine.close()


async def test_logprobs_are_recomputed_under_the_sampling_temperature(tokenizer, ws):
    """Sampled at T=0.8, the trainer (told T) agrees with the engine within 1e-3; at T=1 it
    would not, which is the bias the importance weights used to carry."""
    engine = LocalEngine.from_loaded(build_tiny(tokenizer=tokenizer), max_batch=4)
    try:
        policy = EnginePolicy(
            engine, tokenizer, SamplingParams(temperature=0.8, max_tokens=16, seed=3)
        )
        traj = await run_agent("Say hi.", policy, ws, AgentLimits(max_turns=2))
    finally:
        engine.close()
    sample = sample_from_trajectory(traj, tokenizer, advantage=1.0)
    theirs = [lp for t in traj.turns for lp in t.logprobs]
    trainer = Trainer(
        build_tiny(tokenizer=tokenizer).model,
        tokenizer,
        TrainConfig(precision="fp32"),
        temperature=0.8,
    )
    ours = trainer.logprobs(sample)
    assert max(abs(a - b) for a, b in zip(ours, theirs, strict=True)) < 1e-3
    at_one = trainer.logprobs(sample, temperature=1.0)
    assert max(abs(a - b) for a, b in zip(at_one, theirs, strict=True)) > 1e-2
    m = trainer.rl_step([sample])
    assert m.mismatch_max_abs < 1e-3 and m.is_weight_mean == pytest.approx(1.0, abs=1e-3)


def test_lr_schedule_warms_up_then_decays():
    from cheetah.rl.lr_schedule import lr_at

    lrs = [lr_at(i, 10, 1.0, 0.2, "cosine") for i in range(10)]
    assert lrs[0] == pytest.approx(1 / 3) and lrs[1] == pytest.approx(2 / 3)
    assert lrs[2] == pytest.approx(1.0) and lrs[-1] == pytest.approx(0.1)
    assert all(a >= b for a, b in itertools.pairwise(lrs[2:]))
    assert [lr_at(i, 4, 2.0, 0.0, "constant") for i in range(4)] == [2.0] * 4


def test_sft_and_rl_follow_their_own_lr_schedules():
    """``train.sft_lr_decay`` shapes the SFT warm start alone, ``lr_decay`` RL alone (what
    ``TrainJob`` sets before each step)."""
    from cheetah.rl.config import TrainSection

    t = TrainSection(
        steps=3,
        lr=2.0,
        lr_decay="constant",
        sft_steps=5,
        sft_lr=1.0,
        sft_lr_decay="cosine",
        warmup_frac=0,
    )
    assert [t.rl_lr_of(i) for i in range(3)] == [2.0] * 3
    sft = [t.sft_lr_of(i) for i in range(5)]
    assert sft[0] == 1.0 and sft[-1] == pytest.approx(0.1) and sft == sorted(sft, reverse=True)
    swapped = t.model_copy(update={"lr_decay": "cosine", "sft_lr_decay": "constant"})
    assert [swapped.sft_lr_of(i) for i in range(5)] == [1.0] * 5
    assert swapped.rl_lr_of(2) == pytest.approx(0.2)


# -- shared-prefix forward/backward ------------------------------------------------------


def prefixed(prefix: list[int], suffixes: list[list[int]], trained_from: list[int], seed=0):
    """Samples ``prefix + suffix`` with the loss mask on from index ``trained_from[i]``."""
    from cheetah.rl.data import Sample

    gen = torch.Generator().manual_seed(seed)
    out = []
    for suffix, start in zip(suffixes, trained_from, strict=True):
        ids = prefix + suffix
        mask = [int(i >= start) for i in range(len(ids))]
        behaviour = [-float(torch.rand((), generator=gen)) * 3 if m else 0.0 for m in mask]
        adv = float(torch.randn((), generator=gen))
        out.append(Sample(ids, mask, behaviour, advantage=adv))
    return out


def random_ids(n: int, seed: int) -> list[int]:
    return torch.randint(10, 40_000, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def tiny_trainer(tokenizer, **cfg) -> Trainer:
    return Trainer(
        build_tiny(tokenizer=tokenizer).model,
        tokenizer,
        TrainConfig(**{"precision": "fp32", **cfg}),
    )


@pytest.mark.parametrize(
    ("prefix_len", "suffix_lens", "trained_at", "shared"),
    [
        (1, [3, 9, 5], [2, 2, 3], 1),  # the shortest prefix
        (40, [12, 4, 25], [43, 41, 50], 40),
        (120, [7, 30], [120, 125], 119),  # trained from the suffix's first token
        (60, [10, 10, 10], [70, 12, 65], 11),  # trained inside the common prefix: shortened
    ],
)
def test_shared_prefix_logprobs_equal_the_plain_path(
    tokenizer, prefix_len, suffix_lens, trained_at, shared
):
    from cheetah.rl.batching import pad_batch, shared_prefix_len

    trainer = tiny_trainer(tokenizer)
    suffixes = [random_ids(n, seed=i) for i, n in enumerate(suffix_lens)]
    samples = prefixed(random_ids(prefix_len, seed=99), suffixes, trained_at)
    assert shared_prefix_len(samples) == shared
    for temperature in (1.0, 0.7):
        with torch.no_grad():
            f = trainer._forward(pad_batch(samples, trainer.pad_id), temperature, shared)
        plain = [lp for s in samples for lp in trainer.logprobs(s, temperature)]
        # fp32 rounding only: the tiny random model's logprobs reach -30, so 1e-6 relative
        assert f["lp"][0].tolist() == pytest.approx(plain, rel=1e-6, abs=1e-5)


@pytest.mark.parametrize("grad_checkpointing", [False, True])
@pytest.mark.parametrize("objective", ["sft", "rl"])
def test_shared_prefix_step_has_the_plain_gradients(
    tokenizer, monkeypatch, objective, grad_checkpointing
):
    """The gradients handed to the optimizer (clipping off) match the plain path's, with
    activation checkpointing too (the shipped config), so the prefix pass is exact."""
    from cheetah.rl import batching as batching_module
    from cheetah.rl.batching import shared_prefix_len

    prefixes: list[int] = []
    run_shared = batching_module._forward_shared_prefix

    def spy(decoder, ids, attention, prefix):
        prefixes.append(prefix)
        return run_shared(decoder, ids, attention, prefix)

    monkeypatch.setattr(batching_module, "_forward_shared_prefix", spy)

    prefix = random_ids(80, seed=7)
    suffixes = [random_ids(n, seed=10 + n) for n in (20, 6, 33, 15)]
    samples = prefixed(prefix, suffixes, [85, 81, 100, 83])
    samples.append(prefixed(random_ids(50, seed=8), [random_ids(9, 1)], [52])[0])  # no prefix

    def step_grads(share: bool, ckpt: bool) -> dict[str, torch.Tensor]:
        trainer = tiny_trainer(
            tokenizer,
            grad_clip=1e9,
            micro_batch_tokens=400,
            share_prefix=share,
            grad_checkpointing=ckpt,
        )
        seen: dict[str, torch.Tensor] = {}

        def capture():
            seen.update({n: p.grad.clone() for n, p in trainer.model.named_parameters()})

        trainer.opt.step = capture
        (trainer.rl_step if objective == "rl" else trainer.sft_step)(samples)
        return seen

    groups = micro_batches(samples, 400, share_prefix=True)
    assert [len(g) for g in groups] == [4, 1] and shared_prefix_len(groups[0]) == 80
    plain = step_grads(False, False)
    assert prefixes == []
    shared = step_grads(True, grad_checkpointing)
    assert prefixes == [80]
    scale = max(float(g.abs().max()) for g in plain.values())
    assert scale > 0
    for name, g in plain.items():
        assert float((shared[name] - g).abs().max()) <= 1e-5 * scale, name


def test_micro_batches_pay_a_shared_prefix_once():
    from cheetah.rl.batching import shared_prefix_len
    from cheetah.rl.data import Sample

    system = [7] * 1200

    def sample(i: int) -> Sample:
        ids = system + [i] * 200
        return Sample(ids, [0] * 1340 + [1] * 60, [0.0] * 1400)

    samples = [sample(i) for i in range(8)]
    assert [len(g) for g in micro_batches(samples, 4096)] == [2, 2, 2, 2]
    shared = micro_batches(samples, 4096, share_prefix=True)
    assert [len(g) for g in shared] == [8] and shared_prefix_len(shared[0]) == 1200
    assert [len(g) for g in micro_batches(samples, 2048, share_prefix=True)] == [4, 4]
    # nothing in common (different first tokens): the plain budget
    other = [
        Sample([i, *s.input_ids[1:]], s.loss_mask, s.behaviour_logprobs)
        for i, s in enumerate(samples)
    ]
    assert [len(g) for g in micro_batches(other, 4096, share_prefix=True)] == [2, 2, 2, 2]
    assert shared_prefix_len(other[:2]) == 0


async def test_several_updates_per_batch_make_the_clip_act(tokenizer, ws):
    """With one update per batch the ratio is 1 and nothing is clipped; later updates on the
    same batch take their ratio against the first one's logprobs, and at a high learning
    rate the clip holds some tokens (train.loss.clip_low/clip_high act)."""
    engine = LocalEngine.from_loaded(build_tiny(tokenizer=tokenizer), max_batch=4)
    try:
        samples = [
            sample_from_trajectory(
                await rollout(engine, tokenizer, ws, seed), tokenizer, advantage=adv
            )
            for seed, adv in ((5, 1.0), (6, -1.0))
        ]
    finally:
        engine.close()
    # First in its own micro-batch (the longest runs first), a sample with nothing to train:
    # the micro-batches after it still find their own first-update logprobs.
    n = len(samples[0].input_ids) + 8
    idle = Sample(samples[0].input_ids + [0] * 8, [0] * n, [0.0] * n)
    samples = [idle, *samples]
    clips = {}
    for updates in (1, 4):
        cfg = TrainConfig(
            precision="fp32", lr=5e-2, updates_per_batch=updates, micro_batch_tokens=1
        )
        trainer = Trainer(build_tiny(tokenizer=tokenizer).model, tokenizer, cfg)
        clips[updates] = trainer.rl_step(samples).clip_fraction
        assert trainer.step_count == 1  # one RL step, however many updates it takes
    assert clips[1] == 0.0 and clips[4] > 0.0, clips
