"""Chat tokenization with loss masks: the token ids a trainer sees for a message list.

Each message is rendered with the tokenizer's own chat template (ChatML ``<|im_start|>`` for
SmolLM2) by rendering growing prefixes of the conversation and tokenizing the difference, so
whatever the template adds (SmolLM2's default system prompt, role headers) comes from the
template and nowhere else. For an assistant message the difference is split into

    header   the template's generation prompt (``<|im_start|>assistant\\n``)   mask 0
    body     the message: its ``token_ids`` verbatim if present, else its text   mask 1
    end      the end-of-turn token (``<|im_end|>``)                           mask 1*
    rest     whatever follows it (``\\n``)                                     mask 0

Assistant ``token_ids`` are the engine's sampled ids and are never re-tokenized: decoding and
re-encoding text can yield different ids (``"Hel" + "lo"`` vs ``"Hello"``), and training on
ids the engine did not sample would corrupt importance weights. When the ids already end with
the end-of-turn token it is not added twice; when they do not (the reply was cut by
``max_tokens`` or a stop string) the template's end token is added with mask 0*, because the
engine never sampled it. The same function builds generation prompts, so the prompt of turn
k+1 always starts with the exact ids of turn k.

Left out: tool-role messages (the harness sends tool results as user messages), images, and
templates that rewrite earlier turns (they break the prefix property; we raise instead).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class TokenizedChat:
    """Token ids of a conversation and a 0/1 loss mask of the same length."""

    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)

    def extend(self, ids: Sequence[int], mask: int) -> None:
        self.token_ids.extend(int(i) for i in ids)
        self.loss_mask.extend([mask] * len(ids))


class ChatTemplateError(ValueError):
    """The tokenizer's chat template cannot be split into per-message token spans."""


def tokenize_chat(
    messages: Sequence[Any], tokenizer: Any, add_generation_prompt: bool = False
) -> TokenizedChat:
    """Token ids and loss mask (1 on assistant tokens) for ``messages``.

    ``messages`` are ``cheetah.harness.trajectory.Message`` objects or dicts with ``role``,
    ``content`` and optional ``token_ids``.
    """
    plain = [_as_dict(m) for m in messages]
    out = TokenizedChat()
    rendered = ""
    for i, msg in enumerate(plain):
        text = _render(tokenizer, plain[: i + 1], add_generation_prompt=False)
        if not text.startswith(rendered):
            raise ChatTemplateError(
                f"the chat template rewrites earlier messages when message {i} is added; "
                "per-message token spans are undefined"
            )
        delta = text[len(rendered) :]
        if msg["role"] == "assistant":
            header = _render(tokenizer, plain[:i], add_generation_prompt=True)[len(rendered) :]
            _add_assistant(out, tokenizer, delta, header, msg)
        else:
            out.extend(_encode(tokenizer, delta), 0)
        rendered = text
    if add_generation_prompt:
        text = _render(tokenizer, plain, add_generation_prompt=True)
        out.extend(_encode(tokenizer, text[len(rendered) :]), 0)
    return out


def prompt_token_ids(messages: Sequence[Any], tokenizer: Any) -> list[int]:
    """The ids an engine should continue to write the next assistant message."""
    return tokenize_chat(messages, tokenizer, add_generation_prompt=True).token_ids


def _add_assistant(
    out: TokenizedChat, tokenizer: Any, delta: str, header: str, msg: dict[str, Any]
) -> None:
    content = msg["content"]
    if not header or not delta.startswith(header) or not delta[len(header) :].startswith(content):
        raise ChatTemplateError(
            "the chat template does not render an assistant message as generation prompt "
            "followed by its content"
        )
    footer = delta[len(header) + len(content) :]
    out.extend(_encode(tokenizer, header), 0)
    ids = msg.get("token_ids")
    eos_text, eos_id = tokenizer.eos_token, tokenizer.eos_token_id
    if ids is None:
        out.extend(_encode(tokenizer, content), 1)
        sampled_eos = True
    else:
        out.extend(ids, 1)
        sampled_eos = bool(ids) and int(ids[-1]) == eos_id
        if sampled_eos and footer.startswith(eos_text):
            footer = footer[len(eos_text) :]
            eos_text = ""  # already in the verbatim ids
    if eos_text and footer.startswith(eos_text):
        out.extend(_encode(tokenizer, eos_text), 1 if ids is None else 0)
        footer = footer[len(eos_text) :]
    out.extend(_encode(tokenizer, footer), 0)


def _render(tokenizer: Any, messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
    if not messages and not add_generation_prompt:
        return ""
    convo = [{"role": m["role"], "content": m["content"]} for m in messages]
    try:
        return tokenizer.apply_chat_template(
            convo, tokenize=False, add_generation_prompt=add_generation_prompt
        )
    except Exception as e:  # jinja raises its own errors for conversations a template rejects
        raise ChatTemplateError(f"the chat template refused these messages: {e}") from None


def _encode(tokenizer: Any, text: str) -> list[int]:
    if not text:
        return []
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _as_dict(message: Any) -> dict[str, Any]:
    if isinstance(message, Mapping):
        data = dict(message)
    else:
        data = {
            "role": message.role,
            "content": message.content,
            "token_ids": getattr(message, "token_ids", None),
        }
    if data.get("role") != "assistant":
        data["token_ids"] = None  # only the engine's own ids are kept verbatim
    data.setdefault("token_ids", None)
    return data
