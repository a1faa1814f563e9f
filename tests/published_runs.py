"""Published Megatron-LM training runs, as plain data for `parcalc fit`'s sanity tests.

No tests live here and nothing from parcalc is imported: the rows are what two papers (and the
scripts their authors published) state, each with the place it is stated. A value a paper does not
state is None, with a comment saying so; nothing is filled in from memory. Values are as printed
(percentages as percent, throughput in teraFLOP/s or petaFLOP/s as the papers print them), not
converted to base units.

How the text was read. The papers' PDFs are not in the search corpus, but full-text Markdown
conversions of them are (found with find_string on sentences of the papers):
- Narayanan et al. 2021: a conversion of the SC21 version (ACM layout, acknowledgements thanking
  the reviewers). Table 1 was cross-checked against three further, independent transcriptions of
  the same table in the index; all ten rows agree digit for digit.
- Korthikanti et al. 2022: a conversion of arXiv:2205.05198. Its Table 5 MFU/HFU columns agree
  with the table in NVIDIA/Megatron-LM's README of 2022-2023 ("The following table shows both model
  (MFU) and hardware (HFU) FLOPs utilization ... 22B 41.5% 43.7%, 175B 51.4% 52.8%, 530B 56.0%
  57.0%, 1T 56.3% 57.0%"). Footnotes did not survive the conversion (see KORTHIKANTI_SETTING).
- The exact command-line flags of Narayanan's Table 1 runs come from NVIDIA/Megatron-LM
  examples/sc21/run_table_1.sh ("Table 1 showing weak-scaling throughput for GPT models ranging
  from 1 billion to 1 trillion parameters", examples/sc21/README.md) and the CONFIG.sh it sources
  (now examples/academic_paper_scripts/sc21/CONFIG.sh).
"""

from __future__ import annotations

from typing import NamedTuple

NARAYANAN_2021 = (
    "Narayanan et al. 2021, 'Efficient Large-Scale Language Model Training on GPU Clusters Using "
    "Megatron-LM' (SC21, arXiv:2104.04473)"
)
KORTHIKANTI_2022 = (
    "Korthikanti et al. 2022, 'Reducing Activation Recomputation in Large Transformer Models' "
    "(arXiv:2205.05198)"
)
# The version with the flag name of the paper's era; a later commit
# (79a3bb6bf2c85b748c46749dd0695e23310d4e16) renames the flag to --recompute-method uniform and
# keeps every number the same.
SC21_TABLE_1_SCRIPT = (
    "NVIDIA/Megatron-LM examples/sc21/run_table_1.sh (commit cf547dea839f709ec2f147da0679d663da3c20da)"
)
SC21_CONFIG_SCRIPT = (
    "NVIDIA/Megatron-LM examples/academic_paper_scripts/sc21/CONFIG.sh "
    "(commit 1916693cfe5df54774b0f2c0ea059e6dc1d7a0aa)"
)


class Stated(NamedTuple):
    """One setting of a paper: its value as stated and where it is stated."""

    value: object
    source: str


# --------------------------------------------------------------------------------------------
# 1. Narayanan et al. 2021, Table 1: "Weak-scaling throughput for GPT models ranging from 1
#    billion to 1 trillion parameters."
# --------------------------------------------------------------------------------------------


class NarayananRow(NamedTuple):
    """One row of Narayanan et al. 2021 Table 1, plus the two flags of its run script.

    The first eleven fields are the paper's columns, in order. `micro_batch` and
    `layers_per_virtual_stage` are NOT in the paper: they are the `--micro-batch-size` and
    `--num-layers-per-virtual-pipeline-stage` flags of run_table_1.sh for this row
    (`script_source`); `layers_per_virtual_stage` is None where the script does not pass the flag
    (non-interleaved 1F1B schedule). The data-parallel size is not a column; it is
    gpus / (tp * pp).
    """

    params_billion: float
    heads: int
    hidden: int
    layers: int
    tp: int
    pp: int
    gpus: int
    batch: int  # global batch size, sequences
    tflops_per_gpu: float  # "Achieved teraFLOP/s per GPU" (counts recomputation, eq. 3)
    percent_of_peak: float  # "Percentage of theoretical peak FLOP/s" (peak 312 teraFLOP/s, sec. 5)
    aggregate_pflops: float  # "Achieved aggregate petaFLOP/s"
    micro_batch: int  # from the script, not the paper
    layers_per_virtual_stage: int | None  # from the script, not the paper
    source: str
    script_source: str


