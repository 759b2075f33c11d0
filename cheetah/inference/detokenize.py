"""Incremental detokenization: the text of a growing token sequence, a piece per token.

Decoding the whole output after every token costs O(n) per token, O(n^2) per request. As in
vLLM and Hugging Face TGI, ``IncrementalDetokenizer`` decodes only a window of recent ids:
``ids[prefix:]``, whose first ``read - prefix`` tokens were already returned. They are
decoded again as context, because decoders are not concatenative at their start (a
SentencePiece decoder drops the first token's leading space; the window's text minus the
context's text is the right piece). Once the window's text ends in a complete character, the
window moves up (``prefix, read = read, len(ids)``), so it spans about two tokens and the
work per token is constant.

A byte-level BPE token can end inside a UTF-8 character (an emoji is often three or four
tokens); decoding such a window ends in U+FFFD. That is text to wait for, not to return:
a piece is cut before a trailing run of U+FFFD, and ``flush`` returns whatever remains when
the sequence ends (U+FFFD included, as a full decode would give it). Text before the run is
final: UTF-8 decoding never revisits a complete character. A U+FFFD followed by other text is
an invalid byte sequence the model really produced, and is returned like any other text.

Joining the pieces and ``flush`` gives ``tokenizer.decode(ids, skip_special_tokens=True)``.
Left out: tokenizers whose decode cleans up spaces (``clean_up_tokenization_spaces=True``
rewrites " ." as "." and so depends on the text before the window; SmolLM2's does not), and
a window that stays wide while tokens add no text (skipped special tokens, or a long run of
incomplete bytes): the window moves only on complete new text, as in vLLM.
"""

from __future__ import annotations

from typing import Any

REPLACEMENT = "\ufffd"


class IncrementalDetokenizer:
    """The text of one token sequence, built as tokens arrive; one per request, one thread."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self._prefix = 0  # the window starts here; ids[prefix:read] are context
        self._read = 0
        self._sent = 0  # characters of the window's text already returned

    def push(self, token_id: int) -> str:
        """Add one token; return the text it completes (often "", never a partial character)."""
        self.ids.append(int(token_id))
        text = self._decode(self.ids[self._prefix :])
        end = len(text.rstrip(REPLACEMENT))
        piece = text[self._sent : end]
        if end == len(text) and end > self._sent:  # complete new text: move the window up
            self._prefix, self._read = self._read, len(self.ids)
            self._sent = len(self._decode(self.ids[self._prefix : self._read]))
        else:
            self._sent = max(self._sent, end)
        return piece

    def flush(self) -> str:
        """The text not returned yet, at the end of the sequence (a partial character, as
        U+FFFD). Call it once, after the last ``push``."""
        text = self._decode(self.ids[self._prefix :])
        piece, self._sent = text[self._sent :], len(text)
        return piece

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)
