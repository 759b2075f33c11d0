"""The dashboard: runs (curves, rollout timeline, trajectories), the env fleet, background jobs."""
