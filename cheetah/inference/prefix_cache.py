"""``PrefixCache``: the KV of prompt prefixes, kept so a later prompt that starts with the same
tokens prefills only the rest.

Every prompt of an agent starts with the same chat template and ~1,100-token system prompt;
the members of an RL group share the user query too; turn N+1 extends turn N's prompt and
reply. ``LocalEngine`` looks each prompt up here before prefill and stores what it computed.

Layout: block-granular hash chains, as in vLLM's automatic prefix caching. A prompt is cut
into blocks of ``BLOCK`` tokens; a block is stored under the key (its parent block, its
tokens), so a key names the whole prefix up to and including that block, and a lookup walks
the dict from the first block until a key is missing. The key holds the parent *object* and
the token tuple, so dict equality compares real tokens: no hash collision can hand back the
wrong KV (vLLM hashes to a digest and trusts it). Why not a radix tree: it reuses up to the
exact token, but must split nodes and their KV tensors on partial matches; fixed blocks make
the memory bound plain arithmetic and eviction a dict pop. The price is that up to
``BLOCK - 1`` tokens of a match are prefilled again, which is why blocks are small (16).

A block holds one tensor ``[layers, 2 (keys, values), kv_heads, BLOCK, head_dim]`` for batch
1 without padding. Keys carry RoPE for their absolute positions; that is fine, because a
block is only ever found after the same chain of parents, i.e. at the same positions.

Memory: at most ``capacity_tokens`` tokens (whole blocks), least recently used first out. A
lookup or insert touches its chain from the last block back to the first, so a parent is
always more recent than each of its children and eviction removes leaves first (an evicted
parent never strands children that would still take memory). ``clear`` drops everything;
the engine calls it when the weights change.

Left out: sharing memory with the running batch (blocks are copied in and out of it), partial
blocks, sliding-window layers (the engine disables the cache for such models), persistence.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

BLOCK = 16


@dataclass(eq=False)  # hashed by identity: a block object names its whole prefix
class _Block:
    parent: _Block | None
    tokens: tuple[int, ...]
    kv: torch.Tensor  # [layers, 2, kv_heads, BLOCK, head_dim]


@dataclass
class PrefixHit:
    """The stored blocks that start a prompt (possibly none)."""

    blocks: list[_Block]

    @property
    def length(self) -> int:
        return len(self.blocks) * BLOCK

    @property
    def last(self) -> _Block | None:
        return self.blocks[-1] if self.blocks else None

    def kv(self) -> list[torch.Tensor]:
        """KV of the matched tokens in block pieces, ``[layers, 2, kv_heads, BLOCK, head_dim]``."""
        return [b.kv for b in self.blocks]


class PrefixCache:
    def __init__(self, capacity_tokens: int) -> None:
        self.capacity_tokens = max(0, capacity_tokens)
        self.evicted_tokens = 0
        self._blocks: OrderedDict[tuple[_Block | None, tuple[int, ...]], _Block] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self.capacity_tokens >= BLOCK

    @property
    def tokens(self) -> int:
        """Tokens whose KV is stored now."""
        return len(self._blocks) * BLOCK

    def match(self, tokens: Sequence[int], limit: int) -> PrefixHit:
        """The longest stored chain of blocks that starts ``tokens``, within its first ``limit``."""
        chain = self._walk(tokens, limit // BLOCK)
        self._touch(chain)
        return PrefixHit(chain)

    def insert(self, tokens: Sequence[int], read_kv: Callable[[int, int], torch.Tensor]) -> None:
        """Store the whole blocks of ``tokens`` not stored yet.

        ``read_kv(start, end)`` returns the KV of ``tokens[start:end]`` as one
        ``[layers, 2, kv_heads, end - start, head_dim]`` tensor; it is called at most once,
        for the blocks missing, so a prompt whose prefix is stored copies only its tail.
        """
        n = min(len(tokens), self.capacity_tokens) // BLOCK
        chain = self._walk(tokens, n)
        if len(chain) < n:
            start = len(chain) * BLOCK
            kv = read_kv(start, n * BLOCK)
            parent = chain[-1] if chain else None
            for i in range(len(chain), n):
                piece = tuple(tokens[i * BLOCK : (i + 1) * BLOCK])
                at = i * BLOCK - start
                block_kv = kv[..., at : at + BLOCK, :].clone(memory_format=torch.contiguous_format)
                parent = _Block(parent, piece, block_kv)
                self._blocks[(parent.parent, piece)] = parent
                chain.append(parent)
        self._touch(chain)
        while self.tokens > self.capacity_tokens:
            self._blocks.popitem(last=False)
            self.evicted_tokens += BLOCK

    def clear(self) -> None:
        self._blocks.clear()

    def _walk(self, tokens: Sequence[int], max_blocks: int) -> list[_Block]:
        chain: list[_Block] = []
        parent: _Block | None = None
        for i in range(max_blocks):
            block = self._blocks.get((parent, tuple(tokens[i * BLOCK : (i + 1) * BLOCK])))
            if block is None:
                break
            chain.append(block)
            parent = block
        return chain

    def _touch(self, chain: list[_Block]) -> None:
        for block in reversed(chain):  # the first block ends up most recent: leaves go first
            self._blocks.move_to_end((block.parent, block.tokens))
