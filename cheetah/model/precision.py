"""Which dtype a device computes in: chosen by what the device does fast, not by a flag.

A bf16 matmul is only fast where the hardware has it: CUDA from capability 8.0 (Ampere),
x86 CPUs with AMX or AVX512-BF16, ARM CPUs with the bf16 extension. Elsewhere PyTorch falls
back to a reference GEMM: on an AVX2-only CPU a 1024x576 @ 576x1536 product took 4,406 ms in
bf16 against 116 ms in fp32 (38x), so a config that forced bf16 never finished its first
step there. ``auto`` (the default of ``train.precision``) therefore takes bf16 only where the
device has it natively and, on a CPU, where a small bf16 matmul is measured no slower than
fp32's; flags can say too much (oneDNN may be held below the ISA they list: with
``ONEDNN_MAX_CPU_ISA=AVX2`` a 256x256 bf16 matmul took 67x fp32's time on a 2-core Xeon VM
that lists AMX) or nothing (no
``/proc/cpuinfo``), so the measurement decides whenever it is taken.

``choose_precision`` is the rule, a pure function of what was found; ``resolve_precision``
gathers it (``cpu_features``, ``measure_matmul`` only when the answer depends on it) and
applies the rule; ``cheetah doctor`` prints both. Left out: fp16 (no loss scaling in the
trainer), and other devices than CPU and CUDA (xpu, mps: fp32 unless bf16 is asked for).
"""

from __future__ import annotations

import platform
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

Requested = Literal["auto", "fp32", "bf16"]
Dtype = Literal["fp32", "bf16"]

# bf16 must not be slower than fp32 on the measured matmul. The two sides are far apart where
# it matters (n = 256, 2 cores of a Xeon VM with AMX: 0.20-0.27 over 40 measurements; the
# same with oneDNN held to AVX2: 4-67, the fp32 side inflated by other processes; the issue's
# AVX2-only CPU: ~38 on a larger shape).
MAX_BF16_RATIO = 1.0
# The flags that say a CPU computes bf16 natively, in the order a reason names them (x86 AMX,
# x86 AVX512-BF16, ARM's bf16 extension as /proc/cpuinfo spells each).
NATIVE_BF16 = {"amx_bf16": "AMX-BF16", "avx512_bf16": "AVX512-BF16", "bf16": "ARM bf16"}
RELEVANT_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "asimd", "bf16")
CPUINFO = Path("/proc/cpuinfo")


@dataclass(frozen=True)
class CpuFeatures:
    """What the CPU says about itself: ``flags`` is the subset of ``RELEVANT_FLAGS`` that
    ``/proc/cpuinfo`` lists (empty where there is no such file: not Linux); ``mkldnn`` and
    ``mkldnn_bf16`` are torch's own view (None without torch)."""

    model: str
    machine: str
    flags: frozenset[str] = frozenset()
    cpuinfo: bool = False
    mkldnn: bool | None = None
    mkldnn_bf16: bool | None = None

    @property
    def native_bf16(self) -> str | None:
        """The name of the first flag that gives native bf16, or None."""
        return next((name for flag, name in NATIVE_BF16.items() if flag in self.flags), None)


@dataclass(frozen=True)
class MatmulTiming:
    """The fastest of a few ``n x n @ n x n`` products in each dtype, in milliseconds."""

    n: int
    fp32_ms: float
    bf16_ms: float

    @property
    def ratio(self) -> float:
        return self.bf16_ms / self.fp32_ms


@dataclass(frozen=True)
class Choice:
    dtype: Dtype
    reason: str
    warning: str | None = None


def parse_cpuinfo(text: str) -> tuple[str, frozenset[str]]:
    """The model name and the relevant flags of ``/proc/cpuinfo``'s text (x86 ``flags``,
    ARM ``Features``; the first processor's, they are the same on every core)."""
    model, flags = "", frozenset[str]()
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key = key.strip().lower()
        if not sep:
            continue
        if key in ("model name", "cpu model", "hardware") and not model:
            model = value.strip()
        elif key in ("flags", "features") and not flags:
            flags = frozenset(value.split()) & set(RELEVANT_FLAGS)
    return model, flags


