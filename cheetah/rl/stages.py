"""Held-out evaluation stages of a training run (base model, after SFT, after RL) and the
summary that compares them: ``run_stage`` runs one on the rollout workers, the rest are
pure functions over graded trajectories.

Every stage evaluates the same held-out tasks, greedily, one sample each, so stages can
be compared task by task: a stage records its pass rate with a Wilson 95% interval, its
rate per curriculum tier, tool-use behaviour (``tasks.metrics.behaviour``: calls per
turn, turns per task, reads and searches before the first edit, ...), which tasks it
solved and each task's turns and calls per turn; the summary compares consecutive stages
and the last with the first, on the same tasks: pass rate by the exact McNemar test
(``mcnemar_p``; the summary's own ``mcnemar_p`` is the last stage against the first, the
figure a run is judged by), turns per task and calls per turn by the exact Wilcoxon
signed-rank test (``turns_p``, ``calls_p``, with the mean change).

A held-out set with ``samples = k`` (``[[tasks.also_eval]]``) is also run k times at the
rollout temperature in every stage: the stage's ``pass_at_k`` (the ceiling RL moves pass@1
toward; where it is 0 after SFT, RL has nothing to learn from on those tasks).
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Callable
from typing import Any

from cheetah.harness.trajectory import Trajectory
from cheetah.progress import Pace
from cheetah.rl.reward import call_success_rate
from cheetah.rl.scheduler import Finished, RolloutSpec
from cheetah.tasks.metrics import behaviour, pass_at_k, trajectory_metrics
from cheetah.tasks.patch import patch_paths
from cheetah.tasks.schema import Task
from cheetah.tasks.stats import compare, wilcoxon_signed_rank, wilson_interval


def target_files(task: Task) -> set[str] | None:
    """The files the task's reference patch changes (None without one)."""
    if not task.reference_patch:
        return None
    return patch_paths(task.reference_patch) or None


def stage_record(name: str, graded: list[tuple[Task, Trajectory | None]]) -> dict[str, Any]:
    """One stage: ``graded`` pairs each held-out task with its trajectory (None when the task
    could not run: it counts as unsolved and is listed under ``errors``)."""
    solved = {t.id: tr is not None and tr.solved for t, tr in graded}
    n, k = len(solved), sum(solved.values())
    lo, hi = wilson_interval(k, n)
    tiers: dict[str, list[bool]] = {}
    repos: dict[str, list[bool]] = {}
    for task, _ in graded:
        tiers.setdefault(task.tier, []).append(solved[task.id])
        repos.setdefault(task.snapshot.repo, []).append(solved[task.id])
    ran = [(task, tr) for task, tr in graded if tr is not None]
    return {
        "name": name,
        "tasks": n,
        "solved": k,
        "pass_rate": k / n if n else 0.0,
        "ci95": [lo, hi],
        "per_tier": {
            tier: {"tasks": len(v), "solved": sum(v), "pass_rate": sum(v) / len(v)}
            for tier, v in sorted(tiers.items())
        },
        "per_repo": {
            repo: {"tasks": len(v), "solved": sum(v)} for repo, v in sorted(repos.items())
        },
        "behaviour": behaviour([tr for _, tr in ran], [target_files(task) for task, _ in ran]),
        "errors": sorted(task.id for task, tr in graded if tr is None),
        "solved_tasks": solved,
        "per_task": {task.id: _shape(tr) for task, tr in ran},
    }


def _shape(traj: Trajectory) -> dict[str, float]:
    m = trajectory_metrics(traj)
    return {"turns": float(m["turns"] or 0), "calls_per_turn": float(m["calls_per_turn"] or 0)}


