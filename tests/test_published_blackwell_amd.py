"""parcalc's fit on published Blackwell runs (tests/published_blackwell_amd_runs.py): held-out, reported only.

Each row is entered as its source states it (Megatron-Bridge recipes: distributed optimizer unless FSDP is
printed, sequence parallelism with TP, no recomputation, force-balanced MoE routing with the alltoall
dispatcher, Megatron's rank order, the GPU preset's node) and the error of predicted over published tokens per
second per GPU is printed (`python tests/test_published_blackwell_amd.py` prints the table). Nothing is
asserted about the size of the errors: the issue holds these runs back to check the model, so no constant
may be tuned on them. The test asserts only that every row runs (or is refused with a one-line reason that
the table prints), and that the table covers both B200 and GB200.

DGX-H100: Megatron-Bridge's dense Llama 3 8B / 70B / 3.1 405B in FP8 (current scaling) of the 25.09, 25.11 and 26.04.01
containers, their recipes' TP communication overlap entered and cuDNN's fused attention, which Transformer Engine runs on
Hopper (the data module quotes the recipe and TE's backend choice).

AMD: two MI355X rows (Primus, Qwen3-30B-A3B FP8 on 8 GPUs, a baseline and a kernel-tuned run) and four MI325X rows
(Llama 3.1 8B FP8 on 8 and 64 GPUs, 70B FP8 and BF16 under FSDP on 64, AMD's published runs as Primus quotes them; their
global batch is not printed and is taken from Primus's recipes); no MI300X training run with its whole layout was found
(the data module says where it looked).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))  # this checkout's parcalc, run as a script from anywhere

from published_blackwell_amd_runs import RUNS, BlackwellAmdRun

from parcalc.core.choices import Optimizer, Precision, Recompute, Schedule
from parcalc.core.fit import Cluster, Config, Training, estimate
from parcalc.core.timing.attention_kernels import with_attention_kernel
from parcalc.errors import InputError
from parcalc.presets import load_framework, load_gpu, load_link, load_model


def fit_inputs(run: BlackwellAmdRun) -> tuple:
    model = load_model(run.model, ())
    gpu = load_gpu(run.gpu, ())
    if run.attention_kernel:  # the kernel the run's stack ran (parcalc.core.timing.attention_kernels)
        gpu = with_attention_kernel(gpu, run.attention_kernel)
    assert gpu.node is not None
    precision = {"bf16": Precision.MIXED_BF16, "nvfp4": Precision.FP4}.get(run.precision, Precision.FP8)
    dtype = precision.gemm_dtype
    dp = run.gpus // (run.tp * run.pp * run.cp)
    chunks = run.vp
    slots = model.layers + 2  # Megatron's account_for_embedding/loss_in_pipeline_split: embedding and loss as layer slots
    in_split = model.layers % (run.pp * chunks) != 0 and slots % (run.pp * chunks) == 0
    config = Config.of(run.tp, run.pp, dp, run.micro_batch, Recompute.FULL if run.recompute == "full" else Recompute.NONE, 3 if run.fsdp else 1, run.tp > 1,
                    Schedule.INTERLEAVED if chunks > 1 else Schedule.ONE_F_ONE_B, chunks, None, None, in_split, in_split,
                    cp=run.cp, ep=run.ep, etp=1 if run.ep > 1 else None, moe_dispatcher=run.dispatcher,
                    moe_routing=run.routing)  # fmt: skip
    training = Training(run.global_batch, run.seq_len, precision, Optimizer.ADAMW, flash_attention=True, dropout=False, causal=True,
                        fp8_recipe=run.fp8_recipe or {"fp8-cs": "current", "mxfp8": "mxfp8"}.get(run.precision, "delayed"),
                        expert_activation=run.expert_activation)  # fmt: skip
    peak = gpu.dtypes[dtype].dense_peak
    attention = gpu.dtypes["bf16"].dense_peak
    assert peak is not None and attention is not None
    # A job smaller than the NVLink domain (8 or 64 GPUs of a 72-GPU NVL72 rack) has all its GPUs in one domain:
    # its slice of the rack is the node, with that slice's network cards (one per GPU).
    per_node = min(gpu.node.gpus, run.gpus)
    cluster = Cluster(gpus=run.gpus, gpus_per_node=per_node, nics_per_node=gpu.node.nics_for(per_node), peak=peak.value, capacity=gpu.memory_capacity.value,
                      intra=load_link(gpu.node.intra_link, ()), inter=load_link(gpu.node.inter_link, ()), gpu=gpu, dtype=dtype,
                      framework=load_framework("megatron", ()), attention_peak=attention.value,
                      tp_comm_overlap=True if run.tp_comm_overlap else None)  # fmt: skip
    return model, config, training, cluster.for_training(training)  # MXFP8 rows: the block-scaled GEMM share, as fit builds it


def error(run: BlackwellAmdRun) -> tuple[float | None, str]:
    """(predicted / published tokens per second per GPU - 1, or None when parcalc refuses the row; a note)."""
    try:
        est = estimate(*fit_inputs(run))
    except InputError as refused:
        return None, f"refused: {str(refused)[:150]}"
    tokens = run.global_batch * run.seq_len / (est.step.value * run.gpus)
    return tokens / run.tokens_per_s_per_gpu - 1, f"{tokens:,.0f} predicted vs {run.tokens_per_s_per_gpu:,.0f} tok/s/GPU"


def with_gemm_share_scaled(cluster: Cluster, factor: float) -> Cluster:
    """The cluster with its GPU's training GEMM shares (kernels.matmul, every dtype, and kernels.matmul_mxfp8) times
    `factor`: a probe of what the GEMMs would have to sustain, for the parts table only (never a model input)."""
    from dataclasses import replace

    gpu = cluster.gpu
    assert gpu is not None and gpu.kernels is not None
    matmul = tuple((dtype, replace(share, value=share.value * factor)) for dtype, share in gpu.kernels.matmul)
    mx = gpu.kernels.matmul_mxfp8
    mx = replace(mx, value=mx.value * factor) if mx is not None else None
    return replace(cluster, gpu=replace(gpu, kernels=replace(gpu.kernels, matmul=matmul, matmul_mxfp8=mx)))


def gemm_share_to_match(run: BlackwellAmdRun) -> float:
    """The factor on the GPU's training GEMM share at which fit gives the published step, every other part as modelled
    (bisection: the step falls as the share rises)."""
    model, config, training, cluster = fit_inputs(run)
    published = run.global_batch * run.seq_len / (run.tokens_per_s_per_gpu * run.gpus)
    low, high = 0.3, 3.0
    for _ in range(30):
        mid = (low * high) ** 0.5
        if estimate(model, config, training, with_gemm_share_scaled(cluster, mid)).step.value > published:
            low = mid
        else:
            high = mid
    return (low * high) ** 0.5


PART_KEYS = ("t_gemm", "t_attention", "t_memory_bound", "t_tp", "t_cp", "t_bubble", "t_pp", "t_dp", "t_optimizer")


def parts_table(keys: tuple[str, ...] = ()) -> str:
    """Each dense row's step by kind of work (fit's t_gemm, t_attention, ... as shares of the published step), and the
    factor on its GPU's training GEMM share that would close the row with the other parts as modelled: where one factor
    closes rows of different layouts, a GEMM-rate mechanism would; where it varies, another part differs."""
    head = " ".join(f"{k[2:]:>8}" for k in PART_KEYS)
    lines = [f"{'run (parts in % of the published step)':<45} {head} {'pred/pub':>8} {'e_mm':>6} {'x e_mm':>7}"]
    for run in RUNS:
        if run.ep > 1 or (keys and not any(k in run.key for k in keys)):
            continue
        model, config, training, cluster = fit_inputs(run)
        est = estimate(model, config, training, cluster)
        published = run.global_batch * run.seq_len / (run.tokens_per_s_per_gpu * run.gpus)
        found = {d.key: d.value for d in est.kinds}
        cells = " ".join(f"{found.get(k, 0.0) / published:8.1%}" for k in PART_KEYS)
        assert cluster.gpu is not None and cluster.gpu.kernels is not None
        share = cluster.spec.matmul  # MXFP8 rows: the block-scaled share (kernels.matmul_mxfp8)
        lines.append(f"{run.key:<45} {cells} {est.step.value / published:8.3f} {share.value:6.4f} "
                     f"{gemm_share_to_match(run):7.3f}")  # fmt: skip
    return "\n".join(lines)


def table() -> str:
    lines = [f"{'run':<45} {'error':>8}  note"]
    errors = []
    for run in RUNS:
        value, note = error(run)
        if value is not None:
            errors.append(value)
        lines.append(f"{run.key:<45} {'' if value is None else f'{value:+.1%}':>8}  {note}")
    if errors:
        lines.append(f"{len(errors)} of {len(RUNS)} rows timed: mean |error| {sum(abs(e) for e in errors) / len(errors):.1%}, "
                     f"worst {max(errors, key=abs):+.1%}")  # fmt: skip
    lines += [summary(label, rows) for label, rows in BLACKWELL_GROUPS]
    return "\n".join(lines)


# issue 31's check is over the published Blackwell rows (B200 and GB200); the dense ones apart from the MoE (Qwen3) rows
BLACKWELL_GROUPS = (
    ("Blackwell, every row", tuple(r for r in RUNS if r.gpu in ("b200", "gb200"))),
    ("Blackwell, dense rows", tuple(r for r in RUNS if r.gpu in ("b200", "gb200") and r.ep == 1)),
)


def summary(label: str, rows: tuple[BlackwellAmdRun, ...]) -> str:
    timed = [e for e in (error(run)[0] for run in rows) if e is not None]
    if not timed:
        return f"{label}: no row timed"
    return f"{label}: {len(timed)} rows, mean |error| {sum(abs(e) for e in timed) / len(timed):.1%}, worst {max(timed, key=abs):+.1%}"


def test_every_row_runs_and_the_table_is_reported() -> None:
    text = table()
    print("\n" + text)
    assert len(text.splitlines()) >= len(RUNS) + 1
    assert {run.gpu for run in RUNS} >= {"b200", "gb200", "h100-sxm5", "mi355x", "mi325x"}


def test_each_row_is_what_its_source_printed() -> None:
    """The rows' layouts multiply out to their GPU counts and the quoted row carries the published rate."""
    for run in RUNS:
        assert run.gpus % (run.tp * run.pp * run.cp) == 0, run.key
        assert f"{run.tokens_per_s_per_gpu:.0f}" in run.quote.replace(",", ""), run.key
        assert str(run.gpus) in run.quote, run.key
        assert str(run.global_batch) in run.quote if not run.global_batch_assumed else f"GBS {run.global_batch} assumed" in run.quote, run.key


if __name__ == "__main__":
    # `python tests/test_published_blackwell_amd.py` prints the error table; `... --parts [KEY ...]` each dense row's parts
    print(parts_table(tuple(sys.argv[2:])) if sys.argv[1:2] == ["--parts"] else table())
