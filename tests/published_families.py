"""The published-runs tables of issue #32 by family: each family's rows, mean and worst |error|.

    python tests/published_families.py               # prints every family's rows and its mean / worst |error|
    python tests/published_families.py --gh100-tiles # and beside them the H100 rows with the GH100 die's GEMM tiles
    python tests/published_families.py --run-attention # each run at the attention kernel its stack ran (MPT: Triton)
    python tests/published_families.py --gh100-tiles --run-attention  # both
    python tests/published_families.py --te-cudnn      # the H100 runs of Transformer Engine stacks at cuDNN's attention
    python tests/published_families.py --gh100-loop-clock --run-attention  # the tiles at the GEMM loop's clock (a floor)
    python tests/published_families.py --gh100-no-nccl-sms  # the tiles without NCCL's SMs beside hidden collectives
    python tests/published_families.py --stragglers    # every step waiting 8 % of t_compute for its slowest GPU (a bound)
    python tests/published_families.py --gh100-tiles --gh100-needed-clock  # the clock each H100 row would need
    python tests/published_families.py --gh100-tiles --experts-per-kernel  # each routed expert's GEMM its own kernel

The experiments compose (each flag applied in the order given). Session 21's table of what each moves per H100 row:
docs/step-time.md, "What slows the H100 rows below the GH100 die model".

`--run-attention` gives each case the fused attention kernel its own stack ran where that is older than the GPU
preset's (step_time_cases.Case.attention_kernel; parcalc.core.timing.attention_kernels): llm-foundry's 2023 MPT
benchmarks ran Tri Dao's Triton FlashAttention (attn_impl: triton), at less than half FlashAttention-2's rate on the
H100 (FlashAttention-2 paper, Fig. 7). Off by default: the H100's GEMM share was set on MPT-7B with FlashAttention-2's
rate in it, so turning it on under the share asks for the share to be re-derived (printed), which is the lead's call.

`--te-cudnn` gives the modern runs on H100s whose stack runs Transformer Engine (Megatron-Core, Megatron-Bridge, NeMo) the
H100 preset's `cudnn-fused` attention (the H200's sustained cuDNN measurement, the same die), which TE prefers on Hopper.
Off by default: the 2024 NeMo long-context runs come out far too fast with it (the function's docstring).

`--gh100-tiles` is issue #32's full replacement of the H100's fitted GEMM share, not landed because it makes families
worse (the session-14 note): the H100 SXM5 given the GEMMs the H200 preset measured by tiles (the same GH100 die, 132
SMs: NVIDIA H100 whitepaper; the H200 differs in its HBM), at the step's SM clock from the H200's power model (its
reference steps' clock and Tensor Core load, and n from the GH100's rated points: assumed that the H100's HBM3 draws as
the H200's HBM3e at the same load, which no source gives), and NCCL's 24 channels holding SMs beside its hidden
collectives (parcalc.core.timing.sm_contention). The 96GB HBM2e H100 at its 500 W limit keeps its share: the step-clock
model has no limit below the 700 W its reference steps drew.

The rows are the tests of tests/step_time_cases.py (14 dense runs) and tests/modern_cases.py (12 modern runs);
their errors are those tables' (`error(case)`: predicted over published throughput, minus 1). Known gaps (each
table's KNOWN_GAPS) are printed under their family, marked, and not counted: each lacks a mechanism in parcalc
for a stated reason. The calibration run (step_time_cases.CALIBRATION) is no test and is left out.

A row's families are stated here, row by row (FAMILIES), not guessed from its settings; a run can be in two
(DeepSeek-V3 in FP8 is MoE and FP8). What decides them:
- **MoE, long-context, FP8**: the modern runs' own `categories` in tests/published_modern_runs.py ("moe", "cp",
  "fp8"); tests/test_published_families.py holds FAMILIES to them.
- **Megatron-style**: a dense BF16/FP16 run of Megatron-LM's kind of parallelism (tensor and pipeline model
  parallelism, Megatron's or DeepSpeed's pipeline engine): Megatron-LM's GPT-3 175B, BLOOM (Megatron-DeepSpeed),
  Llama 3 405B at 8K (Meta's 4D parallelism with TP 8, PP 16 and an interleaved schedule).
- **FSDP**: a dense BF16 run sharded by PyTorch FSDP without model parallelism (MosaicML's llm-foundry on
  Composer + FSDP1, TorchTitan on FSDP2).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))  # this checkout's parcalc, run as a script from anywhere

import modern_cases
import step_time_cases

MEGATRON, FSDP, MOE, LONG, FP8 = "Megatron-style", "FSDP", "MoE", "long-context", "FP8"
ORDER = (MEGATRON, FSDP, MOE, LONG, FP8)
# the modern runs' categories (tests/published_modern_runs.py) and the family each names
CATEGORY_FAMILY = {"moe": MOE, "cp": LONG, "fp8": FP8}

FAMILIES: dict[str, tuple[str, ...]] = {
    # --- tests/step_time_cases.py CASES
    "megatron-gpt3-175b-1024xa100": (MEGATRON,),  # Megatron-LM README: TP 8, PP 16
    "mpt-70b-64xa100-80gb-seq2048": (FSDP,),  # llm-foundry: Composer + PyTorch FSDP
    "mpt-30b-8xa100-80gb-seq2048": (FSDP,),
    "mpt-7b-8xa100-80gb-seq2048": (FSDP,),
    "mpt-70b-128xa100-40gb-seq2048": (FSDP,),
    "mpt-13b-128xa100-40gb-seq2048": (FSDP,),
    "mpt-70b-64xh100-80gb-seq2048": (FSDP,),
    "mpt-13b-64xh100-80gb-seq2048": (FSDP,),
    "mpt-1b-64xh100-80gb-seq2048": (FSDP,),
    "torchtitan-llama3-70b-64xa100": (FSDP,),  # TorchTitan: FSDP2
    "bloom-176b-384xa100": (MEGATRON,),  # Megatron-DeepSpeed: TP 4, PP 12, DeepSpeed's pipeline engine
    "torchtitan-llama3-8b-64xa100": (FSDP,),
    "llama3-405b-16384xh100-seq8192": (MEGATRON,),  # Meta's 4D parallelism: TP 8, PP 16, v = 8
    "llama3-405b-8192xh100-seq8192": (MEGATRON,),
    "mtnlg-530b-2240xa100": (MEGATRON,),  # known gap: DeepSpeed's pipeline engine, fp16, 2021
    # --- tests/modern_cases.py CASES (families = the run's categories)
    "mcore-moe-deepseek-v3-1024xh100-fp8blk": (MOE, FP8),
    "mbridge2509-deepseek-v3-1024xh100-fp8": (MOE, FP8),
    "mcore-moe-qwen3-235b-256xh100-bf16": (MOE,),
    "mbridge2604-qwen3-235b-256xh100-fp8": (MOE, FP8),
    "mbridge-skill-qwen3-30b-a3b-16xh100-bf16-hybridep-overlap": (MOE,),
    "nemo-long-llama2-7b-32xh100-fp8-seq32k-cp2": (LONG, FP8),
    "nemo-long-llama2-7b-128xh100-fp8-seq128k-cp4": (LONG, FP8),
    "nemo-long-llama2-7b-256xh100-fp8-seq256k-cp8": (LONG, FP8),
    "nemo-long-llama2-7b-1024xh100-fp8-seq1024k-cp32": (LONG, FP8),
    "llama3-405b-16384xh100-cp16-seq131072": (LONG,),
    "tt2412-llama31-8b-8xh100-fsdp-compile-fp8": (FP8,),  # FSDP2 too; its family is its category (FP8)
    "tt2412-llama31-8b-8xh100-fsdp-compile-bf16": (FSDP,),  # no category: a dense BF16 FSDP2 run
    # --- tests/modern_cases.py KNOWN_GAPS
    "mbridge2604-qwen3-30b-a3b-16xh100-fp8": (MOE, FP8),
    "tt2412-llama31-8b-8xh100-fsdp4-cp2-seq64k-fp8": (LONG, FP8),
    "tt2412-llama31-8b-8xh100-fsdp2-cp4-seq128k-fp8": (LONG, FP8),
    "tt2412-llama31-8b-8xh100-fsdp1-cp8-seq256k-fp8": (LONG, FP8),
}


class Row(NamedTuple):
    key: str
    table: str  # which cases module it comes from
    families: tuple[str, ...]
    error: float  # predicted over published throughput, minus 1
    known_gap: bool


class FamilyStats(NamedTuple):
    family: str
    rows: tuple[Row, ...]  # the tests (known gaps left out)
    mean: float  # mean |error|
    worst: float  # largest |error|


def _cases() -> list[tuple[str, object, Callable[[object], tuple[float, object]], bool]]:
    dense = [("step_time_cases", case, step_time_cases.error, False) for case in step_time_cases.CASES]
    dense += [("step_time_cases", case, step_time_cases.error, True) for case in step_time_cases.KNOWN_GAPS]
    modern = [("modern_cases", case, modern_cases.error, False) for case in modern_cases.CASES]
    modern += [("modern_cases", case, modern_cases.error, True) for case in modern_cases.KNOWN_GAPS]
    return dense + modern  # type: ignore[return-value]


def rows(include_gaps: bool = True) -> list[Row]:
    """Every row of both tables with its families and error (known gaps only when asked)."""
    out = []
    for table, case, error, gap in _cases():
        if gap and not include_gaps:
            continue
        key = case.key  # type: ignore[attr-defined]
        out.append(Row(key, table, FAMILIES[key], error(case)[0], gap))
    return out


def family_stats(all_rows: list[Row]) -> list[FamilyStats]:
    """Each family's tests and their mean and worst |error|."""
    stats = []
    for family in ORDER:
        members = tuple(row for row in all_rows if family in row.families and not row.known_gap)
        errors = [abs(row.error) for row in members]
        stats.append(FamilyStats(family, members, sum(errors) / len(errors), max(errors)))
    return stats


