"""Read-only views of training runs (``runs/<name>/run.sqlite``) for the dashboard.

Opens each store read-only (``mode=ro``), so the dashboard can watch a run while
``cheetah train`` writes it (the store is in WAL mode) and can never change it.
A rollout's time span is ``finished_at - trajectory.wall_s`` to ``finished_at``; the
timeline packs spans into lanes greedily, so the number of lanes in use at a moment
is the number of rollouts that were in flight.

A run is named by one directory name under the runs directory (no ``/``, no leading
``.``, so nothing outside it); a rollout id outside SQLite's integer range is no rollout.
A runs directory that is itself a run (it holds ``run.sqlite``: ``--runs runs/quickstart``)
shows that one run, under its folder's name.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

MAX_ROLLOUT_ID = 2**63 - 1  # SQLite's INTEGER range


class RunNotFound(LookupError):
    pass


def _one_run(runs_dir: Path) -> str | None:
    """The run's name when ``runs_dir`` is itself one run, else None."""
    return runs_dir.resolve().name if (runs_dir / "run.sqlite").is_file() else None


def describe(runs_dir: Path) -> str:
    """What the dashboard shows, for its start line."""
    one = _one_run(runs_dir)
    return f"the run {one!r} in {runs_dir}" if one else f"runs: {runs_dir}"


def list_runs(runs_dir: Path) -> list[dict[str, Any]]:
    one = _one_run(runs_dir)
    names = [one] if one else [db.parent.name for db in sorted(runs_dir.glob("*/run.sqlite"))]
    out = []
    for name in names:
        try:
            out.append(summary(runs_dir, name))
        except (sqlite3.Error, RunNotFound):
            continue
    return out


def _connect(runs_dir: Path, name: str) -> sqlite3.Connection:
    if "/" in name or "\x00" in name or name.startswith(".") or not name:
        raise RunNotFound(f"bad run name {name!r}")
    one = _one_run(runs_dir)
    if one is not None and name != one:
        raise RunNotFound(f"no run {name!r}: {runs_dir} is the run {one!r}")
    path = runs_dir / "run.sqlite" if one else runs_dir / name / "run.sqlite"
    if not path.is_file():
        raise RunNotFound(f"no run {name!r} under {runs_dir}")
    # as_uri quotes the path, so a name with '?' or '#' cannot add URI parameters
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)


def summary(runs_dir: Path, name: str) -> dict[str, Any]:
    with _connect(runs_dir, name) as db:
        rollouts, mean_reward = db.execute("SELECT COUNT(*), AVG(reward) FROM rollouts").fetchone()
        steps = db.execute("SELECT MAX(step) FROM metrics").fetchone()[0] or 0
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
        last = db.execute("SELECT MAX(finished_at) FROM rollouts").fetchone()[0]

    def rate(stage: str, old: str) -> float | None:  # old: runs from before held-out stages
        raw = meta.get(f"stage_{stage}")
        if raw:
            return json.loads(raw).get("pass_rate")
        raw = meta.get(f"pass_rate_{old}")
        return json.loads(raw).get("rate") if raw else None

    done = json.loads(meta["summary"]) if meta.get("summary") else {}
    stages = [
        {k: s[k] for k in ("name", "tasks", "solved", "pass_rate", "ci95") if k in s}
        for s in done.get("stages", [])
    ]
    return {
        "name": name,
        "rollouts": rollouts,
        "mean_reward": mean_reward,
        "steps": steps,
        "pass_rate_before": rate("base", "before"),
        "pass_rate_after": rate("rl", "after"),
        "stages": stages,
        "mcnemar_p": done.get("mcnemar_p"),
        "last_rollout_at": last,
        "time_breakdown": _time_breakdown(done, meta),
    }


def _time_breakdown(done: dict[str, Any], meta: dict[str, str]) -> dict[str, Any] | None:
    """The finished run's, or while it runs the phases so far (``rl/timing.py``)."""
    from cheetah.rl.timing import META_KEY, breakdown

    if done.get("time_breakdown"):
        return done["time_breakdown"]
    held = json.loads(meta[META_KEY]) if meta.get(META_KEY) else None
    return breakdown(held["phases"], held["wall_s"]) if held else None


def metrics(runs_dir: Path, name: str) -> dict[str, list[list[float]]]:
    with _connect(runs_dir, name) as db:
        rows = db.execute("SELECT step, name, value FROM metrics ORDER BY step").fetchall()
    out: dict[str, list[list[float]]] = {}
    for step, key, value in rows:
        out.setdefault(key, []).append([step, value])
    return out


def rollouts(runs_dir: Path, name: str, limit: int = 500) -> list[dict[str, Any]]:
    """The newest ``limit`` rollouts with their span, lane, outcome and size, oldest first."""
    with _connect(runs_dir, name) as db:
        rows = db.execute(
            "SELECT rollout_id, group_id, task_id, sample, reward, versions, trajectory, "
            "finished_at, trained_step FROM rollouts ORDER BY finished_at DESC LIMIT ?",
            (limit,),
        ).fetchall()
    out = []
    for rid, gid, task, sample, reward, versions, traj, finished, trained in reversed(rows):
        t = json.loads(traj) if traj else {}
        calls = [c for turn in t.get("turns", []) for c in turn.get("calls", [])]
        wall = float(t.get("wall_s") or 0.0)
        out.append(
            {
                "rollout_id": rid,
                "group_id": gid,
                "task_id": task,
                "sample": sample,
                "reward": reward,
                "correct": bool((t.get("grade") or {}).get("correct")),
                "versions": json.loads(versions),
                "start": finished - wall,
                "end": finished,
                "turns": len(t.get("turns", [])),
                "tool_calls": len(calls),
                "tool_errors": sum(1 for c in calls if c.get("is_error")),
                "trained_step": trained,
            }
        )
    lanes: list[float] = []  # end time of the last span in each lane
    for r in sorted(out, key=lambda r: r["start"]):
        lane = next((i for i, end in enumerate(lanes) if end <= r["start"]), len(lanes))
        if lane == len(lanes):
            lanes.append(r["end"])
        else:
            lanes[lane] = r["end"]
        r["lane"] = lane
    return out


def trajectory(runs_dir: Path, name: str, rollout_id: int) -> dict[str, Any]:
    if not -MAX_ROLLOUT_ID - 1 <= rollout_id <= MAX_ROLLOUT_ID:
        raise RunNotFound(f"run {name!r} has no rollout {rollout_id}")
    with _connect(runs_dir, name) as db:
        row = db.execute(
            "SELECT trajectory FROM rollouts WHERE rollout_id = ?", (rollout_id,)
        ).fetchone()
    if row is None or row[0] is None:
        raise RunNotFound(f"run {name!r} has no rollout {rollout_id}")
    return json.loads(row[0])
