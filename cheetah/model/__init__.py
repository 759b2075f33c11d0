"""Checkpoints and tokenization: ``loading`` (default, tiny, HF dirs, safetensors, GGUF) and
``chat`` (chat-template token ids with loss masks, engine ids kept verbatim)."""
