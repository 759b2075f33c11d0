"""The precision rule on each kind of device, from features given (never this machine's), and
the gathering around it: measured only when the answer depends on it."""

import pytest

from cheetah.model import precision
from cheetah.model.precision import CpuFeatures, choose_precision, parse_cpuinfo

AVX2 = CpuFeatures("AVX2 box", "x86_64", frozenset({"avx2"}), cpuinfo=True, mkldnn_bf16=False)
AVX512 = CpuFeatures("Skylake-X", "x86_64", frozenset({"avx2", "avx512f"}), True, True, True)
AVX512_BF16 = CpuFeatures("Cooper Lake", "x86_64", frozenset({"avx512f", "avx512_bf16"}), True)
AMX = CpuFeatures(
    "Sapphire Rapids",
    "x86_64",
    frozenset({"avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}),
    cpuinfo=True,
)
ARM = CpuFeatures("Neoverse-V1", "aarch64", frozenset({"asimd", "bf16"}), cpuinfo=True)
NO_CPUINFO = CpuFeatures("arm", "arm64")  # not Linux: no flags at all


@pytest.mark.parametrize(
    ("device", "cap", "dtype", "said"),
    [
        ("cuda", (9, 0), "bf16", "capability 9.0 has native bf16"),
        ("cuda:1", (8, 0), "bf16", "capability 8.0"),
        ("cuda", (7, 5), "fp32", "7.5 has no native bf16"),
        ("cuda", None, "fp32", "unknown"),
    ],
)
def test_auto_on_cuda_takes_bf16_from_capability_8(device, cap, dtype, said):
    choice = choose_precision("auto", device, cuda_capability=cap)
    assert choice.dtype == dtype and said in choice.reason and choice.warning is None


@pytest.mark.parametrize(
    ("features", "ratio", "named"),
    [
        (AMX, None, "AMX-BF16"),
        (AMX, 0.25, "AMX-BF16"),
        (AVX512_BF16, 0.8, "AVX512-BF16"),
        (ARM, None, "ARM bf16"),
    ],
)
def test_auto_on_a_cpu_with_native_bf16_takes_bf16(features, ratio, named):
    choice = choose_precision("auto", "cpu", features, measured_ratio=ratio)
    assert choice.dtype == "bf16" and named in choice.reason and choice.warning is None


def test_auto_on_avx2_alone_is_fp32_measured_or_not():
    assert choose_precision("auto", "cpu", AVX2).dtype == "fp32"
    choice = choose_precision("auto", "cpu", AVX2, measured_ratio=38.0)
    assert choice.dtype == "fp32" and "38x" in choice.reason and choice.warning is None


def test_flags_that_promise_bf16_lose_to_a_slow_measurement():
    choice = choose_precision("auto", "cpu", AMX, measured_ratio=70.0)  # a VM that lists AMX
    assert choice.dtype == "fp32" and "lists AMX-BF16" in choice.reason and "70x" in choice.reason


@pytest.mark.parametrize("features", [AVX512, NO_CPUINFO])
def test_ambiguous_features_follow_the_measurement(features):
    fast = choose_precision("auto", "cpu", features, measured_ratio=0.7)
    slow = choose_precision("auto", "cpu", features, measured_ratio=1.6)
    assert (fast.dtype, slow.dtype) == ("bf16", "fp32")
    assert "0.7x" in fast.reason and "1.6x" in slow.reason


def test_forced_bf16_is_obeyed_with_a_warning_where_slow():
    slow = choose_precision("bf16", "cpu", AVX2, measured_ratio=38.0)
    assert slow.dtype == "bf16" and "38x" in slow.warning and '"auto" picks fp32' in slow.warning
    unmeasured = choose_precision("bf16", "cpu", AVX2)
    assert unmeasured.dtype == "bf16" and "without native bf16" in unmeasured.warning
    fast = choose_precision("bf16", "cpu", AMX, measured_ratio=0.3)
    assert fast.dtype == "bf16" and fast.warning is None
    old_gpu = choose_precision("bf16", "cuda", cuda_capability=(7, 0))
    assert old_gpu.dtype == "bf16" and "7.0" in old_gpu.warning


@pytest.mark.parametrize("device", ["cpu", "cuda", "mps"])
def test_fp32_is_fp32(device):
    choice = choose_precision("fp32", device, AMX, cuda_capability=(9, 0), measured_ratio=0.1)
    assert choice.dtype == "fp32" and choice.warning is None


def test_other_devices_stay_fp32_unless_asked():
    assert choose_precision("auto", "mps").dtype == "fp32"
    assert choose_precision("bf16", "xpu:0").dtype == "bf16"


def test_cpuinfo_gives_model_and_relevant_flags_on_x86_and_arm():
    x86 = "processor\t: 0\nmodel name\t: Xeon\nflags\t\t: fpu sse avx2 avx512f amx_bf16 aes\n"
    assert parse_cpuinfo(x86) == ("Xeon", frozenset({"avx2", "avx512f", "amx_bf16"}))
    arm = "processor\t: 0\nFeatures\t: fp asimd bf16 i8mm\nCPU part\t: 0xd40\n"
    assert parse_cpuinfo(arm) == ("", frozenset({"asimd", "bf16"}))


def test_resolve_measures_only_when_the_answer_depends_on_it(monkeypatch):
    timed = []

    def ratio(n=256):
        timed.append(n)
        return 38.0

    monkeypatch.setattr(precision, "measure_bf16_ratio", ratio)
    monkeypatch.setattr(precision, "cpu_features", lambda: AVX2)
    assert precision.resolve_precision("auto", "cpu").dtype == "fp32" and not timed
    forced = precision.resolve_precision("bf16", "cpu")
    assert forced.dtype == "bf16" and "38x" in forced.warning and len(timed) == 1
    monkeypatch.setattr(precision, "cpu_features", lambda: AVX512)  # torch has bf16 kernels
    assert precision.resolve_precision("auto", "cpu").dtype == "fp32" and len(timed) == 2


def test_the_measurement_gives_two_positive_times():
    t = precision.measure_matmul(n=32, reps=1)  # no bound on the value: machines differ
    assert t.fp32_ms > 0 and t.bf16_ms > 0 and t.ratio > 0
