"""Adapters that open cheetah's tasks to trainers people already run, each an optional extra:
``trl_grpo`` (TRL's ``GRPOTrainer``). All of them drive ``tasks.gym.TaskEnv``."""