def _n_row(
    label: str,
    params_billion: float,
    heads: int,
    hidden: int,
    layers: int,
    tp: int,
    pp: int,
    gpus: int,
    batch: int,
    tflops_per_gpu: float,
    percent_of_peak: float,
    aggregate_pflops: float,
    micro_batch: int,
    layers_per_virtual_stage: int | None,
) -> NarayananRow:
    return NarayananRow(
        params_billion,
        heads,
        hidden,
        layers,
        tp,
        pp,
        gpus,
        batch,
        tflops_per_gpu,
        percent_of_peak,
        aggregate_pflops,
        micro_batch,
        layers_per_virtual_stage,
        source=f"{NARAYANAN_2021}, Table 1, row {params_billion} billion parameters",
        script_source=(
            f"{SC21_TABLE_1_SCRIPT}, MODEL_SIZE={label} "
            "(MBS; --num-layers-per-virtual-pipeline-stage in MEGATRON_EXTRA_PARAMS)"
        ),
    )


# Columns: label in the script, then the paper's eleven columns, then the script's MBS and
# --num-layers-per-virtual-pipeline-stage. The script's TP, PP, GBS, NLS, HS, NAH and
# NNODES * 8 GPUs agree with the paper's columns on every row.
NARAYANAN_TABLE_1: tuple[NarayananRow, ...] = (
    _n_row("1.7B", 1.7, 24, 2304, 24, 1, 1, 32, 512, 137, 44, 4.4, 16, None),
    _n_row("3.6B", 3.6, 32, 3072, 30, 2, 1, 64, 512, 138, 44, 8.8, 16, None),
    _n_row("7.5B", 7.5, 32, 4096, 36, 4, 1, 128, 512, 142, 46, 18.2, 16, None),
    _n_row("18B", 18.4, 48, 6144, 40, 8, 1, 256, 1024, 135, 43, 34.6, 8, None),
    _n_row("39B", 39.1, 64, 8192, 48, 8, 2, 512, 1536, 138, 44, 70.8, 4, None),
    # 60 layers / pp 4 = 15 layers per GPU, 5 per virtual stage: 3 model chunks per GPU.
    _n_row("76B", 76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140, 45, 143.8, 2, 5),
    # 80 / 8 = 10 layers per GPU, 5 per virtual stage: 2 chunks.
    _n_row("145B", 145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148, 47, 227.1, 2, 5),
    # 96 / 16 = 6 layers per GPU, 3 per virtual stage: 2 chunks.
    _n_row("310B", 310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155, 50, 297.4, 1, 3),
    # 105 / 35 = 3 layers per GPU, 1 per virtual stage: 3 chunks.
    _n_row("530B", 529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163, 52, 410.2, 1, 1),
    # 128 / 64 = 2 layers per GPU; the script passes no virtual-stage flag for 1T.
    _n_row("1T", 1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163, 52, 502.0, 1, None),
)
# Consistency notes (arithmetic on the table, not published numbers): percent_of_peak is
# tflops_per_gpu / 312 rounded (137/312 = 43.9% -> 44%; 163/312 = 52.2% -> 52%);
# aggregate_pflops is close to tflops_per_gpu * gpus / 1000 but not equal, because the per-GPU
# column is rounded (1T: 163 * 3072 / 1000 = 500.7 against 502.0 printed; 502.0 / 3072 = 163.4).


