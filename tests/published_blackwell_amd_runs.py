"""Published training throughputs on Blackwell (B200, GB200 NVL72), DGX-H100 (FP8 Llama) and AMD Instinct (issue 31's held-out checks).

Plain data, no parcalc import and no assertions (tests/test_published_blackwell_amd.py runs parcalc's fit on
each row and prints the error table). These runs are held-out checks: no constant of parcalc was or may be
set from them.

Source and how it was read: NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md, read with git from
the snapshot at commit 067f987df03b8355b03192d88d70f1709fedf51a (2026-08-22). Sections '## 25.11 NeMo Container'
('#### System: DGX-GB200' and '#### System: DGX-B200' tables, columns 'Model | #-GPUs | Precision | GBS | MBS |
Sequence Length | FSDP | TP | PP | CP | VP | EP | GA | Tokens / sec / GPU | Model TFLOP / sec / GPU') and
'## 26.04.01 NeMo Container' ('#### Model: LLAMA3_70B', columns 'System | #-GPUs | Precision | GBS | MBS |
Sequence Length | FSDP | TP | PP | CP | VP | EP | Tokens / sec / GPU | Model TFLOP / sec / GPU'). Each row's `quote`
is the table row as printed. 'FP8-CS' is Transformer Engine's FP8 with current (per-tensor) scaling, 'FP8-MX' /
'MXFP8' the block-scaled MXFP8 recipe; where a 25.11 cell reads 'a (b)' the first is FP8-CS, the bracket FP8-MX.
The archive's footnote: 'In MoE training benchmarks, we force-balance the token distribution among experts'.

AMD Instinct MI355X: AMD-AGI/Primus agent/workspace/qwen3_fp8_tw_gfx950_20261010/README.md (read at commit
31c71fa8627ae5a4b4b0c24d0b0965ab872e37b4; status line 'Status (2026-10-10)'), the end-to-end table 'Qwen3-30B-A3B FP8
tensorwise pretrain on 8x MI355X: EP8, MBS 8, GBS 512, seq 4096, even routing, 20 iterations, mean of iterations
11-20. tokens/s/GPU = 262144 / (s/iter)', with the DeepEP dispatcher ('HIP permute in `DeepEPTokenDispatcher`') and
Transformer Engine's CK attention ('TE CK is the fastest ... keep `use_turbo_attention` false'); the first row
('baseline: submitted config') and the last (every Turbo switch on) are kept.

AMD Instinct MI325X: AMD-AGI/Primus docs_deprecated/tech_blogs/projection/projection.md (read at commit
fd1eeabbad15, the file last changed at c8e5c09d, 2026-07-14), section 'Validation: Projected vs. Measured Results',
table 'MI325X — Dense Models (Llama 3.1)': 'we compared projected performance against measured results published on
the AMD ROCm Performance Results page' (amd.com/en/developer/resources/rocm-hub/dev-ai/performance-results.html, whose
training tables are images, not read here), columns 'Model | Precision | Batch | SeqLen | FSDP | TP | PP | CP | EP |
1-Node (tok/s/GPU) | Measured 8-Node (tok/s/GPU) | ...'. 'Batch' is the micro-batch; the global batch is not printed,
so those rows take one of Primus's own recipes' accumulation (`global_batch_assumed`); the 1-node column of the two 70B
rows reads 1,135 for both precisions (the FP8 row's 8-node rate is 1.5x it), so only the 8B row's 1-node value is kept.
The recipe (Primus examples/megatron/configs/MI325X/llama3.1_*-pretrain.yaml @fd1eeabb, a later release than the
measured runs, whose micro-batches differ): Megatron-LM with `fp8: hybrid`, `fp8_recipe: delayed`, the distributed
optimizer with overlapped reduce and gather for 8B, torch FSDP2 (`use_torch_fsdp2: true`) and full recomputation
(`recompute_granularity: full`, block) for 70B.
The same table's MI355X Mixtral 8x22B row (PP 4, VPP 2, EP 8) is not entered: its global batch decides its bubble
(4 or 8 micro-batches per pipeline: Primus's MI355X recipe says 128, the projection's own output implies 256).
AMD Instinct MI300X: no published training throughput with its whole layout was found (AMD's ROCm 7 MI355X training
blog prints only ratios to B200; MLPerf Training's AMD entries are LoRA fine-tuning time-to-train).
"""

