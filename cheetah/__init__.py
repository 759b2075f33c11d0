"""cheetah: fast tool-using coding agents trained with reinforcement learning."""

__version__ = "0.1.0"