NARAYANAN_SETTING: dict[str, Stated] = {
    "seq_len": Stated(2048, f"{NARAYANAN_2021}, sec. 5.1: 'All models use ... a sequence length (s) of 2048'"),
    "vocab": Stated(
        51200,
        f"{NARAYANAN_2021}, sec. 5.1: 'All models use a vocabulary size (denoted by V) of 51,200 "
        "(multiple of 1024)'",
        # The run script passes the GPT-2 BPE vocab file rather than a size; Megatron pads the
        # tokenizer's vocabulary to a multiple of make_vocab_size_divisible_by * TP
        # (megatron tokenizer _vocab_size_with_padding), so for TP < 8 the run's padded vocabulary
        # may differ from 51,200. The tests should use the paper's 51,200.
    ),
    "gpu": Stated(
        "A100 80GB (DGX A100 nodes, 8 GPUs per node, NVLink + NVSwitch; 8 Mellanox 200 Gb/s HDR "
        "InfiniBand HCAs per node for application communication; Selene)",
        f"{NARAYANAN_2021}, sec. 5: 'Each cluster node has 8 NVIDIA 80-GB A100 GPUs, connected to "
        "each other by NVLink and NVSwitch. Each node has eight NVIDIA Mellanox 200Gbps HDR "
        "Infiniband HCAs for application communication'",
    ),
    "peak_flops_per_gpu": Stated(
        312e12,
        f"{NARAYANAN_2021}, sec. 5: 'The peak device throughput of an A100 GPU with 16-bit precision "
        "is 312 teraFLOP/s'",
    ),
    "precision": Stated(
        "mixed precision (fp16; loss scale 8192 in the script)",
        f"{NARAYANAN_2021}, sec. 5: 'All of our results are run with mixed precision'; "
        f"{SC21_CONFIG_SCRIPT}: --fp16 --loss-scale 8192",
    ),
    "recompute": Stated(
        "full activation recomputation (an extra forward pass before the backward pass)",
        f"{NARAYANAN_2021}, sec. 5.1: 'equation (3) assumes activation recomputation and takes "
        "into account the floating-point operations associated with the extra forward pass'; "
        "Appendix: 'we are using activation recomputation, which requires an additional forward "
        "pass before the backward pass'",
    ),
    "recompute_granularity": Stated(
        "every transformer layer (script); the paper states no per-row granularity",
        # The paper only says (sec. 3.5) 'For most cases, checkpointing every 1 or 2 transformer
        # layers is optimal'. The script passes --activations-checkpoint-method uniform on every
        # row and no --activations-checkpoint-num-layers, whose default is 1 (Megatron-LM
        # megatron/arguments.py, --recompute-num-layers default=1 in the renamed version).
        f"{NARAYANAN_2021}, sec. 3.5; {SC21_TABLE_1_SCRIPT}: '--activations-checkpoint-method uniform' on every row",
    ),
    "schedule": Stated(
        "interleaved 1F1B with the scatter/gather optimisation (paper, all rows); the script "
        "interleaves only the 76B, 145B, 310B and 530B rows (see layers_per_virtual_stage)",
        f"{NARAYANAN_2021}, sec. 5.1: 'we use the interleaved pipeline schedule with the "
        "scatter/gather optimization enabled'; " + SC21_TABLE_1_SCRIPT,
    ),
    "micro_batch": Stated(
        None,
        # Not stated in the paper for Table 1 (sec. 5.5 only says the best micro-batch size is
        # model-dependent). The per-row values in NarayananRow.micro_batch come from the script.
        f"{NARAYANAN_2021}: not stated for Table 1; per-row values from {SC21_TABLE_1_SCRIPT}",
    ),
    "flops_formula": Stated(
        "F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h))  FLOPs per iteration, counting the "
        "recomputation forward pass (i.e. 4 x forward GEMM FLOPs per layer, 3 x for the logits)",
        f"{NARAYANAN_2021}, sec. 5.1 eq. (3) and Appendix 'Floating-point operations'",
        # In Korthikanti et al.'s terms these are hardware FLOPs of a full-recompute run, so Table 1's
        # percent_of_peak is closer to an HFU than to an MFU.
    ),
    "params_formula": Stated(
        "P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h))",
        f"{NARAYANAN_2021}, sec. 5.1 eq. (2)",
    ),
    "throughput_measurement": Stated(
        "end-to-end: includes data loading, optimizer steps, communication and logging",
        f"{NARAYANAN_2021}, sec. 5.1: 'throughput is measured for end-to-end training, i.e., includes "
        "all operations including data loading, optimizer steps, communication, and logging'",
    ),
    "optimizer": Stated(
        None,
        # The paper does not name the optimizer for Table 1; the script's CONFIG.sh passes no
        # --optimizer flag (Megatron's default then applies) and --DDP-impl torch (1.7B-18B) or
        # local (39B-1T).
        f"{NARAYANAN_2021}: not stated",
    ),
    "tied_embeddings": Stated(
        None,
        # Not stated in Narayanan et al.; Korthikanti et al. sec. 3 assume shared embedding and
        # output weights for the same model family.
        f"{NARAYANAN_2021}: not stated",
    ),
}