from __future__ import annotations

from typing import NamedTuple

MBRIDGE = ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md @067f987df03b (2026-08-22), "
           "https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/067f987df03b8355b03192d88d70f1709fedf51a/docs/performance-summary-archive.md")  # fmt: skip


# The 25.11 rows' recipe, read with git at Megatron-Bridge tag v0.2.0 (2025-11-26, the 25.11 container's):
# scripts/performance/configs/qwen3/workload_base_configs.py, qwen3_llm_pretrain.py, utils/helpers.py, utils/utils.py and
# src/megatron/bridge/models/qwen/qwen_provider.py.
QWEN3_B200_RECIPE = ("QWEN3_30B_A3B_B200_FP8_MX_BASE_CONFIG = QWEN3_30B_A3B_B200_FP8_CS_BASE_CONFIG: num_gpus 8, EP 8, ETP 1, GBS 512, "
                     "micro_batch_size not set (WorkloadBaseConfig's default 1), no moe_flex_dispatcher_backend, so the Qwen3 "
                     "provider's moe_token_dispatcher_type 'alltoall' with moe_grouped_gemm and moe_permute_fusion; CUDA graphs "
                     "(transformer_engine) on moe_router and moe_preprocess only; no recomputation; force-balanced routing. The same "
                     "performance summary's 25.09 section ran the same layout token-dropping at twice the rate: '| Qwen3_30B_a3B "
                     "(tokendrop) | 8 | 512 | 1 | 4096 | 0 | 1 | 1 | 1 | 1 | 8 | 64 | 18066 | 416 |' (DGX-B200), where the "
                     "GB200 row moved 22,775 (tokendrop) -> 23,766 (dropless): against 18,066 parcalc's 24,219 is +34 %")  # fmt: skip
QWEN3_GB200_RECIPE = ("QWEN3_30B_A3B_GB200_FP8_MX_BASE_CONFIG: MBS 4, moe_flex_dispatcher_backend 'hybridep' (apply_flex_dispatcher_backend: "
                      "moe_token_dispatcher_type 'flex', GB200 / GB300 only), moe_hybridep_num_sms 32 (set_common_perf_overrides); "
                      "CUDA graphs on moe_router and moe_preprocess; no recomputation; force-balanced routing")  # fmt: skip


# The Blackwell rows' TP communication overlap, read with git in the same Megatron-Bridge snapshot: the recipes the rows ran
# set it on every Llama layout with TP > 1. 25.11 (tag v0.2.0, the 25.11 container's): scripts/performance/configs/llama31/
# llama31_llm_pretrain.py, llama31_405b_b200_config / llama31_405b_gb200_config: 'cfg.comm_overlap.tp_comm_overlap_cfg =
# comm_overlap_cfg' (userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192) and 'cfg.comm_overlap.tp_comm_overlap = False if
# precision == "nvfp4" else cfg.comm_overlap.tp_comm_overlap', the latter from llama31_405b_pretrain_config's
# CommOverlapConfig(tp_comm_overlap=True) (src/megatron/bridge/recipes/llama/llama3.py). 26.04.01 (tag v0.4.0):
# scripts/performance/configs/llama/llama3_llm_pretrain.py llama3_70b_pretrain_config_gb200 (userbuffers_fp8_b200_h8192_tp2_
# mbs1_seqlen8192; llama3_70b_pretrain_config: CommOverlapConfig(tp_comm_overlap=True)) and llama31_llm_pretrain.py
# llama31_405b_pretrain_config_gb200, the same two lines; the layouts LLAMA3_70B_PRETRAIN_CONFIG_GB200_FP8_MX_V2 (TP 2, PP 4,
# VP 5, GBS 256) and LLAMA31_405B_PRETRAIN_CONFIG_GB200_FP8_MX_V2 (TP 4, PP 16, VP 8, CP 1, GBS 1536) are the rows'.
# Until session 19 these rows left the overlap out and their TP collectives were charged exposed.
BLACKWELL_TP_OVERLAP = "the recipe overlaps TP collectives with the GEMMs (Transformer Engine userbuffers; BLACKWELL_TP_OVERLAP's sources)"


