"""Every number in the training config has a bound, and a value past it is refused when the
config loads, with an error that names the key (not minutes later inside the job).

The fields are walked from the models themselves, so a new numeric setting without a
bound fails ``test_every_number_is_bounded``.
"""

from __future__ import annotations

import annotated_types
import pytest
from pydantic import BaseModel

from cheetah.config import ConfigError
from cheetah.rl.config import TrainRunConfig, load_config


def _numeric(annotation) -> bool:
    return annotation in (int, float, int | None, float | None)


def _fields(model: type[BaseModel], prefix: str = ""):
    """(dotted key, field info) for every leaf setting of ``model``."""
    for name, info in model.model_fields.items():
        key = f"{prefix}{name}"
        ann = info.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            yield from _fields(ann, f"{key}.")
        else:
            yield key, info


def _bounds(info):
    out = []
    for m in info.metadata:
        for attr in ("ge", "gt", "le", "lt"):
            if isinstance(m, getattr(annotated_types, attr.capitalize())):
                out.append((attr, getattr(m, attr)))
    return out


NUMERIC = [(k, i) for k, i in _fields(TrainRunConfig) if _numeric(i.annotation)]
BOUNDS = [(k, op, v, i.annotation) for k, i in NUMERIC for op, v in _bounds(i)]


def test_every_number_is_bounded():
    unbounded = [k for k, i in NUMERIC if not _bounds(i)]
    assert NUMERIC and not unbounded, f"numeric settings without a bound: {unbounded}"


def _past(op: str, bound, annotation):
    step = 1 if annotation in (int, int | None) else 1e-3
    return {"ge": bound - step, "gt": bound, "le": bound + step, "lt": bound}[op]


@pytest.mark.parametrize(
    "key,op,bound,annotation", BOUNDS, ids=[f"{k}-{op}" for k, op, _, _ in BOUNDS]
)
def test_a_value_past_the_bound_names_its_key(key, op, bound, annotation):
    value = _past(op, bound, annotation)
    with pytest.raises(ConfigError) as err:
        load_config(None, [f"{key}={value}"])
    assert key in str(err.value)
    load_config(None, [f"{key}={_inside(op, bound, annotation)}"])  # the bound itself is fine


def _inside(op: str, bound, annotation):
    if op in ("ge", "le"):
        return bound
    step = 1 if annotation in (int, int | None) else 1e-3
    return bound + step if op == "gt" else bound - step


@pytest.mark.parametrize(
    "override,key",
    [
        ("run.name=../elsewhere", "run.name"),
        ("tasks.eval_split=test", "tasks.eval_split"),
        ("train.betas=[0.9, 1.0]", "train.betas"),
        ("rollout.sandbox=none", "rollout.sandbox"),
    ],
)
def test_other_bad_values_name_their_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(None, [override])


def test_agent_limits_are_rollout_keys():
    cfg = load_config(None, ["rollout.max_turns=4", "rollout.max_wall_s=30"])
    limits = cfg.rollout.limits()
    assert (limits.max_turns, limits.max_wall_s) == (4, 30.0)


def test_pass_at_k_samples_belong_to_held_out_sets_only():
    cfg = load_config("agent", ["tasks.also_eval=[{file='curriculum', samples=8}]"])
    assert cfg.tasks.also_eval[0].samples == 8
    with pytest.raises(ConfigError, match=r"tasks\.also_eval\.0\.samples"):
        load_config("agent", ["tasks.also_eval=[{file='curriculum', samples=65}]"])
    with pytest.raises(ConfigError, match=r"tasks\.sft_also\.0\.samples"):  # SFT samples nothing
        load_config("agent", ["tasks.sft_also=[{file='curriculum', limit=3, samples=8}]"])