def _paired(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Turns per task and calls per turn of stage ``b`` against ``a``, on the tasks both ran."""
    pa, pb = a.get("per_task", {}), b.get("per_task", {})
    shared = sorted(set(pa) & set(pb))
    out: dict[str, Any] = {"paired_tasks": len(shared)}
    for key, name in (("turns", "turns"), ("calls_per_turn", "calls")):
        before = [pa[t][key] for t in shared]
        after = [pb[t][key] for t in shared]
        out[f"{name}_change"] = (
            statistics.fmean(after) - statistics.fmean(before) if shared else None
        )
        out[f"{name}_p"] = wilcoxon_signed_rank(before, after)
    return out


def summarize(stages: list[dict[str, Any]]) -> dict[str, Any]:
    """The stages and their paired comparisons; ``mcnemar_p`` is the last stage vs the first."""
    pairs = [(stages[i - 1], stages[i]) for i in range(1, len(stages))]
    if len(stages) > 2:
        pairs.append((stages[0], stages[-1]))
    comparisons = [
        {"before": a["name"], "after": b["name"],
         **compare(a["solved_tasks"], b["solved_tasks"]).as_dict(), **_paired(a, b)}
        for a, b in pairs
    ]  # fmt: skip
    final = comparisons[-1]["mcnemar_p"] if comparisons else None
    return {"stages": stages, "comparisons": comparisons, "mcnemar_p": final}


def curve_metrics(stage: dict[str, Any]) -> dict[str, float]:
    """A held-out stage as points of the learning curve in the run store's metrics."""
    b = stage["behaviour"]
    out = {"heldout_pass_rate": float(stage["pass_rate"])}
    if stage.get("pass_at_k"):
        out["heldout_pass_at_k"] = float(stage["pass_at_k"]["pass_at_k"])
    for key in ("turns_per_task", "calls_per_turn", "explore_before_edit"):
        if b.get(key) is not None:
            out[f"heldout_{key}"] = float(b[key])
    return out


def learning_curve(
    stages: list[dict[str, Any]], during: dict[int, dict[str, Any]], steps: int, per_step: int
) -> list[dict[str, Any]]:
    """Pass rate and turns per task against RL steps and rollouts trained on: the warm
    start (the ``sft`` stage, else ``base``) at 0, the stages ``during`` RL, ``rl`` at the end."""
    named = {s["name"]: s for s in stages}
    points = []
    start = named.get("sft") or named.get("base")
    if start is not None:
        points.append((0, start))
    points += sorted(during.items())
    if "rl" in named:
        points.append((steps, named["rl"]))
    return [
        {
            "step": step,
            "rollouts": step * per_step,
            "pass_rate": s["pass_rate"],
            "turns_per_task": s["behaviour"].get("turns_per_task"),
            "calls_per_turn": s["behaviour"].get("calls_per_turn"),
        }
        for step, s in points
    ]


def table(summary: dict[str, Any]) -> str:
    """The summary as the text table ``make demo`` prints."""

    def pct(x: float | None) -> str:
        return "  -  " if x is None else f"{100 * x:5.1f}"

    def num(x: float | None) -> str:
        return "   -" if x is None else f"{x:4.2f}"

    lines = [
        "stage   tasks  solved  pass%   95% CI        parse%  match%  right-file%  "
        "calls/turn  turns/task  explore  false-claim%",
    ]
    for s in summary["stages"]:
        b = s["behaviour"]
        lo, hi = s["ci95"]
        lines.append(
            f"{s['name']:<7} {s['tasks']:>5}  {s['solved']:>6}  {pct(s['pass_rate'])}  "
            f"[{pct(lo)}, {pct(hi)}]  {pct(b.get('parse_rate'))}   {pct(b.get('old_str_match_rate'))}"
            f"   {pct(b.get('right_file_edit_rate'))}        {num(b.get('calls_per_turn'))}"
            f"        {num(b.get('turns_per_task'))}     {num(b.get('explore_before_edit'))}"
            f"     {pct(b.get('false_claims'))}"
        )  # fmt: skip
    sampled = [(s["name"], s["pass_at_k"]) for s in summary["stages"] if s.get("pass_at_k")]
    if sampled:
        lines.append(
            f"pass@{sampled[0][1]['k']} at the rollout temperature: "
            + ", ".join(
                f"{n} {p['pass_at_k']:.2f} (pass@1 {p['pass_at_1']:.2f})" for n, p in sampled
            )
            + f" on {sampled[0][1]['tasks']} tasks"
        )
    lines += _breakdown(summary["stages"])
    for c in summary["comparisons"]:
        line = (
            f"{c['after']} vs {c['before']}: solved only after {c['only_after']}, only before "
            f"{c['only_before']}, exact McNemar p = {c['mcnemar_p']:.2g}"
        )
        if c.get("turns_change") is not None:
            line += (
                f"; turns/task {c['turns_change']:+.2f} (Wilcoxon p = {c['turns_p']:.2g}), "
                f"calls/turn {c['calls_change']:+.2f} (p = {c['calls_p']:.2g})"
            )
        lines.append(line)
    return "\n".join(lines)


def _breakdown(stages: list[dict[str, Any]]) -> list[str]:
    """Solved per tier and per repo, one column a stage: where the learned skill carries
    over (a repo never trained on) and where it does not. Empty for a single tier and repo."""
    rows: list[tuple[str, list[str]]] = []
    for key, label in (("per_tier", "tier"), ("per_repo", "repo")):
        names = sorted({n for s in stages for n in s.get(key, {})})
        if len(names) < 2:
            continue
        for name in names:
            cells = []
            for s in stages:
                got = s.get(key, {}).get(name)
                if got is None:
                    cells.append("-")
                else:
                    k = got.get("solved")
                    if k is None:  # a stage recorded before per-tier counts were kept
                        k = round(got["pass_rate"] * got["tasks"])
                    cells.append(f"{k}/{got['tasks']}")
            rows.append((f"{label} {name}", cells))
    if not rows:
        return []
    width = max(len(r[0]) for r in rows)
    out = [f"{'solved by':<{width}} " + " ".join(f"{s['name']:>7}" for s in stages)]
    out += [f"{name:<{width}} " + " ".join(f"{c:>7}" for c in cells) for name, cells in rows]
    return out


async def run_stage(
    label: str,
    tasks: list[Task],
    workers: list[Any],
    log: Callable[[str], None],
    sampled: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Every held-out task once, greedy (``mode="eval"``), spread over the rollout
    ``workers`` (Ray handles); a task that fails to run counts as unsolved. The tasks in
    ``sampled`` (id -> k) also run k times at the rollout temperature (``mode="sample"``,
    never trained on): the stage's ``pass_at_k``."""
    specs = [RolloutSpec(10**9 + i, -1, t.id, 0, mode="eval") for i, t in enumerate(tasks)]
    draws = [(task_id, n) for task_id, k in (sampled or {}).items() for n in range(k)]
    first = 10**9 + len(specs)  # rollout ids (and seeds) after the greedy ones
    samples = [
        RolloutSpec(first + j, -1, task_id, n, mode="sample")
        for j, (task_id, n) in enumerate(draws)
    ]
    done, pace, total = [0], Pace(), len(specs) + len(samples)

    async def run(i: int, spec: RolloutSpec) -> Finished:
        try:
            return await workers[i % len(workers)].run.remote(spec)
        finally:
            done[0] += 1
            if pace.due():
                log(f"held-out {label}: {done[0]}/{total} episodes run")

    results = await asyncio.gather(
        *(run(i, s) for i, s in enumerate([*specs, *samples])), return_exceptions=True
    )
    graded: list[tuple[Task, Trajectory | None]] = []
    for task, r in zip(tasks, results[: len(specs)], strict=True):
        if isinstance(r, BaseException) or r.error or r.trajectory is None:
            why = str(r if isinstance(r, BaseException) else r.error).strip()
            first = why.splitlines()[0] if why else "no error message"  # Ray's run long
            log(f"held-out task {task.id} could not run ({label}): {first}")
            graded.append((task, None))
        else:
            graded.append((task, Trajectory.model_validate_json(r.trajectory)))
    stage = stage_record(label, graded)
    calls = [call_success_rate(t) for _, t in graded if t is not None]
    stage["call_success"] = statistics.fmean(calls) if calls else 0.0
    lo, hi = stage["ci95"]
    log(
        f"held-out pass rate {label}: {stage['pass_rate']:.3f} "
        f"(95% CI {lo:.3f}-{hi:.3f}, {stage['tasks']} tasks, greedy), "
        f"tool calls without error {stage['call_success']:.3f}"
    )
    if samples:
        stage["pass_at_k"] = sampled_record(samples, results[len(specs) :])
        p = stage["pass_at_k"]
        log(
            f"held-out pass@{p['k']} {label}: {p['pass_at_k']:.3f} over {p['tasks']} tasks "
            f"({p['samples']} sampled episodes, {p['errors']} could not run; sampled pass@1 "
            f"{p['pass_at_1']:.3f})"
        )
    return stage


def sampled_record(specs: list[RolloutSpec], results: list[Any]) -> dict[str, Any]:
    """pass@k of the sampled episodes (k: the samples per task; an episode that could not run
    counts as a failed sample), with the sampled pass@1 and which tasks any sample solved."""
    runs: dict[str, list[bool]] = {}
    errors = 0
    for spec, r in zip(specs, results, strict=True):
        bad = isinstance(r, BaseException) or r.error or r.trajectory is None
        errors += bool(bad)
        solved = not bad and Trajectory.model_validate_json(r.trajectory).solved
        runs.setdefault(spec.task_id, []).append(solved)
    k = max(len(v) for v in runs.values())
    return {
        "k": k,
        "tasks": len(runs),
        "samples": len(specs),
        "errors": errors,
        "pass_at_k": statistics.fmean(pass_at_k(len(v), sum(v), k) for v in runs.values()),
        "pass_at_1": statistics.fmean(sum(v) / len(v) for v in runs.values()),
        "solved_by_any": sorted(t for t, v in runs.items() if any(v)),
    }