# The NVFP4 rows' recipe, read with git at Megatron-Bridge tag v0.4.0 (the 26.04 containers'): scripts/performance/utils/
# precision.py get_precision_config('nvfp4') = bf16_with_nvfp4_mixed() (src/megatron/bridge/training/mixed_precision.py: fp4
# 'e2m1', fp4_recipe 'nvfp4', fp4_param_gather True; first_last_layers_bf16 left at MixedPrecisionConfig's False: every layer
# in NVFP4); configs/llama/llama3_workload_base_configs.py LLAMA3_70B_PRETRAIN_CONFIG_GB200_NVFP4_V2 (TP 2, PP 4, VP 5, CP 1,
# GBS 256, cuda_graph_impl 'none') and llama31_workload_base_configs.py LLAMA31_405B_PRETRAIN_CONFIG_GB200_NVFP4_V2 (TP 4, PP 16,
# VP 8, CP 1, GBS 1536, recompute_num_layers None); llama3_llm_pretrain.py / llama31_llm_pretrain.py: 'cfg.comm_overlap.
# tp_comm_overlap = False if precision == "nvfp4"': the TP collectives are not overlapped under NVFP4. The FP4 parameter
# all-gather (fp4_param_gather) is not modelled: parcalc gathers the 16-bit weights (ZeRO-1 here: the gather after the step).
NVFP4_RECIPE = ("bf16_with_nvfp4_mixed (every layer NVFP4, fp4_param_gather); tp_comm_overlap False under nvfp4, no CUDA graphs "
                "(NVFP4_RECIPE's sources)")


class BlackwellAmdRun(NamedTuple):
    """One published pre-training configuration and its measured tokens per second per GPU."""

    key: str
    system: str  # as printed: DGX-B200, DGX-GB200, ...
    gpu: str  # parcalc GPU preset
    model: str  # parcalc model preset
    gpus: int
    precision: str  # "bf16" | "fp8-cs" | "mxfp8" | "nvfp4" (as printed: FP8-CS, FP8-MX / MXFP8, NVFP4)
    global_batch: int  # sequences
    micro_batch: int
    seq_len: int
    fsdp: int  # 0: distributed optimizer (ZeRO-1); n: Megatron FSDP over n ranks (ZeRO-3)
    tp: int
    pp: int
    cp: int
    vp: int  # virtual stages per pipeline rank (1: none, 'n/a' printed)
    ep: int
    tokens_per_s_per_gpu: float
    model_tflops_per_gpu: float  # as printed, Megatron-Bridge's flop_utils convention
    source: str
    quote: str
    date: str  # container release the row belongs to
    dispatcher: str = "alltoall"  # MoE token dispatcher: "alltoall" (Megatron's), "deepep" or "hybridep"
    fp8_recipe: str = ""  # "" : from precision (FP8-CS current, MXFP8 mxfp8); "current" for per-tensor (tensorwise)
    notes: str = ""
    recompute: str = "none"  # "full": every layer recomputed (Megatron --recompute-granularity full)
    global_batch_assumed: bool = False  # the source prints no global batch: the row takes its recipe's accumulation
    tp_comm_overlap: bool = False  # the recipe overlaps TP collectives with GEMMs (Transformer Engine userbuffers)
    # the fused attention the run's stack ran where its GPU preset times it apart from its default
    # (kernels.attention_kernels; parcalc.core.timing.attention_kernels); "": the preset's default
    attention_kernel: str = ""
    # MoE routing the benchmark forces (parcalc.core.timing.moe.ROUTINGS): "uniform", or "round-robin" (Primus's 'even')
    routing: str = "uniform"
    # the MoE experts' activation with the routing probabilities (parcalc.core.timing.compute.EXPERT_ACTIVATIONS)
    expert_activation: str = "fused"