def gh100_tiles(loop_clock: bool = False, nccl_sms: bool = True) -> None:
    """Give the H100 SXM5 preset, as both tables load it, the H200's GEMM tiles, power model and NCCL channels (see the
    module docstring): the experiment of `--gh100-tiles`. `loop_clock`: every step's GEMMs at the clock of the sweep's
    loop of large GEMMs instead of the step's own from its power (`--gh100-loop-clock`); `nccl_sms`: False leaves out
    the SMs NCCL's kernels hold beside hidden collectives (`--gh100-no-nccl-sms`)."""
    from dataclasses import replace

    from parcalc.presets import load_gpu

    h200 = load_gpu("h200", ())
    assert h200.kernels is not None
    tiles = h200.kernels.gemm_tiles
    if loop_clock:  # no power model (max_clock 0): every step at training_clock, here the sweep's own clock
        tiles = tuple((dtype, replace(tiled, training_clock=tiled.clock, max_clock=0.0)) for dtype, tiled in tiles)

    def loader(key: str, overrides: object) -> object:
        gpu = load_gpu(key, overrides)  # type: ignore[arg-type]
        if key != "h100-sxm5" or gpu.kernels is None:
            return gpu
        return replace(gpu, kernels=replace(gpu.kernels, gemm_tiles=tiles),  # type: ignore[union-attr]
                       nccl_channels=h200.nccl_channels if nccl_sms else None)  # fmt: skip

    step_time_cases.load_gpu = loader  # type: ignore[assignment]
    modern_cases.load_gpu = loader  # type: ignore[assignment]


