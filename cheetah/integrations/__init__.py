"""Adapters that open cheetah's tasks to trainers people already run, each an optional extra:
``trl_grpo`` (TRL's ``GRPOTrainer``), ``verifiers_env`` (verifiers, prime-rl's environment
library) and ``openenv_server`` (an OpenEnv environment server). All of them drive
``tasks.gym.TaskEnv``."""