RUNS: tuple[BlackwellAmdRun, ...] = (
    # --- 25.11 NeMo container, DGX-B200 table
    BlackwellAmdRun("mb2511-b200-llama3-8b-8gpu-fp8cs", "DGX-B200", "b200", "llama3-8b", 8, "fp8-cs", 128, 2, 8192,
                    0, 1, 1, 1, 1, 1, 30624, 1576, MBRIDGE,
                    "| LLAMA3_8B | 8 | FP8-CS (FP8-MX) | 128 | 2 | 8192 | 0 | 1 | 1 | 1 | n/a | 1 | 8 | 30624 (29521) | 1576 (1519) |",
                    "NeMo 25.11"),
    BlackwellAmdRun("mb2511-b200-llama3-8b-8gpu-mxfp8", "DGX-B200", "b200", "llama3-8b", 8, "mxfp8", 128, 2, 8192,
                    0, 1, 1, 1, 1, 1, 29521, 1519, MBRIDGE,
                    "| LLAMA3_8B | 8 | FP8-CS (FP8-MX) | 128 | 2 | 8192 | 0 | 1 | 1 | 1 | n/a | 1 | 8 | 30624 (29521) | 1576 (1519) |",
                    "NeMo 25.11"),
    BlackwellAmdRun("mb2511-b200-llama31-405b-128gpu-fp8cs", "DGX-B200", "b200", "llama3-405b", 128, "fp8-cs", 64, 1, 8192,
                    0, 4, 8, 2, 8, 1, 661, 1667, MBRIDGE,
                    "| LLAMA3.1_405B | 128 | FP8-CS (FP8-MX) | 64 | 1 | 8192 | 0 | 4 | 8 | 2 | 8 | 1 | 32 | 661 (624) | 1667 (1576) |",
                    "NeMo 25.11", tp_comm_overlap=True, notes=BLACKWELL_TP_OVERLAP),
    BlackwellAmdRun("mb2511-b200-qwen3-30b-a3b-8gpu-mxfp8", "DGX-B200", "b200", "qwen3-30b-a3b", 8, "mxfp8", 512, 1, 4096,
                    0, 1, 1, 1, 1, 8, 9299, 214, MBRIDGE,
                    "| Qwen3_30B_a3B | 8 | FP8-MX | 512 | 1 | 4096 | 0 | 1 | 1 | 1 | 1 | 8 | 64 | 9299 | 214 |",
                    "NeMo 25.11", notes=QWEN3_B200_RECIPE),
    # --- 25.11 NeMo container, DGX-GB200 table
    BlackwellAmdRun("mb2511-gb200-llama3-8b-8gpu-fp8cs", "DGX-GB200", "gb200", "llama3-8b", 8, "fp8-cs", 128, 2, 8192,
                    0, 1, 1, 1, 1, 1, 31508, 1622, MBRIDGE,
                    "| LLAMA3_8B | 8 | FP8-CS (FP8-MX) | 128 | 2 | 8192 | 0 | 1 | 1 | 1 | n/a | 1 | 8 | 31508 (29789) | 1622 (1533) |",
                    "NeMo 25.11"),
    BlackwellAmdRun("mb2511-gb200-llama3-70b-64gpu-fp8cs-fsdp", "DGX-GB200", "gb200", "llama3-70b", 64, "fp8-cs", 256, 2, 8192,
                    64, 1, 1, 1, 1, 1, 4312, 1937, MBRIDGE,
                    "| LLAMA3_70B | 64 | FP8-CS | 256 | 2 | 8192 | 64 | 1 | 1 | 1 | 1 | 1 | 2 | 4312 | 1937 |",
                    "NeMo 25.11"),
    BlackwellAmdRun("mb2511-gb200-llama31-405b-256gpu-fp8cs", "DGX-GB200", "gb200", "llama3-405b", 256, "fp8-cs", 1536, 1, 8192,
                    0, 4, 16, 1, 4, 1, 813, 2053, MBRIDGE,
                    "| LLAMA3.1_405B | 256 | FP8-CS | 1536 | 1 | 8192 | 0 | 4 | 16 | 1 | 4 | 1 | 384 | 813 | 2053 |",
                    "NeMo 25.11", tp_comm_overlap=True, notes=BLACKWELL_TP_OVERLAP),
    BlackwellAmdRun("mb2511-gb200-qwen3-30b-a3b-8gpu-mxfp8", "DGX-GB200", "gb200", "qwen3-30b-a3b", 8, "mxfp8", 512, 4, 4096,
                    0, 1, 1, 1, 1, 8, 23766, 547, MBRIDGE,
                    "| Qwen3_30B_a3B | 8 | FP8-MX | 512 | 4 | 4096 | 0 | 1 | 1 | 1 | 1 | 8 | 16 | 23766 | 547 |",
                    "NeMo 25.11", dispatcher="hybridep",
                    notes=QWEN3_GB200_RECIPE),
    # --- 26.04.01 NeMo container, LLAMA3_70B table
    BlackwellAmdRun("mb260401-gb200-llama3-70b-64gpu-mxfp8", "DGX-GB200", "gb200", "llama3-70b", 64, "mxfp8", 256, 1, 8192,
                    0, 2, 4, 1, 5, 1, 3712, 1664, MBRIDGE,
                    "| DGX-GB200 | 64 | MXFP8 | 256 | 1 | 8192 | 0 | 2 | 4 | 1 | 5 | n/a | 3712 | 1664 |",
                    "NeMo 26.04.01", tp_comm_overlap=True, notes=BLACKWELL_TP_OVERLAP),
    BlackwellAmdRun("mb260401-gb200-llama31-405b-256gpu-mxfp8", "DGX-GB200", "gb200", "llama3-405b", 256, "mxfp8", 1536, 1, 8192,
                    0, 4, 16, 1, 8, 1, 800, 1994, MBRIDGE,
                    "| DGX-GB200 | 256 | MXFP8 | 1536 | 1 | 8192 | 0 | 4 | 16 | 1 | 8 | n/a | 800 | 1994 |",
                    "NeMo 26.04.01", tp_comm_overlap=True, notes=BLACKWELL_TP_OVERLAP),
    # the same tables' NVFP4 rows, the same layouts as the MXFP8 rows above (NVFP4_RECIPE: no TP overlap, no BF16 layers)
    BlackwellAmdRun("mb260401-gb200-llama3-70b-64gpu-nvfp4", "DGX-GB200", "gb200", "llama3-70b", 64, "nvfp4", 256, 1, 8192,
                    0, 2, 4, 1, 5, 1, 4864, 2202, MBRIDGE,
                    "| DGX-GB200 | 64 | NVFP4 | 256 | 1 | 8192 | 0 | 2 | 4 | 1 | 5 | n/a | 4864 | 2202 |",
                    "NeMo 26.04.01", notes=NVFP4_RECIPE),
    BlackwellAmdRun("mb260401-gb200-llama31-405b-256gpu-nvfp4", "DGX-GB200", "gb200", "llama3-405b", 256, "nvfp4", 1536, 1, 8192,
                    0, 4, 16, 1, 8, 1, 1184, 2960, MBRIDGE,
                    "| DGX-GB200 | 256 | NVFP4 | 1536 | 1 | 8192 | 0 | 4 | 16 | 1 | 8 | n/a | 1184 | 2960 |",
                    "NeMo 26.04.01", notes=NVFP4_RECIPE),
)