def gh100_loop_clock() -> None:
    """`--gh100-loop-clock`: the GEMM tiles of `--gh100-tiles` with every H100 step's GEMMs at the clock the H200's sweep
    held in its loop of large GEMMs at the 700 W limit (the tiles' `clock`, 1328.5 MHz: there the tile model gives the
    sweep's own 16384^3 rate, 718 TFLOP/s), not at the higher clock the power model gives a step whose Tensor Cores rest
    between kernels. A bound: no step's Tensor Core load exceeds a GEMM loop's, and the H100's own large GEMMs alone ran
    as fast as the H200's (pytorch/pytorch issue #100850, H100, cuBLAS 11.11.3.6: 720-772 TFLOP/s), so the GH100 die's
    GEMMs in training are at least this fast unless something other than the clock slows them."""
    gh100_tiles(loop_clock=True)


def gh100_no_nccl_sms() -> None:
    """`--gh100-no-nccl-sms`: `--gh100-tiles` without NCCL's channels holding SMs beside hidden collectives
    (parcalc.core.timing.sm_contention): what that mechanism moves on each H100 row."""
    gh100_tiles(nccl_sms=False)


# Sinha et al., 'Not All GPUs Are Created Equal: Characterizing Variability in Large-Scale, Accelerator-Rich Systems',
# SC'22 (arXiv:2208.11035), abstract: '8% (max 22%) average performance variation even though the GPU architecture and
# vendor SKU are identical within each cluster, with outliers up to 1.5X slower than the median GPU' (V100 and MI60
# clusters, power management and manufacturing variability; no H100 cluster measured)
STRAGGLER_SPREAD = 0.08