@cache
def cpu_features() -> CpuFeatures:
    try:
        model, flags = parse_cpuinfo(CPUINFO.read_text(errors="replace"))
        found = True
    except OSError:  # not Linux: no flags, the measurement decides
        model, flags, found = "", frozenset(), False
    mkldnn = mkldnn_bf16 = None
    try:
        import torch
    except ImportError:
        pass
    else:
        mkldnn = bool(torch.backends.mkldnn.is_available())
        mkldnn_bf16 = bool(mkldnn and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return CpuFeatures(
        model=model or platform.processor() or "unknown",
        machine=platform.machine(),
        flags=flags,
        cpuinfo=found,
        mkldnn=mkldnn,
        mkldnn_bf16=mkldnn_bf16,
    )


def measure_matmul(n: int = 256, reps: int = 3) -> MatmulTiming:
    """Time an ``n x n`` matmul in fp32 and in bf16 on the CPU with torch's current threads:
    one warm-up each (oneDNN builds its kernel there), then the fastest of ``reps``,
    interleaved. The fastest rather than the median: on a shared machine a rep can lose its
    core to another process, and that says nothing about the dtype. At n = 256 it takes
    well under 10 ms where bf16 is fast, 0.1-0.3 s where it is not. Measured
    once per process for each (n, reps)."""
    return _measure(n, reps)


@cache
def _measure(n: int, reps: int) -> MatmulTiming:
    import torch

    gen = torch.Generator().manual_seed(0)
    a32, b32 = torch.randn(n, n, generator=gen), torch.randn(n, n, generator=gen)
    pairs = {"fp32": (a32, b32), "bf16": (a32.bfloat16(), b32.bfloat16())}
    times: dict[str, list[float]] = {"fp32": [], "bf16": []}
    with torch.inference_mode():
        for a, b in pairs.values():
            torch.mm(a, b)
        for _ in range(reps):
            for name, (a, b) in pairs.items():
                t0 = time.perf_counter()
                torch.mm(a, b)
                times[name].append(time.perf_counter() - t0)
    best = {k: max(min(v), 1e-9) * 1e3 for k, v in times.items()}
    return MatmulTiming(n=n, fp32_ms=best["fp32"], bf16_ms=best["bf16"])


def measure_bf16_ratio(n: int = 256) -> float:
    """bf16 matmul time over fp32's on this CPU (below 1: bf16 is faster)."""
    return measure_matmul(n).ratio


def choose_precision(
    requested: Requested,
    device: str,
    features: CpuFeatures | None = None,
    cuda_capability: tuple[int, int] | None = None,
    measured_ratio: float | None = None,
) -> Choice:
    """The dtype ``device`` ("cpu", "cuda", ...) computes in for ``requested``, with why.
    ``auto``: bf16 on CUDA from capability 8.0; on a CPU, bf16 where its flags name native
    bf16 and the measured bf16/fp32 ratio (when given) is at most ``MAX_BF16_RATIO``, or,
    flags naming none, where the ratio alone says so; fp32 elsewhere. ``bf16`` is obeyed,
    with a warning where it is slow."""
    kind = device.split(":")[0]
    if requested == "fp32":
        return Choice("fp32", "fp32 requested")
    forced = requested == "bf16"
    if kind == "cuda":
        if cuda_capability is None:
            if forced:
                return Choice("bf16", "bf16 requested (CUDA capability unknown)")
            return Choice("fp32", "CUDA capability unknown: fp32")
        cap = ".".join(map(str, cuda_capability))
        if tuple(cuda_capability) >= (8, 0):
            return Choice("bf16", f"CUDA capability {cap} has native bf16")
        if forced:
            return Choice(
                "bf16",
                "bf16 requested",
                f"CUDA capability {cap} has no native bf16 (8.0 and up do): expect it slow; "
                'precision = "auto" picks fp32 here',
            )
        return Choice("fp32", f"CUDA capability {cap} has no native bf16 (8.0 and up do)")
    if kind != "cpu":
        if forced:
            return Choice("bf16", "bf16 requested")
        return Choice("fp32", f"no bf16 rule for device {kind!r}: fp32")
    native = features.native_bf16 if features is not None else None
    timed = (
        "" if measured_ratio is None else f"a bf16 matmul takes {measured_ratio:.2g}x fp32's time"
    )
    slow = measured_ratio is not None and measured_ratio > MAX_BF16_RATIO
    if forced:
        if slow:
            return Choice(
                "bf16",
                "bf16 requested",
                f"bf16 forced, but on this CPU {timed}: training runs that much slower; "
                'precision = "auto" picks fp32 here',
            )
        if native is None and measured_ratio is None:
            return Choice(
                "bf16",
                "bf16 requested",
                "bf16 forced on a CPU without native bf16 (no AMX, AVX512-BF16 or ARM bf16): "
                'expect it many times slower than fp32; precision = "auto" picks fp32 here',
            )
        return Choice("bf16", f"bf16 requested{f' ({timed})' if timed else ''}")
    if native is not None:
        if slow:
            return Choice("fp32", f"the CPU lists {native}, but {timed}")
        return Choice("bf16", f"the CPU has {native}{f' ({timed})' if timed else ''}")
    if measured_ratio is not None and not slow:
        return Choice("bf16", f"no native bf16 flag, but {timed}")
    if slow:
        return Choice("fp32", f"no native bf16 (no AMX, AVX512-BF16 or ARM bf16): {timed}")
    return Choice("fp32", "no native bf16 (no AMX, AVX512-BF16 or ARM bf16)")


def needs_measuring(requested: Requested, features: CpuFeatures) -> bool:
    """Whether the CPU answer depends on the measurement: not for fp32, and not where the
    flags were read, name no native bf16 and torch has no bf16 kernels (AVX2 alone: fp32
    without spending a slow bf16 matmul to learn it)."""
    if requested == "fp32":
        return False
    certain_slow = features.cpuinfo and features.native_bf16 is None and not features.mkldnn_bf16
    return requested == "bf16" or not certain_slow


def cuda_capability(device: str) -> tuple[int, int] | None:
    import torch

    if not torch.cuda.is_available():
        return None
    index = int(device.split(":")[1]) if ":" in device else torch.cuda.current_device()
    return tuple(torch.cuda.get_device_capability(index))


def resolve_precision(requested: Requested, device: str) -> Choice:
    """``choose_precision`` with what this machine says: the CPU's features, a matmul timed
    only when the answer depends on it (cached for the process), CUDA's capability."""
    kind = device.split(":")[0]
    if kind == "cuda":
        return choose_precision(requested, device, cuda_capability=cuda_capability(device))
    if kind != "cpu":
        return choose_precision(requested, device)
    features = cpu_features()
    ratio = measure_bf16_ratio() if needs_measuring(requested, features) else None
    return choose_precision(requested, device, features, measured_ratio=ratio)