# DGX-H100 (8 H100 SXM5 80GB per node, 8 x 400 Gb/s ConnectX-7): the dense Llama rows in FP8 with current scaling, the same
# archive @067f987df03b, sections '## 25.11 NeMo Container' / '#### System: DGX-H100', '## 25.09 NeMo Container' /
# '#### System: DGX-H100' (no precision column: its footnote 'The numbers in parentheses indicate the use of different
# quantization granularities ... For H100 system, 128x128 for weights and 1x128 for activations', i.e. the plain numbers are
# per-tensor FP8; the recipes are LLAMA3_*_H100_FP8_CS) and '## 26.04.01 NeMo Container' ('FP8'). The recipe (Megatron-Bridge
# v0.2.0, the 25.11 container's: scripts/performance/configs/llama3/llama3_llm_pretrain.py and llama31/llama31_llm_pretrain.py,
# workload_base_configs.py): 70B and 405B set tp_comm_overlap_cfg = userbuffers_fp8_h100_* on the recipes' CommOverlapConfig(
# tp_comm_overlap=True) (src/megatron/bridge/recipes/llama/llama3.py), so their TP collectives overlap the GEMMs (the 26.04
# recipes keep them: v0.4.0, 2026-04-16, scripts/performance/configs/llama/llama3_llm_pretrain.py and llama31_llm_pretrain.py,
# LLAMA3_70B_PRETRAIN_CONFIG_H100_FP8_CS_V2 at GBS 256, LLAMA31_405B_PRETRAIN_CONFIG_H100_FP8_CS_V2 at GBS 1536); the 8B
# recipe at v0.2.0 (LLAMA3_8B_H100_FP8_CS_BASE_CONFIG) recomputes 5 of its 32 layers (recompute_num_layers=5) and sets no
# use_megatron_fsdp, while the printed rows ran Megatron FSDP over 8 ranks, as the earlier perf matrix has it (tag v0.1.0rc4,
# 2025-10-23, scripts/performance/configs/llama3/llama3_8b_llm_pretrain.yaml, h100 fp8_cs: use_megatron_fsdp true, nccl_ub,
# no recompute_num_layers): which recipe the printed rows ran is not settled, so they are entered as printed (FSDP, no
# recomputation; `fit --recompute full --recompute-layers 5` would be v0.2.0's, 1.5 % slower); every recipe reduces gradients in bf16
# (set_llama3_common_configs: grad_reduce_in_fp32 = False), which the megatron profile's fp32 reduce does not follow.
# Attention: Transformer Engine runs cuDNN's fused attention on Hopper (TransformerEngine transformer_engine/pytorch/attention/
# dot_product_attention/utils.py @a0b36d0c, get_attention_backend: 'Disabling FlashAttention to give FusedAttention preference
# on Hopper+ for performance reasons'; Megatron-Core leaves the choice to it and the performance scripts set no NVTE_FLASH_ATTN /
# NVTE_FUSED_ATTN: scripts/performance/utils/executors.py @v0.2.0), in these 2025-26 containers a cuDNN 9.1x: the rows run the
# H100 preset's `cudnn-fused` entry (the H200's sustained cuDNN measurement, the same die).
CUDNN = "cudnn-fused"
RUNS += (
    BlackwellAmdRun("mb2511-h100-llama3-8b-8gpu-fp8cs", "DGX-H100", "h100-sxm5", "llama3-8b", 8, "fp8-cs", 128, 1, 8192,
                    8, 1, 1, 1, 1, 1, 14451, 744, MBRIDGE,
                    "| LLAMA3_8B | 8 | FP8-CS | 128 | 1 | 8192 | 8 | 1 | 1 | 1 | n/a | 1 | 16 | 14451 | 744 |", "NeMo 25.11", attention_kernel=CUDNN,
                    notes="Megatron FSDP over 8 ranks as printed (v0.1.0rc4's perf matrix); v0.2.0's base config recomputes 5 of 32 layers without FSDP (not entered)"),
    BlackwellAmdRun("mb2511-h100-llama3-70b-64gpu-fp8cs", "DGX-H100", "h100-sxm5", "llama3-70b", 64, "fp8-cs", 128, 1, 8192,
                    0, 4, 8, 1, 5, 1, 1602, 719, MBRIDGE,
                    "| LLAMA3_70B | 64 | FP8-CS | 128 | 1 | 8192 | 0 | 4 | 8 | 1 | 5 | 1 | 64 | 1602 | 719 |", "NeMo 25.11",
                    tp_comm_overlap=True, attention_kernel=CUDNN),
    BlackwellAmdRun("mb2511-h100-llama31-405b-1024gpu-fp8cs", "DGX-H100", "h100-sxm5", "llama3-405b", 1024, "fp8-cs", 512, 1, 8192,
                    0, 8, 8, 2, 8, 1, 292, 737, MBRIDGE,
                    "| LLAMA3.1_405B | 1024 | FP8-CS | 512 | 1 | 8192 | 0 | 8 | 8 | 2 | 8 | 1 | 64 | 292 | 737 |", "NeMo 25.11",
                    tp_comm_overlap=True, attention_kernel=CUDNN),
    BlackwellAmdRun("mb2509-h100-llama3-8b-8gpu-fp8cs", "DGX-H100", "h100-sxm5", "llama3-8b", 8, "fp8-cs", 128, 1, 8192,
                    8, 1, 1, 1, 1, 1, 14079, 725, MBRIDGE,
                    "| LLAMA3_8B | 8 | 128 | 1 | 8192 | 8 | 1 | 1 | 1 | n/a | 1 | 16 | 14079 | 725 |", "NeMo 25.09", attention_kernel=CUDNN,
                    notes="Megatron FSDP over 8 ranks as printed (v0.1.0rc4's perf matrix); v0.2.0's base config recomputes 5 of 32 layers without FSDP (not entered)"),
    BlackwellAmdRun("mb2509-h100-llama3-70b-64gpu-fp8cs", "DGX-H100", "h100-sxm5", "llama3-70b", 64, "fp8-cs", 128, 1, 8192,
                    0, 4, 8, 1, 5, 1, 1619, 727, MBRIDGE,
                    "| LLAMA3_70B | 64 | 128 | 1 | 8192 | 0 | 4 | 8 | 1 | 5 | 1 | 64 | 1619 | 727 |", "NeMo 25.09",
                    tp_comm_overlap=True, attention_kernel=CUDNN),
    BlackwellAmdRun("mb2509-h100-llama31-405b-1024gpu-fp8cs", "DGX-H100", "h100-sxm5", "llama3-405b", 1024, "fp8-cs", 512, 1, 8192,
                    0, 8, 8, 2, 8, 1, 302, 763, MBRIDGE,
                    "| LLAMA3.1_405B | 1024 | 512 | 1 | 8192 | 0 | 8 | 8 | 2 | 8 | 1 | 64 | 302 | 763 |", "NeMo 25.09",
                    tp_comm_overlap=True, attention_kernel=CUDNN),
    BlackwellAmdRun("mb260401-h100-llama3-70b-64gpu-fp8cs", "DGX-H100", "h100-sxm5", "llama3-70b", 64, "fp8-cs", 256, 1, 8192,
                    0, 4, 8, 1, 5, 1, 1664, 731, MBRIDGE,
                    "| DGX-H100 | 64 | FP8 | 256 | 1 | 8192 | 0 | 4 | 8 | 1 | 5 | n/a | 1664 | 731 |", "NeMo 26.04.01",
                    tp_comm_overlap=True, attention_kernel=CUDNN),
    BlackwellAmdRun("mb260401-h100-llama31-405b-1024gpu-fp8cs", "DGX-H100", "h100-sxm5", "llama3-405b", 1024, "fp8-cs", 1536, 1, 8192,
                    0, 8, 8, 2, 8, 1, 328, 827, MBRIDGE,
                    "| DGX-H100 | 1024 | FP8 | 1536 | 1 | 8192 | 0 | 8 | 8 | 2 | 8 | n/a | 328 | 827 |", "NeMo 26.04.01",
                    tp_comm_overlap=True, attention_kernel=CUDNN),
)