class NarayananPtdRow(NamedTuple):
    """A PTD-parallelism row of Narayanan et al. 2021 Table 2 (comparison with ZeRO-3).

    The paper gives only the model-parallel size t * p (96 and 280), not its split into t and p.
    """

    params_billion: float
    model_parallel_size: int
    batch: int
    gpus: int
    micro_batch: int
    tflops_per_gpu: float
    training_days_300b_tokens: float
    source: str


_T2 = f"{NARAYANAN_2021}, Table 2, 'PTD Parallelism' rows"
NARAYANAN_TABLE_2_PTD: tuple[NarayananPtdRow, ...] = (
    NarayananPtdRow(174.6, 96, 1536, 384, 1, 153, 84, _T2),
    NarayananPtdRow(174.6, 96, 1536, 768, 1, 149, 43, _T2),
    NarayananPtdRow(174.6, 96, 1536, 1536, 1, 141, 23, _T2),
    NarayananPtdRow(529.6, 280, 2240, 560, 1, 171, 156, _T2),
    NarayananPtdRow(529.6, 280, 2240, 1120, 1, 167, 80, _T2),
    NarayananPtdRow(529.6, 280, 2240, 2240, 1, 159, 42, _T2),
)

# Sec. 5.1, training-time estimate: GPT-3 175B 'On n=1024 A100 GPUs using batch size 1536, we
# achieve X=140 teraFLOP/s per GPU'. The tensor/pipeline split of that run is not stated.
NARAYANAN_GPT3_1024_GPUS = {
    "params_billion": Stated(175, f"{NARAYANAN_2021}, sec. 5.1, 'Training Time Estimates'"),
    "gpus": Stated(1024, f"{NARAYANAN_2021}, sec. 5.1"),
    "batch": Stated(1536, f"{NARAYANAN_2021}, sec. 5.1"),
    "tflops_per_gpu": Stated(140, f"{NARAYANAN_2021}, sec. 5.1"),
    "tp": Stated(None, f"{NARAYANAN_2021}: not stated"),
    "pp": Stated(None, f"{NARAYANAN_2021}: not stated"),
    "micro_batch": Stated(None, f"{NARAYANAN_2021}: not stated"),
}


# --------------------------------------------------------------------------------------------
# 2. Korthikanti et al. 2022: Table 3 (model configurations) and Table 5 (end-to-end results).
# --------------------------------------------------------------------------------------------


