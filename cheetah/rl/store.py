"""The run store: one SQLite file per run holding the config, every finished rollout, and
per-step metrics. A rollout is written the moment it finishes (WAL, one transaction
each), so a crash loses nothing that completed; ``rollout_id`` is the primary key, so
nothing is stored twice; ``trained_step`` says which optimizer step used it, or, negative,
why its group was dropped untrained (``DROPPED``).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from cheetah.rl.scheduler import Finished, RolloutSpec

# ``trained_step`` of a rollout whose group was dropped, by why (``Group.dropped_as``);
# stores written before the reasons were kept hold -1 for all three.
DROPPED = {"stale": -1, "resampled": -2, "failed": -3}

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS rollouts (
    rollout_id INTEGER PRIMARY KEY,
    group_id INTEGER NOT NULL,
    task_id TEXT NOT NULL,
    sample INTEGER NOT NULL,
    reward REAL NOT NULL,
    versions TEXT NOT NULL,
    trajectory TEXT,
    finished_at REAL NOT NULL,
    trained_step INTEGER
);
CREATE INDEX IF NOT EXISTS rollouts_group ON rollouts (group_id);
CREATE TABLE IF NOT EXISTS metrics (
    step INTEGER NOT NULL, name TEXT NOT NULL, value REAL NOT NULL, at REAL NOT NULL,
    PRIMARY KEY (step, name)
);
"""


class RunStore:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)
        self._lock = threading.Lock()

    def close(self) -> None:
        self._db.close()

    def set_meta(self, key: str, value: Any) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))

    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else default

    def add_rollout(
        self,
        rollout_id: int,
        group_id: int,
        task_id: str,
        sample: int,
        reward: float,
        versions: list[int],
        trajectory: str | None,
    ) -> bool:
        """Store a finished rollout; False if that id is already stored (never twice)."""
        with self._lock:
            cur = self._db.execute(
                "INSERT OR IGNORE INTO rollouts VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL)",
                (
                    rollout_id,
                    group_id,
                    task_id,
                    sample,
                    reward,
                    json.dumps(versions),
                    trajectory,
                    time.time(),
                ),
            )
            return cur.rowcount == 1

    def mark_trained(self, rollout_ids: list[int], step: int) -> None:
        with self._lock:
            self._db.executemany(
                "UPDATE rollouts SET trained_step = ? WHERE rollout_id = ?",
                [(step, r) for r in rollout_ids],
            )

    def untrain_after(self, step: int) -> int:
        """Forget training marks past ``step`` (a resume from the checkpoint of ``step``)."""
        with self._lock:
            cur = self._db.execute(
                "UPDATE rollouts SET trained_step = NULL WHERE trained_step > ?", (step,)
            )
            self._db.execute("DELETE FROM metrics WHERE step > ?", (step,))
            return cur.rowcount

    def untrained(self) -> list[Finished]:
        """The finished rollouts no step has trained on, as the scheduler's records."""
        rows = self._db.execute(
            "SELECT rollout_id, group_id, task_id, sample, reward, versions, trajectory "
            "FROM rollouts WHERE trained_step IS NULL ORDER BY rollout_id"
        ).fetchall()
        return [
            Finished(RolloutSpec(rid, gid, task, sample), reward, json.loads(versions), traj)
            for rid, gid, task, sample, reward, versions, traj in rows
        ]

    def dropped_groups(self) -> dict[str, int]:
        """How many groups were dropped untrained, by why (the keys of ``DROPPED``)."""
        rows = self._db.execute(
            "SELECT trained_step, COUNT(DISTINCT group_id) FROM rollouts "
            "WHERE trained_step < 0 GROUP BY trained_step"
        ).fetchall()
        why = {code: name for name, code in DROPPED.items()}
        return {why[code]: n for code, n in rows if code in why}

    def done_groups(self) -> set[int]:
        """Groups whose rollouts were trained on, or dropped untrained (``dropped_groups``)."""
        rows = self._db.execute(
            "SELECT DISTINCT group_id FROM rollouts WHERE trained_step IS NOT NULL"
        ).fetchall()
        return {r[0] for r in rows}

    def count(self, where: str = "1") -> int:
        return self._db.execute(f"SELECT COUNT(*) FROM rollouts WHERE {where}").fetchone()[0]

    def trained_counts(self) -> dict[int, int]:
        """rollout_id -> 1 for every trained rollout (for checks that none is used twice)."""
        rows = self._db.execute(
            "SELECT rollout_id FROM rollouts WHERE trained_step IS NOT NULL"
        ).fetchall()
        return {r[0]: 1 for r in rows}

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        now = time.time()
        with self._lock:
            self._db.executemany(
                "INSERT OR REPLACE INTO metrics VALUES (?, ?, ?, ?)",
                [(step, k, float(v), now) for k, v in metrics.items()],
            )

    def metric_series(self, name: str) -> list[tuple[int, float]]:
        return self._db.execute(
            "SELECT step, value FROM metrics WHERE name = ? ORDER BY step", (name,)
        ).fetchall()

    def trajectories(self, limit: int = 100) -> list[str]:
        rows = self._db.execute(
            "SELECT trajectory FROM rollouts WHERE trajectory IS NOT NULL "
            "ORDER BY rollout_id DESC LIMIT ?",
            (limit,),
        ).fetchall()
        return [r[0] for r in rows]