def stragglers() -> None:
    """`--stragglers`: a synchronous step waits for its slowest GPU; read as a bound, every row's GPU-bound work (t_compute:
    GEMMs, attention, memory-bound kernels) on a GPU STRAGGLER_SPREAD slower than the measured one (Sinha et al.'s average
    variation taken whole as the slowest GPU's deficit against the median GPU, which the single measured H200 stands for):
    the step grows by STRAGGLER_SPREAD x t_compute. An upper bound on what variability between GPUs moves, not a model:
    the slowest of N depends on N and on the spread's shape, which the abstract does not give."""

    def slower(error: Callable[[object], tuple[float, object]]) -> Callable[[object], tuple[float, object]]:
        def wrapped(case: object) -> tuple[float, object]:
            err, est = error(case)
            step, compute = est.step.value, est.compute.value  # type: ignore[attr-defined]
            return (1 + err) * step / (step + STRAGGLER_SPREAD * compute) - 1, est

        return wrapped

    step_time_cases.error = slower(step_time_cases.error)  # type: ignore[assignment]
    modern_cases.error = slower(modern_cases.error)  # type: ignore[assignment]


def experts_per_kernel() -> None:
    """`--experts-per-kernel`: each routed expert's GEMM its own kernel, one after another, where parcalc times the
    experts of a linear as one grouped kernel (their tiles in shared waves, one kernel overhead). Transformer Engine's
    GroupedLinear on Hopper runs one cuBLAS GEMM an expert, round-robin over 4 compute streams, unless
    NVTE_USE_CUTLASS_GROUPED_GEMM asks for CUTLASS's grouped kernel (NVIDIA/TransformerEngine @d0067d0d
    transformer_engine/common/gemm/cublaslt_gemm.cu nvte_multi_tensor_gemm and multi_stream_cublas_gemm;
    common/util/multi_stream.cpp: 4 streams). Taken with no overlap between the streams: an upper bound on what running
    the experts as separate kernels costs (each its own waves and kernel overhead)."""
    from parcalc.core.timing import compute

    grouped = compute.linear_passes

    def per_expert(key: str, m: int, k: int, n: int, e: float, spec: object, fp8: str = "", batch: int = 1,
                   norm_fed: bool = False) -> tuple[tuple[object, ...], tuple[object, ...]]:  # fmt: skip
        passes = grouped(key, m, k, n, e, spec, fp8, batch, norm_fed)  # type: ignore[arg-type]
        if batch <= 1:
            return passes
        alone = grouped(key, m, k, n, e, spec, fp8, 1, norm_fed)  # type: ignore[arg-type]
        return tuple(tuple(one._replace(time=one.time * batch, flops=one.flops * batch, bytes=one.bytes * batch)
                           if one.kind == "gemm" else kernel for one, kernel in zip(ones, kernels, strict=True))
                     for ones, kernels in zip(alone, passes, strict=True))  # type: ignore[return-value]  # fmt: skip

    compute.linear_passes = per_expert  # type: ignore[assignment]
    compute._layer_passes.cache_clear()


# The stacks of the modern runs that run Transformer Engine's attention (Megatron-Core, Megatron-Bridge, NeMo)
TE_STACKS = ("megatron-core", "megatron-bridge", "nemo")


def te_cudnn() -> None:
    """Give every modern run on an H100 whose stack runs Transformer Engine the `cudnn-fused` attention of the H100 preset
    (the H200's sustained cuDNN measurement, the same die; TE prefers cuDNN's FusedAttention on Hopper: TransformerEngine
    transformer_engine/pytorch/attention/dot_product_attention/utils.py @a0b36d0c): the experiment of `--te-cudnn`, not
    landed because the 2024 NeMo long-context runs (NeMo 24.03.01, an older cuDNN whose H100 rate was not found) come out
    28-59 % too fast with it."""
    from parcalc.core.timing.attention_kernels import with_attention_kernel

    original = modern_cases._gpu

    def gpu_of(case: object) -> object:
        gpu = original(case)  # type: ignore[arg-type]
        names = {row[0] for row in gpu.kernels.attention_kernels} if gpu.kernels is not None else set()
        if case.run.framework in TE_STACKS and "cudnn-fused" in names:  # type: ignore[attr-defined]
            return with_attention_kernel(gpu, "cudnn-fused")
        return gpu

    modern_cases._gpu = gpu_of  # type: ignore[assignment]


def run_attention() -> None:
    """Run each case at the attention kernel its stack ran (step_time_cases.Case.attention_kernel: llm-foundry's Triton
    FlashAttention on the MPT rows; parcalc.core.timing.attention_kernels): the experiment of `--run-attention`."""
    step_time_cases.RUN_ATTENTION_KERNELS = True


EXPERIMENTS = {"--gh100-tiles": gh100_tiles, "--gh100-loop-clock": gh100_loop_clock, "--gh100-no-nccl-sms": gh100_no_nccl_sms,
               "--stragglers": stragglers, "--experts-per-kernel": experts_per_kernel, "--run-attention": run_attention,
               "--te-cudnn": te_cudnn}