PRIMUS_MI355X = ("AMD-AGI/Primus agent/workspace/qwen3_fp8_tw_gfx950_20261010/README.md @31c71fa8 (2026-10-10), "
                 "https://github.com/AMD-AGI/Primus/blob/31c71fa8627ae5a4b4b0c24d0b0965ab872e37b4/agent/workspace/qwen3_fp8_tw_gfx950_20261010/README.md")  # fmt: skip

AMD_RUNS: tuple[BlackwellAmdRun, ...] = (
    BlackwellAmdRun("primus-mi355x-qwen3-30b-a3b-8gpu-fp8tw-baseline", "8x MI355X", "mi355x", "qwen3-30b-a3b", 8, "fp8-cs",
                    512, 8, 4096, 0, 1, 1, 1, 1, 8, 29474, 670.6, PRIMUS_MI355X,
                    "'Qwen3-30B-A3B FP8 tensorwise pretrain on 8x MI355X: EP8, MBS 8, GBS 512, seq 4096, even routing', row | baseline: submitted config, Turbo e2d9f1d7 | 8894.0 | 670.6 | 29,474 | 277 GB | 11.33393 |",
                    "2026-10-10", dispatcher="deepep", fp8_recipe="current", routing="round-robin", expert_activation="eager",
                    notes="FP8 'tensorwise' = per-tensor current scaling; even (force-balanced, round-robin) routing; 277 GB peak memory; "
                          "the experts' SwiGLU and probability product eager (Primus's qwen3_30B_A3B.yaml: bias_swiglu_fusion false; "
                          "use_turbo_fused_act_with_probs off, the campaign's prompt.md: 'SwiGLU split into silu, mul, cat, plus the probs multiply')"),
    BlackwellAmdRun("primus-mi355x-qwen3-30b-a3b-8gpu-fp8tw-turbo", "8x MI355X", "mi355x", "qwen3-30b-a3b", 8, "fp8-cs",
                    512, 8, 4096, 0, 1, 1, 1, 1, 8, 40283, 916.7, PRIMUS_MI355X,
                    "'Qwen3-30B-A3B FP8 tensorwise pretrain on 8x MI355X: EP8, MBS 8, GBS 512, seq 4096, even routing', row | + `turbo_fp8_permute` (4 runs: 6442.4, 6515.0, 6523.8, 6549.1) | 6507.6 | 916.7 | 40,283 | 223.3 GB | 11.33404 |",
                    "2026-10-10", dispatcher="deepep", fp8_recipe="current", routing="round-robin",
                    notes="every Turbo kernel switch of the campaign on (fused act with probs, 160 DeepEP CUs, fused qk RMSNorm+RoPE, fused grouped GEMM, FP8 permute)"),
)

