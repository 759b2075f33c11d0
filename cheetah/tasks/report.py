"""Write an ``EvalReport`` as JSON, Markdown and (when matplotlib is installed) a PNG plot.

Deliberately left out: HTML output and comparisons between runs (the dashboard
reads ``report.json``).
"""

from __future__ import annotations

from pathlib import Path

from cheetah.tasks.evaluate import EvalReport


def _fmt(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 100 else f"{v:.0f}"
    return str(v)


SUMMARY_ROWS = [
    ("pass@1", "pass@1"),
    ("pass@k", None),
    ("conventions score (mean)", "conventions"),
    ("conventions score when correct", "conventions_when_correct"),
    ("mean reward", "mean_reward"),
    ("tool calls per task", "tool_calls"),
    ("calls per turn (parallelism)", "calls_per_turn"),
    ("reads and searches before first edit", "explore_before_edit"),
    ("edits per task", "edits"),
    ("answers claiming a change the workspace lacks", "false_claim"),
    ("turns per task", "turns"),
    ("replies cut at max_new_tokens per task", "turns_cut"),
    ("completion tokens per task", "completion_tokens"),
    ("prompt tokens per task", "prompt_tokens"),
    ("wall time per task (s)", "wall_s_per_task"),
    ("samples the agent finished", "finished"),
    (
        "samples a limit stopped (turns, tokens, wall time, context, a cut reply)",
        "stopped_by_limit",
    ),
    ("samples with errors", "errors"),
    ("samples whose change reached for the test runner (graded 0)", "flagged"),
]


def markdown(report: EvalReport) -> str:
    s = report.summary
    k = s.get("k", report.config.samples)
    lines = [
        f"# Eval: {report.model}",
        "",
        f"- tasks file: `{report.tasks_file}`" if report.tasks_file else "",
        f"- sessions: {report.session}; samples per task: {k}; concurrency: "
        f"{report.config.concurrency}; started {report.started_at}; took {report.wall_s:.1f} s",
        "",
        "| metric | value |",
        "|---|---|",
    ]
    for label, key in SUMMARY_ROWS:
        if key is None and k == 1:
            continue  # pass@1 is already the first row
        key = key or f"pass@{k}"
        label = label if label != "pass@k" else f"pass@{k}"
        lines.append(f"| {label} | {_fmt(s.get(key))} |")
    if report.by_group:
        lines += ["", "| group | tasks | pass@1 | pass@k |", "|---|---|---|---|"]
        for name, g in report.by_group.items():
            lines.append(
                f"| {name} | {g['tasks']} | {_fmt(g['pass@1'])} | {_fmt(g[f'pass@{k}'])} |"
            )
    lines += [
        "",
        "| task | tier | split | kind | correct/n | pass@1 | errors |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in report.tasks:
        err = "; ".join(e.splitlines()[0][:120] for e in t.errors) if t.errors else ""
        lines.append(
            f"| {t.task_id} | {t.tier} | {t.split} | {t.kind} | {t.correct}/{t.n} | "
            f"{_fmt(t.pass_at_1)} | {err.replace('|', '/')} |"
        )
    return "\n".join(line for line in lines if line is not None) + "\n"


def plot(report: EvalReport, path: Path) -> Path | None:
    """A PNG with pass@k over k, pass@1 per task, and tool use per task; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    from cheetah.tasks.metrics import pass_at_k

    k_max = max(1, report.config.samples)
    ks = list(range(1, k_max + 1))
    curve = [
        sum(pass_at_k(t.n, t.correct, k) for t in report.tasks if t.n) / max(1, len(report.tasks))
        for k in ks
    ]
    ids = [t.task_id for t in report.tasks]
    by_task: dict[str, list] = {}
    for s in report.samples:
        by_task.setdefault(s.task_id, []).append(s)

    def per_task(key: str) -> list[float]:
        out = []
        for t in ids:
            vals = [s.metrics.get(key) or 0 for s in by_task.get(t, []) if s.metrics]
            out.append(sum(vals) / len(vals) if vals else 0.0)
        return out

    fig, axes = plt.subplots(1, 3, figsize=(16, max(4, 0.18 * len(ids) + 2)))
    axes[0].plot(ks, curve, marker="o")
    axes[0].set(xlabel="k", ylabel="pass@k", title="pass@k", ylim=(0, 1.05), xticks=ks)
    axes[1].barh(ids, [t.pass_at_1 for t in report.tasks], color="tab:green")
    axes[1].set(xlabel="pass@1", title="pass@1 per task", xlim=(0, 1))
    axes[1].invert_yaxis()
    y = range(len(ids))
    axes[2].barh([i - 0.2 for i in y], per_task("tool_calls"), height=0.4, label="tool calls")
    axes[2].barh(
        [i + 0.2 for i in y], per_task("explore_before_edit"), height=0.4, label="reads before edit"
    )
    axes[2].set(yticks=list(y), yticklabels=[], title="tool use per task")
    axes[2].invert_yaxis()
    axes[2].legend()
    for ax in axes[1:]:
        ax.tick_params(axis="y", labelsize=7)
    fig.suptitle(f"{report.model}: pass@1 {report.summary.get('pass@1', 0):.3f}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_report(report: EvalReport, out_dir: Path) -> dict[str, Path | None]:
    """``report.json``, ``report.md`` and ``report.png`` (None when matplotlib is missing)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    js = out_dir / "report.json"
    js.write_text(report.model_dump_json(indent=1), encoding="utf-8")
    md = out_dir / "report.md"
    md.write_text(markdown(report), encoding="utf-8")
    return {"json": js, "markdown": md, "plot": plot(report, out_dir / "report.png")}
