"""The search models' training settings as typed configs, apart from the training code so
that the CLI builds its flags from them (``cli/flags.py``) without importing numpy or torch.

``EmbedderTrainConfig`` is ``search/train.py``'s (contrastive fine-tuning of the embedder),
``RerankerTrainConfig`` is ``search/rerank.py``'s (the cross-encoder's listwise training).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class EmbedderTrainConfig(BaseModel):
    """The embedder's fine-tuning settings; ``cheetah search train``'s flags are these fields
    (``cli/flags.py``)."""

    model_config = ConfigDict(extra="forbid")

    epochs: int = Field(1, ge=1, description="passes over the pairs")
    batch_size: int = Field(
        32, ge=2, description="pairs per step (each query's negatives are the others)"
    )
    lr: float = Field(3e-5, gt=0.0, description="AdamW learning rate")
    temperature: float = Field(0.05, gt=0.0, description="InfoNCE softmax temperature")
    max_steps: int = Field(0, ge=0, description="stop after N steps (0: all)")
    seed: int = Field(0, ge=0, description="pair order and initialization seed")
    hard_negatives: bool = Field(
        True,
        description="each pair also brings another function of its own file as a negative "
        "(off: in-batch negatives only)",
    )
    lora_rank: int = Field(
        0,
        ge=0,
        description="train a LoRA adapter of this rank (a small directory; loads on the stock "
        "model) instead of all weights (0)",
    )
    max_tokens: int = Field(
        128, ge=8, description="tokens per text while training (search embeds up to its own)"
    )


class RerankerTrainConfig(BaseModel):
    """The re-ranker's training settings; ``cheetah search train-reranker``'s flags are these
    fields (``cli/flags.py``)."""

    model_config = ConfigDict(extra="forbid")

    steps: int = Field(900, ge=1, description="optimizer steps")
    groups: int = Field(4, ge=1, description="queries per step")
    negatives: int = Field(7, ge=1, description="wrong codes per query")
    lr: float = Field(
        5e-4,
        gt=0.0,
        description="AdamW learning rate (adapter and head)",
    )
    lora_rank: int = Field(16, ge=1, description="rank of the LoRA adapter")
    max_tokens: int = Field(
        160, ge=8, description="query + code, while training (scoring reads up to MAX_TOKENS)"
    )
    seed: int = Field(0, ge=0, description="mining and order seed")
