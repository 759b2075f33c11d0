"""``run_episode``: one task, start to end. Eval samples, RL rollouts and SFT demonstrations
all run through it, so they open, run, grade and close a task the same way.

1. Open a session from the task's snapshot and run its setup (``open_task``). A task
   whose snapshot or setup fails is reported (``Episode.error``) and skipped by the
   caller; it never stops an eval or a training run.
2. Capture the files as the agent gets them (the grader's baseline).
3. Run the agent (``run_agent``) with the given policy and limits.
4. Grade (hidden checks, conventions) and attach the grade to the trajectory.
5. Close the session, whatever happened.

Failures of the policy, the tools' runner (``harness.loop.AgentError``, with the turns so
far) or the grader propagate: they are not the model's doing, so they are never graded or
trained on; eval counts them as errors, RL drops the group. Deliberately left out: retries (the fleet already fails sessions over).
"""

from __future__ import annotations

from dataclasses import dataclass

from cheetah.harness.loop import AgentLimits, WithoutTools, run_agent
from cheetah.harness.policy import Policy
from cheetah.harness.trajectory import Trajectory
from cheetah.tasks.grader import Grade, GraderConfig, attach, capture_baseline, grade
from cheetah.tasks.schema import Task
from cheetah.tasks.session import SETUP_TIMEOUT_S, TaskSessionOpener, TaskSetupError, open_task


@dataclass
class Episode:
    """What one task gave: the graded trajectory, or why the task could not run."""

    task: Task
    trajectory: Trajectory | None = None
    grade: Grade | None = None
    error: str | None = None  # the task's own problem (snapshot, setup): nothing ran


async def run_episode(
    task: Task,
    policy: Policy,
    sessions: TaskSessionOpener,
    *,
    limits: AgentLimits | None = None,
    grader: GraderConfig | None = None,
    setup_timeout_s: float = SETUP_TIMEOUT_S,
    without_tools: frozenset[str] = frozenset(),
) -> Episode:
    """Open, run, grade, close (see the module docstring); ``without_tools`` are taken
    away from the agent (``harness.loop.WithoutTools``)."""
    try:
        ws = await open_task(sessions, task, setup_timeout_s=setup_timeout_s)
    except TaskSetupError as e:
        return Episode(task, error=str(e))
    try:
        baseline = await capture_baseline(ws)
        runner = WithoutTools(ws.agent, without_tools) if without_tools else ws.agent
        traj = await run_agent(task.query, policy, runner, limits or AgentLimits(), task_id=task.id)
        g = await grade(task, ws, baseline, sessions, grader)
        attach(traj, g)
    finally:
        await sessions.close(ws)
    return Episode(task, traj, g)