class KorthikantiConfig(NamedTuple):
    """One row of Korthikanti et al. 2022 Table 3: 'Model configurations used during evaluation.'

    No data parallelism: gpus = tp * pp. `interleaved_stages` is m, the number of interleaving
    stages (model chunks per GPU), stated only for 175B and 530B (sec. 6); None where the paper
    does not say (22B has pp = 1; for 1T the paper names no interleaving).
    """

    label: str  # the paper's "Model Size" cell
    params_billion: float  # the label read as a number (22, 175, 530, 1T = 1000)
    heads: int
    hidden: int
    layers: int
    tp: int
    pp: int
    gpus: int
    global_batch: int
    micro_batch: int
    seq_len: int  # sec. 6: 'For all the cases, sequence length is set to s = 2048'
    vocab: int  # sec. 6: 'vocabulary size is set to v = 51200'
    interleaved_stages: int | None
    source: str


def _k_config(
    label: str,
    params_billion: float,
    heads: int,
    hidden: int,
    layers: int,
    tp: int,
    pp: int,
    gpus: int,
    global_batch: int,
    micro_batch: int,
    interleaved_stages: int | None,
) -> KorthikantiConfig:
    return KorthikantiConfig(
        label,
        params_billion,
        heads,
        hidden,
        layers,
        tp,
        pp,
        gpus,
        global_batch,
        micro_batch,
        2048,
        51200,
        interleaved_stages,
        source=(
            f"{KORTHIKANTI_2022}, Table 3, row {label}; sec. 6 (s = 2048, v = 51200; "
            "'We use the interleaving schedule with three interleaving stages (m = 3) for the 175B "
            "and 530B models')"
        ),
    )


KORTHIKANTI_CONFIGS: tuple[KorthikantiConfig, ...] = (
    _k_config("22B", 22, 64, 6144, 48, 8, 1, 8, 4, 4, None),
    _k_config("175B (GPT-3)", 175, 96, 12288, 96, 8, 8, 64, 64, 1, 3),
    _k_config("530B (MT-NLG)", 530, 128, 20480, 105, 8, 35, 280, 280, 1, 3),
    _k_config("1T", 1000, 160, 25600, 128, 8, 64, 512, 512, 1, None),
)


class KorthikantiResult(NamedTuple):
    """End-to-end result of one configuration: full recomputation vs 'present work'.

    'Full recompute' is the baseline of sec. 6.3: 'performing full recomputation without sequence
    parallelism'. 'Present work' is sequence parallelism + selective activation recomputation.
    MFU/HFU are in percent, against the A100's theoretical peak (see KORTHIKANTI_SETTING). None
    marks a value the paper does not state.
    """

    label: str
    gpus: int
    data_parallel: int
    global_batch: int
    full_recompute_iter_s: float | None
    present_work_iter_s: float | None
    throughput_increase_percent: float | None
    mfu_full_recompute_percent: float | None
    hfu_full_recompute_percent: float | None
    mfu_present_work_percent: float | None
    hfu_present_work_percent: float | None
    source: str


def _t5(row: str) -> str:
    return f"{KORTHIKANTI_2022}, Table 5 ('End-to-end iteration time'), row {row}; configuration in Table 3"


