"""Generation: the ``Engine`` protocol, ``LocalEngine`` (continuous batching in process), the
OpenAI-compatible server and ``cheetah serve``, and ``RemoteEngine`` for vLLM/SGLang/cheetah."""