def _error_at_clock(module: object, case: object, clock: float) -> float:
    """A row's error with its GEMMs at `clock` (Hz) rather than the clock its step holds by the power model."""
    from dataclasses import replace

    from parcalc.core.fit import estimate

    model, config, training, cluster = module.inputs(case)  # type: ignore[attr-defined]
    at = estimate(model, config, training, replace(cluster, sm_clock=clock))
    if module is step_time_cases:
        return step_time_cases.predicted_over_published(case, at) - 1  # type: ignore[arg-type]
    return modern_cases.predicted_over_published(case, model, training, at) - 1  # type: ignore[arg-type]


def needed_clocks() -> list[tuple[str, float, float, float]]:
    """Under `--gh100-tiles` (and whatever experiments ran before), each H100 SXM5 row's (key, error, the SM clock its
    step holds by the power model, the SM clock at which its GEMMs would make the error 0), the latter by bisection on
    fit's clock (Cluster.sm_clock, which moves the tiles' main loops only): what a clock alone would have to be."""
    out = []
    for table, case, error, gap in _cases():
        module = step_time_cases if table == "step_time_cases" else modern_cases
        gpu = case.run.gpu if module is step_time_cases else case.gpu  # type: ignore[attr-defined]
        if gap or step_time_cases.GPU_PRESET.get(gpu, gpu) != "h100-sxm5":
            continue
        err, est = error(case)
        low, high = 1e8, 3e9
        for _ in range(40):
            mid = (low + high) / 2
            low, high = (low, mid) if _error_at_clock(module, case, mid) > 0 else (mid, high)
        clock = next((t.value for t in est.gemm.inputs if t.key == "f_SM"), 0.0) if est.gemm else 0.0  # type: ignore[attr-defined]
        out.append((case.key, err, clock, (low + high) / 2))  # type: ignore[attr-defined]
    return out


def main() -> None:
    if "--gh100-needed-clock" in sys.argv[1:]:
        for flag in sys.argv[1:]:
            if flag in EXPERIMENTS:
                EXPERIMENTS[flag]()
        for key, err, clock, needed in needed_clocks():
            print(f"   {key:60s} {err * 100:+6.1f} %  at {clock / 1e6:6.0f} MHz; error 0 at {needed / 1e6:6.0f} MHz")
        return
    asked = [flag for flag in sys.argv[1:] if flag in EXPERIMENTS]
    if asked:
        before = {row.key: row.error for row in rows()}
        for flag in asked:
            EXPERIMENTS[flag]()
        after = rows()
        label = " and ".join(flag.lstrip("-") for flag in asked)
        for stat in family_stats(after):
            old = family_stats([row._replace(error=before[row.key]) for row in after])[ORDER.index(stat.family)]
            print(f"{stat.family}: {len(stat.rows)} runs, mean / worst |error| {old.mean * 100:.1f} / {old.worst * 100:.1f} % "
                  f"-> {stat.mean * 100:.1f} / {stat.worst * 100:.1f} % with {label}")  # fmt: skip
            for row in after:
                if stat.family in row.families:
                    mark = "  (known gap, not counted)" if row.known_gap else ""
                    print(f"   {row.key:60s} {before[row.key] * 100:+6.1f} % -> {row.error * 100:+6.1f} %{mark}")
        tests = [row for row in after if not row.known_gap]
        mean_before = sum(abs(before[row.key]) for row in tests) / len(tests)
        mean_after = sum(abs(row.error) for row in tests) / len(tests)
        print(f"all {len(tests)} runs: mean |error| {mean_before * 100:.1f} -> {mean_after * 100:.1f} %")
        calibration, _ = step_time_cases.error(step_time_cases.CALIBRATION)
        share = "" if any(flag.startswith("--gh100") for flag in asked) else f" (the GEMM share re-derived from it: {step_time_cases.calibrate_h100_share():.4f})"
        print(f"calibration run {step_time_cases.CALIBRATION.key}: {calibration * 100:+.1f} %{share}")
        return
    all_rows = rows()
    for stat in family_stats(all_rows):
        print(f"{stat.family}: {len(stat.rows)} runs, mean |error| {stat.mean * 100:.1f} %, worst {stat.worst * 100:.1f} %")
        for row in all_rows:
            if stat.family in row.families:
                mark = "  (known gap, not counted)" if row.known_gap else ""
                print(f"   {row.key:60s} {row.error * 100:+6.1f} %{mark}")
    tests = [abs(row.error) for row in all_rows if not row.known_gap]
    print(f"all {len(tests)} runs: mean |error| {sum(tests) / len(tests) * 100:.1f} %, worst {max(tests) * 100:.1f} %")


if __name__ == "__main__":
    main()