KORTHIKANTI_RESULTS: tuple[KorthikantiResult, ...] = (
    # Table 5 gives MFU and HFU for the present work only; for full recomputation it gives only
    # the iteration time, so those MFU/HFU cells are None (not stated).
    KorthikantiResult("22B", 8, 1, 4, 1.42, 1.10, 29.0, None, None, 41.5, 43.7, _t5("22B")),
    KorthikantiResult("175B (GPT-3)", 64, 1, 64, 18.13, 13.75, 31.8, None, None, 51.4, 52.8, _t5("175B")),
    KorthikantiResult("530B (MT-NLG)", 280, 1, 280, 49.05, 37.83, 29.7, None, None, 56.0, 57.0, _t5("530B")),
    KorthikantiResult("1T", 512, 1, 512, 94.42, 71.49, 32.1, None, None, 56.3, 57.0, _t5("1T")),
    # Sec. 6.3: 'if we scale the 530B model to 8-way data parallellism (2240 GPUs) while keeping
    # batch size per model instance constant - i.e., the batch size is also multiplied by the data
    # parallel size - the time per iteration increases slightly from 37.83 seconds to 39.15
    # seconds. This results in an MFU drop from 56.0% to 54.2%'. The global batch 280 * 8 = 2240
    # follows from that sentence; the paper does not print the number. Abstract: 'when training a
    # 530B parameter GPT-3 style model on 2240 NVIDIA A100 GPUs, we achieve a Model Flops
    # Utilization of 54.2%, which is 29% faster than the 42.1% we achieve using recomputation'.
    # The full-recompute iteration time and both HFUs of this run are not stated.
    KorthikantiResult(
        "530B (MT-NLG)",
        2240,
        8,
        2240,
        None,
        39.15,
        None,
        42.1,
        None,
        54.2,
        None,
        f"{KORTHIKANTI_2022}, sec. 6.3 (39.15 s, MFU 54.2%, 8-way data parallelism) and Abstract "
        "(42.1% with recomputation)",
    ),
)
# Arithmetic on the table (derived here, NOT published; for choosing test bands only): with the
# paper's model-FLOPs formula (eq. 7) and 312e12 FLOP/s per GPU, the present-work MFUs of Table 5
# are reproduced to within 0.4% relative (implied peak 311.8-313.1 TFLOP/s), and the
# full-recompute iteration times give MFUs of about 32.3% (22B), 39.0% (175B), 43.2% (530B) and
# 42.6% (1T).


# Appendix C: 'Microbatch level activation recomputation increases the model FLOPs utilization of
# the 175B and 530B parameter models to 52.3% (+0.7%) and 56.4% (+0.4%), respectively, compared
# to the baseline with both sequence parallelism and selective activation recomputation.'
# Note the paper's own inconsistency for 175B: Table 5 says 51.4%, and 51.4 + 0.7 = 52.1, not 52.3.
KORTHIKANTI_MICROBATCH_LEVEL_RECOMPUTE_MFU_PERCENT: dict[str, Stated] = {
    "175B (GPT-3)": Stated(52.3, f"{KORTHIKANTI_2022}, Appendix C"),
    "530B (MT-NLG)": Stated(56.4, f"{KORTHIKANTI_2022}, Appendix C"),
}


class KorthikantiLayerTime(NamedTuple):
    """One row of Korthikanti et al. 2022 Table 4: forward/backward time of ONE transformer layer
    of the 22B model (milliseconds, as printed)."""

    experiment: str
    forward_ms: float
    backward_ms: float
    combined_ms: float
    overhead_percent: float | None  # '-' in the paper for the baseline row
    source: str


_T4 = f"{KORTHIKANTI_2022}, Table 4 (22B model, one transformer layer)"
KORTHIKANTI_TABLE_4: tuple[KorthikantiLayerTime, ...] = (
    KorthikantiLayerTime("Baseline no recompute", 7.7, 11.9, 19.6, None, _T4),
    KorthikantiLayerTime("Sequence Parallelism", 7.2, 11.8, 19.0, -3, _T4),
    KorthikantiLayerTime("Baseline with recompute", 7.7, 19.5, 27.2, 39, _T4),
    KorthikantiLayerTime("Selective Recompute", 7.7, 13.2, 20.9, 7, _T4),
    KorthikantiLayerTime("Selective + Sequence", 7.2, 13.1, 20.3, 4, _T4),
)