PRIMUS_MI325X = ("AMD-AGI/Primus docs_deprecated/tech_blogs/projection/projection.md @fd1eeabbad15 (2026-08-22; the table "
                 "'MI325X — Dense Models (Llama 3.1)', 'Measured 8-Node (tok/s/GPU)' from the AMD ROCm Performance Results page), "
                 "https://github.com/AMD-AGI/Primus/blob/fd1eeabbad15135e3702094087e96142b4b4eacb/docs_deprecated/tech_blogs/projection/projection.md")  # fmt: skip
_8B_ROW = "| Llama 3.1 8B | FP8 | 2 | 8192 | No | 1 | 1 | 1 | 1 | 16,224 | 16,186 | 17,351 | +7.20% |"
# Primus examples/megatron/configs/MI325X/llama3.1_8B-FP8-pretrain.yaml: micro_batch_size 4, global_batch_size 128 on one
# node, i.e. 4 micro-batches per data-parallel rank; the measured rows' micro-batch 2 with the same 4 accumulation steps.
AMD_RUNS += (
    BlackwellAmdRun("primus-mi325x-llama31-8b-8gpu-fp8", "8x MI325X", "mi325x", "llama3-8b", 8, "fp8-cs", 64, 2, 8192,
                    0, 1, 1, 1, 1, 1, 16224, 0.0, PRIMUS_MI325X, "8 GPUs (1 node); GBS 64 assumed; " + _8B_ROW, "2026-07-14",
                    fp8_recipe="delayed", global_batch_assumed=True,
                    notes="1-Node column; FP8 'hybrid' with delayed scaling (the Primus recipe); 4 micro-batches per rank assumed"),
    BlackwellAmdRun("primus-mi325x-llama31-8b-64gpu-fp8", "64x MI325X", "mi325x", "llama3-8b", 64, "fp8-cs", 512, 2, 8192,
                    0, 1, 1, 1, 1, 1, 16186, 0.0, PRIMUS_MI325X, "64 GPUs (8 nodes); GBS 512 assumed; " + _8B_ROW, "2026-07-14",
                    fp8_recipe="delayed", global_batch_assumed=True,
                    notes="Measured 8-Node column; FP8 delayed scaling; 4 micro-batches per rank assumed"),
    BlackwellAmdRun("primus-mi325x-llama31-70b-64gpu-fp8-fsdp", "64x MI325X", "mi325x", "llama3-70b", 64, "fp8-cs", 256, 4, 8192,
                    64, 1, 1, 1, 1, 1, 1726, 0.0, PRIMUS_MI325X,
                    "64 GPUs (8 nodes); GBS 256 assumed; | Llama 3.1 70B | FP8 | 4 | 8192 | Yes | 1 | 1 | 1 | 1 | 1,135 | 1,726 | 1,818 | +5.33% |",
                    "2026-07-14", fp8_recipe="delayed", recompute="full", global_batch_assumed=True,
                    notes="FSDP2 over 64 ranks; full recomputation as Primus's 70B recipes (recompute_granularity full); one micro-batch per rank assumed"),
    BlackwellAmdRun("primus-mi325x-llama31-70b-64gpu-bf16-fsdp", "64x MI325X", "mi325x", "llama3-70b", 64, "bf16", 64, 1, 8192,
                    64, 1, 1, 1, 1, 1, 1174, 0.0, PRIMUS_MI325X,
                    "64 GPUs (8 nodes); GBS 64 assumed; | Llama 3.1 70B | BF16 | 1 | 8192 | Yes | 1 | 1 | 1 | 1 | 1,135 | 1,174 | 1,066 | -9.20% |",
                    "2026-07-14", recompute="full", global_batch_assumed=True,
                    notes="FSDP2 over 64 ranks; full recomputation as Primus's 70B recipes; one micro-batch per rank assumed"),
)

RUNS = RUNS + AMD_RUNS

_keys = [r.key for r in RUNS]
assert len(set(_keys)) == len(_keys), "duplicate run keys"
