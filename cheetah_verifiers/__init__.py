"""The verifiers environment ``cheetah-verifiers``: verifiers imports a taskset id as a
top-level module and takes the plugin classes its ``__all__`` exports. The adapter itself
is ``cheetah.integrations.verifiers_env`` (the ``verifiers`` extra)."""

from cheetah.integrations.verifiers_env import CheetahChat, CheetahEnv, CheetahTaskset

__all__ = ["CheetahChat", "CheetahEnv", "CheetahTaskset"]