KORTHIKANTI_SETTING: dict[str, Stated] = {
    "seq_len": Stated(2048, f"{KORTHIKANTI_2022}, sec. 6: 'For all the cases, sequence length is set to s = 2048'"),
    "vocab": Stated(51200, f"{KORTHIKANTI_2022}, sec. 6: 'vocabulary size is set to v = 51200'"),
    "gpu": Stated(
        "A100 80GB (8 per node, NVLink + NVSwitch; 8 Mellanox 200 Gb/s HDR InfiniBand HCAs per node; Selene)",
        f"{KORTHIKANTI_2022}, sec. 6",
    ),
    "precision": Stated(
        "mixed precision", f"{KORTHIKANTI_2022}, sec. 6: 'All of our results are run with mixed precision'"
    ),
    "data_parallel": Stated(
        1,
        f"{KORTHIKANTI_2022}, Table 3 caption and sec. 6: 'no data parallelism is used in our evaluations' "
        "(except the 2240-GPU 530B run of sec. 6.3)",
    ),
    "tensor_parallel": Stated(
        8, f"{KORTHIKANTI_2022}, sec. 6: 'for all these models, the tenor parallel size is set to 8' (sic)"
    ),
    "tied_embeddings": Stated(
        True, f"{KORTHIKANTI_2022}, sec. 3: 'We assume that word embedding and output layer weights are shared'"
    ),
    "recompute_baseline": Stated(
        "full activation recomputation (checkpoint at transformer-layer boundaries), no sequence parallelism",
        f"{KORTHIKANTI_2022}, sec. 1 ('full activation recomputation') and sec. 6.3",
    ),
    "recompute_present_work": Stated(
        "sequence parallelism + selective activation recomputation (recompute QK^T, softmax, "
        "softmax dropout and attention over V)",
        f"{KORTHIKANTI_2022}, sec. 5 and Figure 3; sec. 6.3",
    ),
    "output_tensor_deallocation": Stated(
        True,
        f"{KORTHIKANTI_2022}, Appendix B: 'in all other results shown in this paper, this "
        "output-tensor-deallocation optimization is used'",
    ),
    "model_flops_formula": Stated(
        "72 B L s h^2 (1 + s/(6h) + v/(12 h L))  per iteration (forward + backward, no recomputation)",
        f"{KORTHIKANTI_2022}, Appendix A eq. (7)",
    ),
    "hardware_flops_formula_selective": Stated(
        "72 B L s h^2 (1 + s/(3h) + v/(12 h L))  per iteration with selective recomputation",
        f"{KORTHIKANTI_2022}, Appendix A eq. (8); ratio to model FLOPs approx. 1 + s/(6h), eq. (9)",
    ),
    "mfu_definition": Stated(
        "model (hardware) FLOPs per iteration / iteration time / accelerator theoretical peak FLOP/s",
        f"{KORTHIKANTI_2022}, sec. 6.3, following Chowdhery et al. (PaLM)",
    ),
    "peak_flops_per_gpu": Stated(
        None,
        # The peak is given in footnote 5 of sec. 6.3, which our copy of the text lost. Not filled
        # in: the arithmetic note under KORTHIKANTI_RESULTS shows Table 5 is consistent with the
        # A100's 312 TFLOP/s 16-bit peak that Narayanan et al. (same cluster) state in sec. 5.
        f"{KORTHIKANTI_2022}, sec. 6.3 footnote 5: text not available",
    ),
    "activation_bytes_per_layer": Stated(
        {
            "no parallelism": "s b h (34 + 5 a s / h)",
            "tensor parallel (baseline)": "s b h (10 + 24/t + 5 a s / (h t))",
            "tensor + sequence parallel": "s b h (34/t + 5 a s / (h t))",
            "tensor parallel + selective recompute": "s b h (10 + 24/t)",
            "tensor + sequence parallel + selective recompute": "s b h (34/t)",
            "full activation recomputation": "s b h (2)",
        },
        f"{KORTHIKANTI_2022}, Table 2 (bytes; 16-bit activations, 1-byte dropout masks, sec. 4)",
    ),
    "first_stage_activation_layers": Stated(
        "1F1B: the first pipeline stage holds L layers' worth of activations (p microbatches x L/p "
        "layers); interleaved: multiply by (1 + (p - 1)/(p m))",
        f"{KORTHIKANTI_2022}, sec. 4.2.3 eq. (5)",
    ),
    "recompute_overhead": Stated(
        "per-layer overhead for 530B and 1T: 2% (selective + sequence) vs 36% (full recompute)",
        f"{KORTHIKANTI_2022}, sec. 6.2 (Figure 8)",
    ),
}
