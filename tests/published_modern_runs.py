"""Published Mixture-of-Experts, context-parallel and FP8 training runs (issue #19's test data).

Plain data, in the style of tests/published_step_runs.py; nothing from parcalc is imported and no
tests live here. These runs are for testing a step-time model that was never fitted to them: do not
tune a constant on a run and then test on it.

Rules. Every number below was read in a source through the search tools (read_file / find_string
on a stored text conversion of a paper, or a git snapshot fetched and read with `git show`); each
run's `source` names the place and quotes the row or sentence. A value a source does not state is
None and the run's `notes` (or an inline comment) says so. A value that is arithmetic on stated
values says "derived" and how (e.g. dp = gpus / (tp * pp * cp), tokens/s/GPU from GPU-hours per
trillion tokens). Where two sources (or two tables of one source) disagree, both are kept and the
disagreement is stated. Units: TFLOP/s per GPU, MFU in percent, step time in seconds, tokens per
second per GPU, memory in GiB as printed (torchtitan prints GiB; others print nothing).

Field compatibility. `ModernRun` has every field of tests/published_step_runs.PublishedRun, in the
same order and with the same meaning, followed by the MoE / CP / FP8 fields (all with defaults).
`dp` is the data-parallel size of the dense (attention) layers, gpus / (tp * pp * cp); expert
parallelism folds over tp x cp x dp (Megatron-Core "parallel folding"), so ep adds no GPUs and
`edp` (expert data-parallel size) = tp * cp * dp / (etp * ep) where the source's layout allows.

Sources and how each was read (dates are the commit dates of the file read):
- DeepSeek-V3 Technical Report (DeepSeek-AI, arXiv:2412.19437): stored full-text conversions found
  with find_string ("180K H800 GPU hours"): index ids 60572378208 (sec. 1-3.3 with the Chinese
  reading-notes interleaved; only the English original text is quoted) and 34722212356 (sec. 4.1-4.4
  with page markers). No MFU, no TFLOP/s and no step time are published; throughput is given as GPU
  hours per trillion tokens, from which tokens/s/GPU is derived.
- DeepSeek-V2 (DeepSeek-AI, arXiv:2405.04434): stored conversion with page markers, index id
  34092274902 (sec. 3.1-3.2.3).
- "Scalable Training of Mixture-of-Experts Models with Megatron Core" (NVIDIA technical report,
  arXiv:2603.07685): stored full-text conversion, index id 52488664161 (Table 11, Table 17, Table 20
  and Appendix B.2 read in full). Table 17 and Table 20 disagree on the pipeline size of the
  DeepSeek-V3 H100 run (PP8 vs PP4); both are kept.
- NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md, read with git from the snapshot at
  commit 067f987df03b8355b03192d88d70f1709fedf51a (2026-08-22), and docs/performance-summary.md at
  commit fa0315ae2 (2025-10-10, the 25.09 page). 'Model TFLOP / sec / GPU' is computed by
  src/megatron/bridge/training/utils/flop_utils.py num_floating_point_operations (read at fa0315ae2
  and at 067f987d): routed experts counted as moe_router_topk expert FFNs plus the shared expert,
  MLA projections and core attention, causal attention halved ('seq_length / 2'), MTP layers and the
  logits GEMM included, x3 for forward + backward, no recomputation counted. "In MoE training
  benchmarks, we force-balance the token distribution among experts and all benchmarks are
  token-dropless" (archive page footnote) - perfectly balanced routing, not a production run.
- NVIDIA/NeMo docs/source/performance/performance_long_sequence.md (snapshot commit
  19fadb67b09ba94c55094d34df119d6f9c565068, 2025-05-09): Llama 2 7B FP8 with CP on DGX-H100 from 4K
  to 1M tokens, NeMo 24.03.01 container. The page gives no FLOP formula.
- pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md (Dec 2024; torch 1963fc8, torchao
  eab345c, torchtitan 9dec370) and benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md (June 2025;
  torch 38410cf9, torchao 6243040, torchtitan 820504e), read with git from the snapshot at commit
  b5bcd76c66d0acb1a08b176d9639425bc55e0b2a. Hardware: H100 with 96 GB HBM2e at 500 W (not the 700 W
  80 GB SXM5), 400 Gb/s RDMA per GPU. These pages give TPS/GPU and memory only; the Dec 2024 page
  says 'We do not report Model FLOPS Utilization (MFU) because when Float8 is enabled ... the
  definition of MFU under such scenario is not well-defined.'
- Dubey et al. 2024, 'The Llama 3 Herd of Models' (arXiv:2407.21783), Table 4, re-read here in three
  stored conversions found with find_string ('Table 4 Scaling configurations and MFU'): the plain PDF
  text (index id 55567177796) prints the 128K row's DP as 4; two bilingual conversions (ids
  70917390128 and 62360967329) print it as 8, which is the value that multiplies out
  (8 x 16 x 16 x 8 = 16,384). Both are kept (dp = 8 here, `notes` records the 4).

FLOP conventions ('flop_convention') matter when comparing MFU: Megatron-Bridge counts active
(top-k + shared) expert FLOPs and causal-halved attention; the Llama 3 paper's 'BF16 MFU' gives no
formula; torchtitan and DeepSeek publish no FLOP figure for these runs.
"""

from __future__ import annotations

from typing import NamedTuple


class ModernRun(NamedTuple):
    """One published MoE / context-parallel / FP8 configuration and its measured throughput.

    The first 36 fields are those of tests/published_step_runs.PublishedRun (same order, same
    meaning). None = not stated by the source (see `notes`). `global_batch` and `micro_batch` are in
    sequences. `virtual_stages` = interleaved model chunks per pipeline rank (Megatron "VP").
    """

    key: str
    source: str
    framework: str  # "megatron-bridge" | "megatron-core" | "nemo" | "torchtitan" | "other: ..."
    gpu: str
    gpus: int
    gpus_per_node: int | None
    nics_per_node: int | None
    nic_gbps: float | None  # per NIC
    # model shape (dense layers; MoE shape below)
    layers: int | None
    hidden: int | None
    heads: int | None
    kv_heads: int | None
    ffn_hidden: int | None
    vocab: int | None
    seq_len: int | None
    mlp: str | None
    params_billion: float | None  # TOTAL parameters, as printed / labelled by the source
    # parallelism and memory settings
    global_batch: int | None
    micro_batch: int | None
    tp: int | None
    pp: int | None
    dp: int | None
    cp: int | None
    virtual_stages: int | None
    sequence_parallel: bool | None
    recompute: str | None
    sharding: str | None
    flash_attention: bool | None
    precision: str | None  # "bf16" | "fp8" | "mxfp8"
    # measured
    tflops_per_gpu: float | None
    mfu_percent: float | None
    step_time_s: float | None
    tokens_per_s_per_gpu: float | None
    flop_convention: str | None
    peak_used: float | None
    notes: str
    # ---- fields added for MoE / CP / FP8 runs ----
    categories: frozenset[str] = frozenset()  # subset of {"moe", "cp", "fp8"}
    model: str | None = None  # model name as the source prints it
    model_preset: str | None = None  # parcalc preset of the same shape, if one exists
    active_params_billion: float | None = None  # as printed by the source
    experts: int | None = None  # routed experts per MoE layer
    top_k: int | None = None
    shared_experts: int | None = None
    expert_ffn_hidden: int | None = None
    first_dense_layers: int | None = None
    ep: int | None = None
    etp: int | None = None  # expert tensor parallel size (None = not stated)
    edp: int | None = None  # expert data-parallel size, where stated or derivable
    moe_dispatcher: str | None = None  # "alltoall" | "deepep" | "hybridep" | "custom: ..." (None = not stated)
    max_nodes_per_token: int | None = None  # node-limited routing (DeepSeek-V3 M = 4)
    token_balance: str | None = None  # "force-balanced" | "aux-loss-free" | ... as stated
    cp_comm: str | None = None  # "p2p" (ring) | "all-gather" | "a2a" (Ulysses) | None = not stated
    fp8_recipe: str | None = None  # "delayed" | "current" (per-tensor) | "tensorwise" | "rowwise" | "blockwise" | "mxfp8"
    schedule: str | None = None  # "1f1b" | "interleaved-1f1b" | "dualpipe" | "zero-bubble" | None
    comm_overlap: str | None = None  # what the source says is overlapped (EP A2A, TP, ...)
    bf16_twin: str | None = None  # key of the BF16 run on the same layout (for FP8 runs)
    peak_memory_gib: float | None = None  # peak memory per GPU as published
    memory_note: str | None = None  # what the memory figure is (allocated / reserved / max over ranks)
    container: str | None = None  # software release (NeMo container, torch commit, ...)


# =============================================================================================
# 1. DeepSeek-V3 and DeepSeek-V2 (DeepSeek-AI technical reports), H800, HAI-LLM framework.
# =============================================================================================

DSV3 = "DeepSeek-AI, 'DeepSeek-V3 Technical Report' (arXiv:2412.19437)"
_DSV3_THROUGHPUT = (
    "sec. 1: 'During the pre-training stage, training DeepSeek-V3 on each trillion tokens requires "
    "only 180K H800 GPU hours, i.e., 3.7 days on our cluster with 2048 H800 GPUs.' (repeated in sec. "
    "4.4.2 'training DeepSeek-V3 on each trillion tokens requires only 180K H800 GPU hours')"
)
_DSV3_CLUSTER = (
    "sec. 3.1: 'DeepSeek-V3 is trained on a cluster equipped with 2048 NVIDIA H800 GPUs. Each node in "
    "the H800 cluster contains 8 GPUs connected by NVLink and NVSwitch within nodes. Across different "
    "nodes, InfiniBand (IB) interconnects are utilized'; sec. 3.2.2: 'NVLink offers a bandwidth of 160 "
    "GB/s, roughly 3.2 times that of IB (50 GB/s)'"
)
_DSV3_PARALLEL = (
    "sec. 3.2: 'DeepSeek-V3 applies 16-way Pipeline Parallelism (PP), 64-way Expert Parallelism (EP) "
    "spanning 8 nodes, and ZeRO-1 Data Parallelism (DP)' ... 'enabling us to train DeepSeek-V3 without "
    "using costly Tensor Parallelism (TP)'"
)
_DSV3_SHAPE = (
    "sec. 4.2: 'The number of Transformer layers is set to 61 and the hidden dimension to 7168 ... the "
    "number of attention heads n_h is set to 128 and the per-head dimension d_h to 128. The KV "
    "compression dimension d_c is set to 512, and the query compression dimension d_c' is set to 1536 "
    "... All FFNs except for the first three layers are substituted with MoE layers. Each MoE layer "
    "consists of 1 shared expert and 256 routed experts, where the intermediate hidden dimension of each "
    "expert is 2048. Among the routed experts, 8 experts will be activated for each token, and each "
    "token will be ensured to be sent to at most 4 nodes. The multi-token prediction depth D is set to "
    "1'; 'DeepSeek-V3 comprises 671B total parameters, of which 37B are activated for each token'; sec. "
    "4.1: 'extended vocabulary of 128K tokens'"
)
_DSV3_BATCH = (
    "sec. 4.2: 'The maximum sequence length is set to 4K during pre-training ... the batch size is "
    "gradually increased from 3072 to 15360 in the training of the first 469B tokens, and then keeps "
    "15360 in the remaining training ... the routed experts will be uniformly deployed on 64 GPUs "
    "belonging to 8 nodes. As for the node-limited routing, each token will be sent to at most 4 nodes "
    "(i.e., M = 4).'"
)
_DSV3_FP8 = (
    "sec. 3.3: 'we propose a fine-grained mixed precision framework utilizing the FP8 data format ... "
    "we introduce a fine-grained quantization strategy: tile-wise grouping with 1 x N_c elements or "
    "block-wise grouping with N_c x N_c elements' (N_c = 128: 1x128 activation tiles, 128x128 weight "
    "blocks; Megatron-Bridge's archive footnote restates '128x128 for weights and 1x128 for "
    "activations, which match those used in the original DeepSeekV3 pre-training')"
)
_DSV3_DUALPIPE = (
    "sec. 3.2.1: 'the communication overhead introduced by cross-node expert parallelism results in an "
    "inefficient computation-to-communication ratio of approximately 1:1 ... we can ensure that both "
    "all-to-all and PP communication can be fully hidden during execution'; Table 2 bubbles: 1F1B "
    "'(PP - 1)(F + B)', ZB1P '(PP - 1)(F + B - 2W)', DualPipe '(PP/2 - 1)(F&B + B - 3W)', parameters "
    "2x, activation PP + 1; sec. 3.2.2: 'only 20 SMs are sufficient to fully utilize the bandwidths of "
    "IB and NVLink'"
)


DSV_RUNS: tuple[ModernRun, ...] = (
    ModernRun(
        key="deepseek-v3-671b-2048xh800-fp8-pretrain",
        source=f"{DSV3}; {_DSV3_THROUGHPUT}; {_DSV3_CLUSTER}; {_DSV3_PARALLEL}; {_DSV3_SHAPE}; {_DSV3_BATCH}; {_DSV3_FP8}; {_DSV3_DUALPIPE}",
        framework="other: HAI-LLM (DeepSeek in-house)",
        gpu="h800", gpus=2048, gpus_per_node=8,
        nics_per_node=None,  # not stated in the report (DeepEP's README tests 'each connected to a CX7 InfiniBand 400 Gb/s' card)
        nic_gbps=None,  # the report gives IB as '50 GB/s' per GPU's path, not NIC count x rate
        layers=61, hidden=7168, heads=128,
        kv_heads=None,  # MLA: KV compressed to d_c = 512 (no KV-head count)
        ffn_hidden=None,  # the dense FFN width of the first three layers is not stated in the text read
        vocab=128000,  # '128K tokens' (exact padded size not stated)
        seq_len=4096,  # '4K'
        mlp=None,  # the activation is not stated in the V3 text read
        params_billion=671,
        global_batch=15360,  # final batch size (after ramp from 3072 over the first 469B tokens)
        micro_batch=None,  # not stated
        tp=1,  # 'without using costly Tensor Parallelism'
        pp=16,
        dp=128,  # derived: 2048 / 16 (ZeRO-1 DP over the 128 GPUs of each pipeline stage)
        cp=1,  # not used at 4K (not mentioned)
        virtual_stages=None,  # DualPipe holds two chunks per rank ('parameters 2x'); no VP number
        sequence_parallel=False,
        recompute="selective: 'We recompute all RMSNorm operations and MLA up-projections during back-propagation' (sec. 3.2.3)",
        sharding="ZeRO-1",
        flash_attention=None,  # not stated in V3 (V2: 'an improved version of FlashAttention-2')
        precision="fp8",
        tflops_per_gpu=None, mfu_percent=None,
        step_time_s=19.91,  # derived: 15360 x 4096 tokens / (1543.2 tokens/s/GPU x 2048 GPUs); at the final batch size
        tokens_per_s_per_gpu=1543.2,  # derived: 1e12 tokens / (180,000 GPU-h x 3600 s)
        flop_convention=None,  # no FLOP or MFU figure published
        peak_used=None,
        notes=(
            "Average over the whole 14.8T-token pre-training (GPU-hours per trillion tokens), not one "
            "step; includes the batch-size ramp, MTP (D = 1) and any restarts ('we did not experience any "
            "irrecoverable loss spikes or perform any rollbacks'). H800 = H100 with reduced NVLink "
            "(160 GB/s quoted). Peak memory not published. Dense FFN width and exact vocab not in the "
            "text read (HF config not read). Expert data parallel: edp = 2048 / (16 x 64) = 2 (derived)."
        ),
        categories=frozenset({"moe", "fp8"}), model="DeepSeek-V3", model_preset=None,
        active_params_billion=37, experts=256, top_k=8, shared_experts=1, expert_ffn_hidden=2048,
        first_dense_layers=3, ep=64, etp=1, edp=2,
        moe_dispatcher="custom: warp-specialized IB + NVLink all-to-all kernels on 20 SMs (sec. 3.2.2)",
        max_nodes_per_token=4,
        token_balance="auxiliary-loss-free bias balancing (gamma 0.001, then 0.0) + sequence-wise loss alpha 0.0001 (sec. 4.2)",
        fp8_recipe="blockwise",
        schedule="dualpipe",
        comm_overlap="all-to-all dispatch/combine and PP communication 'fully hidden' by DualPipe's paired forward/backward chunks (sec. 3.2.1)",
        container=None,
    ),
    ModernRun(
        key="deepseek-v3-671b-h800-context-extension-32k-128k",
        source=(
            f"{DSV3}; Table 1: 'Training Costs | Pre-Training | Context Extension | Post-Training | Total' "
            "'in H800 GPU Hours | 2664K | 119K | 5K | 2788K'; sec. 4.3: 'two additional training phases "
            "are performed, each comprising 1000 steps, to progressively expand the context window from 4K "
            "to 32K and then to 128K ... In the first phase, the sequence length is set to 32K, and the "
            "batch size is 1920. During the second phase, the sequence length is increased to 128K, and "
            f"the batch size is reduced to 480.'; {_DSV3_SHAPE}"
        ),
        framework="other: HAI-LLM (DeepSeek in-house)",
        gpu="h800", gpus=2048,  # the cluster size; whether the whole cluster ran this phase is not stated
        gpus_per_node=8, nics_per_node=None, nic_gbps=None,
        layers=61, hidden=7168, heads=128, kv_heads=None, ffn_hidden=None, vocab=128000,
        seq_len=131072,  # second phase '128K' (first phase 32K); both phases pooled in the throughput below
        mlp=None, params_billion=671,
        global_batch=480,  # second phase (first phase 1920)
        micro_batch=None, tp=None, pp=None, dp=None,
        cp=None,  # the layout of the extension phases is not stated
        virtual_stages=None, sequence_parallel=None, recompute=None, sharding=None, flash_attention=None,
        precision="fp8",  # assumed as in pre-training; the report does not restate it for this phase
        tflops_per_gpu=None, mfu_percent=None, step_time_s=None,
        tokens_per_s_per_gpu=293.7,  # derived: (1000 x 1920 x 32768 + 1000 x 480 x 131072) tokens / (119,000 GPU-h x 3600 s), taking 32K = 32,768 and 128K = 131,072
        flop_convention=None, peak_used=None,
        notes=(
            "Pooled average of both extension phases (32K then 128K, 62.9B tokens each, derived); the "
            "119K GPU-hours may include more than these 2000 steps (not stated). The GPU count and "
            "parallel layout of this phase are not stated: gpus=2048 is the cluster size only. Useful as "
            "an order-of-magnitude long-context MoE check, not as a per-layout test."
        ),
        categories=frozenset({"moe"}), model="DeepSeek-V3",
        active_params_billion=37, experts=256, top_k=8, shared_experts=1, expert_ffn_hidden=2048,
        first_dense_layers=3, ep=None, max_nodes_per_token=4, fp8_recipe="blockwise",
    ),
    ModernRun(
        key="deepseek-v2-236b-h800-pretrain",
        source=(
            "DeepSeek-AI, 'DeepSeek-V2' (arXiv:2405.04434) sec. 3.2.3: 'During practical training on the "
            "H800 cluster, for training on each trillion tokens, DeepSeek 67B requires 300.6K GPU hours, "
            "while DeepSeek-V2 needs only 172.8K GPU hours'; sec. 3.1.3: 'It employs a 16-way zero-bubble "
            "pipeline parallelism ..., an 8-way expert parallelism ..., and ZeRO-1 data parallelism ... "
            "it can be trained without the necessity of tensor parallelism ... the computation of shared "
            "experts is overlapped with the expert parallel all-to-all communication ... MLA is also "
            "optimized based on an improved version of FlashAttention-2'; sec. 3.1.2: 'The number of "
            "Transformer layers is set to 60 and the hidden dimension to 5120 ... n_h is set to 128 ... "
            "all FFNs except for the first layer are substituted with MoE layers. Each MoE layer consists "
            "of 2 shared experts and 160 routed experts, where the intermediate hidden dimension of each "
            "expert is 1536. Among the routed experts, 6 experts will be activated for each token ... "
            "236B total parameters, of which 21B are activated'; 'batch size is gradually increased from "
            "2304 to 9216 ... and then keeps 9216'; 'The maximum sequence length is set to 4K'; 'the routed "
            "experts will be uniformly deployed on 8 devices (D = 8) ... each token will be sent to at most "
            "3 devices (M = 3)'; 'The token-dropping strategy is employed during training'; sec. 3.1.1: "
            "'vocabulary size of 100K'"
        ),
        framework="other: HAI-LLM (DeepSeek in-house)",
        gpu="h800", gpus=None,  # not stated
        gpus_per_node=8, nics_per_node=None, nic_gbps=None,
        layers=60, hidden=5120, heads=128, kv_heads=None, ffn_hidden=None, vocab=100000,
        seq_len=4096, mlp=None, params_billion=236,  # activation not stated in the text read
        global_batch=9216, micro_batch=None, tp=1, pp=16, dp=None, cp=1, virtual_stages=None,
        sequence_parallel=False, recompute="selective ('a portion of the operators are recomputed')",
        sharding="ZeRO-1", flash_attention=True,
        precision=None,  # not stated for training (FP8 is mentioned only for inference deployment)
        tflops_per_gpu=None,
        mfu_percent=None,  # 'can attain a relatively high Model FLOPs Utilization (MFU)' - no number
        step_time_s=None,
        tokens_per_s_per_gpu=1607.5,  # derived: 1e12 / (172,800 GPU-h x 3600 s)
        flop_convention=None, peak_used=None,
        notes=(
            "Whole-run average. Dense twin on the same cluster: DeepSeek 67B at 300.6K GPU-h per trillion "
            "tokens = 924.1 tokens/s/GPU (derived). Device-limited routing M = 3 devices (not nodes). "
            "GPU count, micro-batch and precision not stated."
        ),
        categories=frozenset({"moe"}), model="DeepSeek-V2",
        active_params_billion=21, experts=160, top_k=6, shared_experts=2, expert_ffn_hidden=1536,
        first_dense_layers=1, ep=8,
        moe_dispatcher="custom ('Faster CUDA kernels are also customized for communications, routing algorithms')",
        max_nodes_per_token=None,  # M = 3 is devices, not nodes
        token_balance="token dropping + expert/device/communication balance losses (alpha 0.003 / 0.05 / 0.02)",
        schedule="zero-bubble",
        comm_overlap="shared-expert computation overlapped with the EP all-to-all",
    ),
)


# =============================================================================================
# 2. Megatron-Core MoE technical report (NVIDIA, arXiv:2603.07685), Table 11 / 17 / 20.
# =============================================================================================

MCORE_MOE = "NVIDIA, 'Scalable Training of Mixture-of-Experts Models with Megatron Core' (arXiv:2603.07685)"
_MCORE_T11 = (
    "Table 11 'Unified throughput benchmarks (per-GPU figures) ... All configurations use force-balanced "
    "routing. The Dtype column specifies the FP8 recipe: FP8-BLK denotes blockwise FP8 on Hopper, and "
    "MXFP8 denotes microscaling FP8 on Blackwell.', columns 'Model | System | # GPUs | Seqlen | Dtype | "
    "Per-GPU TF | Tokens/s/GPU'"
)
_MCORE_FLOPS = (
    "'Per-GPU TF': the report gives no formula in the sections read; Megatron-Core's counter "
    "(NVIDIA/Megatron-LM megatron/training/training.py num_floating_point_operations @d98e8a64) counts "
    "top-k routed + shared expert FFNs and halves causal attention ('/ 2  # causal mask')"
)

MCORE_RUNS: tuple[ModernRun, ...] = (
    ModernRun(
        key="mcore-moe-deepseek-v3-1024xh100-fp8blk",
        source=(
            f"{MCORE_MOE}, {_MCORE_T11}; row 'DeepSeek-V3 | H100 | 1024 | 4,096 | FP8-BLK | 368 | 1,412'; "
            "Table 17 'DeepSeek-V3 final optimized configurations ... TP applies to the non-MoE modules "
            "only, expert TP is always 1', H100 column: 'Hardware 1024xH100 | Parallelism (TP/PP/EP) 2/8/64 "
            "| VPP 4 | GBS / MBS / SeqLen 8192 / 1 / 4096 | Precision FP8-Blockwise | Dispatcher DeepEP | "
            "Recompute mlx, mla_upProj, moe_ACT, layernorm | CUDA Graphs — | EP all-to-all Overlap Enabled "
            "| Performance (TFLOPS/GPU) 368'; Table 20: 'H100, 1,024 GPUs, 4k seqlen, FP8-BLK, 368 TF | TP2 "
            "PP4 CP1 EP64 VPP4 MBS1 GBS8192'; App. B.2: 'Recompute: ... up_proj, mlp on H100. 1F1B overlap: "
            "ON for ... H100'; sec. 9.2.2: 'EP64 spans 8 nodes, and cross-node all-to-all latency would "
            "consume nearly 50% of step time with the standard all-to-all dispatcher'"
        ),
        framework="megatron-core",
        gpu="h100-sxm5", gpus=1024, gpus_per_node=8,  # 'NVL8' (sec. 9.2.2)
        nics_per_node=None, nic_gbps=None,  # not stated
        layers=61, hidden=7168, heads=128, kv_heads=None, ffn_hidden=None, vocab=None,
        seq_len=4096, mlp=None, params_billion=685,  # the report says '685B total parameters' (with MTP); the DeepSeek report says 671B
        global_batch=8192, micro_batch=1, tp=2,
        pp=8,  # Table 17; Table 20 prints PP4 for the same run (conflict kept, see notes)
        dp=64,  # derived: 1024 / (2 x 8); 128 with Table 20's PP4
        cp=1, virtual_stages=4, sequence_parallel=None,
        recompute="selective: Table 17 'mlx, mla_upProj, moe_ACT, layernorm'; App. B.2 'up_proj, mlp'",
        sharding=None,  # distributed optimizer use not stated for this row
        flash_attention=None, precision="fp8",
        tflops_per_gpu=368, mfu_percent=None,
        step_time_s=23.2,  # derived: 8192 x 4096 / (1412 x 1024)
        tokens_per_s_per_gpu=1412,
        flop_convention=_MCORE_FLOPS, peak_used=None,
        notes=(
            "Force-balanced routing. Table 17 says PP8, Table 20 says PP4 for the same 368 TF entry; "
            "Megatron-Bridge 25.09 ran the same model on 1024 H100 with TP2 PP8 VP4 EP64 GBS8192, which "
            "supports PP8. Layer layout 'Et*3|(tt|)*29m|L' (embedding + 3 layers, 29 two-layer stages, "
            "MTP stage, loss stage). 'FP8 primary weights' and 'Low-precision optimizer states' (BF16) on "
            "(Table 18). Memory not published."
        ),
        categories=frozenset({"moe", "fp8"}), model="DeepSeek-V3",
        active_params_billion=37,  # 'only 37B active per token' (sec. 1.2)
        experts=256, top_k=8, shared_experts=1, expert_ffn_hidden=2048, first_dense_layers=3,
        ep=64, etp=1, edp=None, moe_dispatcher="deepep", max_nodes_per_token=None,
        token_balance="force-balanced", fp8_recipe="blockwise", schedule="interleaved-1f1b",
        comm_overlap="EP all-to-all overlapped with another micro-batch's computation ('1F1B overlap')",
    ),
    ModernRun(
        key="mcore-moe-qwen3-235b-256xh100-bf16",
        source=(
            f"{MCORE_MOE}, {_MCORE_T11}; row 'Qwen3-235B | H100 | 256 | 4,096 | BF16 | 320 | 2,132'; "
            "Table 20: 'Qwen3-235B | H100, 256 GPUs, 4k seqlen, BF16, 320 TF | TP2 PP8 CP1 EP32 VPP 4 MBS1 "
            "GBS2048'; App. B.2 Qwen3-235B: 'Dispatcher: ... DeepEP on H100. Recompute: moe_act, layernorm "
            "on GB200 and H100. 1F1B overlap: ... ON for GB200 and H100'; front matter: 'Qwen3-235B "
            "(235B parameters,128 experts)'"
        ),
        framework="megatron-core", gpu="h100-sxm5", gpus=256, gpus_per_node=8, nics_per_node=None, nic_gbps=None,
        layers=None, hidden=None, heads=None, kv_heads=None, ffn_hidden=None, vocab=None,  # shape not stated in the report
        seq_len=4096, mlp=None, params_billion=235,
        global_batch=2048, micro_batch=1, tp=2, pp=8,
        dp=16,  # derived: 256 / (2 x 8)
        cp=1, virtual_stages=4, sequence_parallel=None,
        recompute="selective: moe_act, layernorm", sharding=None, flash_attention=None,
        precision="bf16",
        tflops_per_gpu=320, mfu_percent=None,
        step_time_s=15.37,  # derived: 2048 x 4096 / (2132 x 256)
        tokens_per_s_per_gpu=2132,
        flop_convention=_MCORE_FLOPS, peak_used=None,
        notes=(
            "Same layout as Megatron-Bridge's H100 Qwen3-235B rows (TP2 PP8 VP4 EP32, 256 GPUs): 25.11 "
            "FP8-CS GBS 2048 gave 1575 tok/s / 233 TF and 25.09 (tokendrop) 1204 / 178, i.e. this BF16 row "
            "is faster than a later FP8 row of the same layout - software release matters more than "
            "precision here. Active parameters (22B) from the model name only."
        ),
        categories=frozenset({"moe"}), model="Qwen3-235B-A22B", active_params_billion=22,
        experts=128, top_k=None, ep=32, etp=None, moe_dispatcher="deepep", token_balance="force-balanced",
        schedule="interleaved-1f1b", comm_overlap="1F1B EP all-to-all overlap",
    ),
    ModernRun(
        key="mcore-moe-qwen3-235b-128xgb300-mxfp8-seq128k",
        source=(
            f"{MCORE_MOE}, {_MCORE_T11}; row 'Qwen3-235B | GB300 | 128 | 131,072 | MXFP8 | 1,150 | 1,556'; "
            "Table 20: 'GB300, 128 GPUs, 128k seqlen, MXFP8, 1,150 TF | TP4 PP4 CP4 EP32 VPP12 MBS1 "
            "GBS1024'; sec. 8.2: 'a long-context Qwen3-235B run at sequence length 131,072 on GB300 ... the "
            "system sustains 1,150 TFLOPS per GPU'"
        ),
        framework="megatron-core", gpu="gb300", gpus=128,
        gpus_per_node=None,  # NVL72 rack; not restated for this row
        nics_per_node=None, nic_gbps=None,
        layers=None, hidden=None, heads=None, kv_heads=None, ffn_hidden=None, vocab=None,
        seq_len=131072, mlp=None, params_billion=235,
        global_batch=1024, micro_batch=1, tp=4, pp=4,
        dp=2,  # derived: 128 / (4 x 4 x 4)
        cp=4, virtual_stages=12, sequence_parallel=None, recompute=None, sharding=None, flash_attention=None,
        precision="mxfp8",
        tflops_per_gpu=1150, mfu_percent=None,
        step_time_s=673.8,  # derived: 1024 x 131072 / (1556 x 128)
        tokens_per_s_per_gpu=1556,
        flop_convention=_MCORE_FLOPS, peak_used=None,
        notes=(
            "Blackwell (GB300), MXFP8: outside parcalc's H100 focus but the only published MoE + CP run at "
            ">= 128K found with its layout. CP variant not stated (Megatron-Core's default is the p2p ring)."
        ),
        categories=frozenset({"moe", "cp", "fp8"}), model="Qwen3-235B-A22B", active_params_billion=22,
        experts=128, ep=32, token_balance="force-balanced", cp_comm=None, fp8_recipe="mxfp8",
        schedule="interleaved-1f1b",
    ),
)


# =============================================================================================
# 3. Megatron-Bridge (NeMo Framework) performance summaries: MoE rows, DGX-H100 (and GB300 twins).
# =============================================================================================

MB = "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md @067f987df03b (2026-08-22)"
MB_2509 = "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md @fa0315ae2 (2025-10-10), section '25.09 NeMo Container', 'System: DGX-H100'"
_MB_HEADER_2604 = (
    "section '26.04.01 NeMo Container', columns 'System | #-GPUs | Precision | GBS | MBS | Sequence Length "
    "| FSDP | TP | PP | CP | VP | EP | Tokens / sec / GPU | Model TFLOP / sec / GPU'; 'FSDP = 0: use DDP'"
)
_MB_HEADER_2511 = (
    "section '25.11 NeMo Container', columns 'Model | #-GPUs | Precision | GBS | MBS | Sequence Length | "
    "FSDP | TP | PP | CP | VP | EP | GA | Tokens / sec / GPU | Model TFLOP / sec / GPU'"
)
_MB_BALANCE = (
    "'In MoE training benchmarks, we force-balance the token distribution among experts and all "
    "benchmarks are token-dropless.'"
)
_MB_FLOPS = (
    "Megatron-Bridge src/megatron/bridge/training/utils/flop_utils.py num_floating_point_operations "
    "(@fa0315ae2 and @067f987d): routed experts x moe_router_topk + shared expert FFN, MLA/GQA projections, "
    "causal core attention halved (seq_length / 2), MTP layers and logits; x3 for fwd+bwd; recompute not "
    "counted"
)


def _mb(key: str, source: str, model: str, gpu: str, gpus: int, precision: str, gbs: int, mbs: int,
        seq: int, tp: int, pp: int, cp: int, vp: int | None, ep: int, tok: float, tflops: float,
        notes: str, *, categories: frozenset[str], params: float | None, active: float | None,
        experts: int | None = None, top_k: int | None = None, recipe: str | None = None,
        twin: str | None = None, container: str) -> ModernRun:
    return ModernRun(
        key=key, source=source, framework="megatron-bridge", gpu=gpu, gpus=gpus,
        gpus_per_node=8 if gpu == "h100-sxm5" else None,  # DGX-H100 holds 8 GPUs; GB300 is an NVL72 rack
        nics_per_node=None, nic_gbps=None,  # not stated on the pages
        layers=None, hidden=None, heads=None, kv_heads=None, ffn_hidden=None, vocab=None,  # not on the page
        seq_len=seq, mlp=None, params_billion=params,
        global_batch=gbs, micro_batch=mbs, tp=tp, pp=pp,
        dp=gpus // (tp * pp * cp),  # derived
        cp=cp, virtual_stages=vp, sequence_parallel=None, recompute=None,
        sharding="DDP ('FSDP 0')", flash_attention=None, precision=precision,
        tflops_per_gpu=tflops, mfu_percent=None, step_time_s=None, tokens_per_s_per_gpu=tok,
        flop_convention=_MB_FLOPS, peak_used=None, notes=notes,
        categories=categories, model=model, active_params_billion=active, experts=experts, top_k=top_k,
        ep=ep, etp=None, token_balance="force-balanced, dropless", fp8_recipe=recipe,
        schedule=("interleaved-1f1b" if vp and vp > 1 else ("1f1b" if pp > 1 else None)),
        bf16_twin=twin, container=container,
    )


MB_RUNS: tuple[ModernRun, ...] = (
    _mb("mbridge2509-deepseek-v3-1024xh100-fp8",
        f"{MB_2509}; row '| DeepSeekV3 (dropless) | 1024 | 8192 | 1 | 4096 | 0 | 2 | 8 | 1 | 4 | 64 | 128 | 1297 "
        "| 338 (330) |'; footnote: 'The numbers in parentheses indicate the use of different quantization "
        "granularities: ... For H100 system, 128x128 for weights and 1x128 for activations, which match those "
        "used in the original DeepSeekV3 pre-training.'; 'In token-dropless MoE trianing benchmarks, we "
        "force-balance the token distribution among experts.'",
        "DeepSeekV3", "h100-sxm5", 1024, "fp8", 8192, 1, 4096, 2, 8, 1, 4, 64, 1297, 338,
        "The 25.09 table has no precision column; the page's 'Precision Options' list BF16, FP8, MXFP8 and the "
        "footnote makes 330 TF the blockwise (DeepSeek-V3 granularity) variant, so 338 is another FP8 recipe "
        "(which one is not stated; tokens/s of the blockwise variant not given). GA 128 (printed). Same "
        "layout as the Megatron-Core report's 368 TF / 1412 tok/s run (later software).",
        categories=frozenset({"moe", "fp8"}), params=671, active=37, experts=256, top_k=8, recipe=None,
        container="NeMo 25.09"),
    _mb("mbridge2604-qwen3-235b-256xh100-fp8",
        f"{MB}, {_MB_HEADER_2604}, table 'Model: Qwen3_235B_a22B'; row '| DGX-H100 | 256 | FP8 | 8192 | 1 | 4096 "
        f"| 0 | 2 | 8 | 1 | 4 | 32 | 1712 | 253 |'; {_MB_BALANCE}",
        "Qwen3_235B_a22B", "h100-sxm5", 256, "fp8", 8192, 1, 4096, 2, 8, 1, 4, 32, 1712, 253,
        "FP8 flavour not named in this release's row ('FP8'); the 25.11 release labels the H100 row FP8-CS "
        "(current scaling): '| Qwen3_235B_a22B | 256 | FP8-CS | 2048 | 1 | 4096 | 0 | 2 | 8 | 1 | 4 | 32 | "
        "128 | 1575 | 233 |'. Earlier releases of the same row: 26.02 1633 / 242, 26.02.01 1611 / 238, 26.04 "
        "1686 / 250.",
        categories=frozenset({"moe", "fp8"}), params=235, active=22, experts=128, recipe=None,
        container="NeMo 26.04.01"),
    _mb("mbridge2604-qwen3-30b-a3b-16xh100-fp8",
        f"{MB}, {_MB_HEADER_2604}, table 'Model: Qwen3_30B_a3B'; row '| DGX-H100 | 16 | FP8 | 1024 | 1 | 4096 | 0 "
        f"| 1 | 1 | 1 | n/a | 16 | 8960 | 206 |'; {_MB_BALANCE}",
        "Qwen3_30B_a3B", "h100-sxm5", 16, "fp8", 1024, 1, 4096, 1, 1, 1, None, 16, 8960, 206,
        "EP 16 over two DGX-H100 nodes (all-to-all crosses the NICs). The 25.11 release ran '| Qwen3_30B_a3B | "
        "16 | FP8-CS | 512 | 2 | 4096 | 0 | 1 | 2 | 1 | 24 | 8 | 32 | 5275 | 121 |' (PP2 VP24 EP8): 1.7x "
        "slower on a different layout. Expert count not stated on the page.",
        categories=frozenset({"moe", "fp8"}), params=30, active=3, recipe=None, container="NeMo 26.04.01"),
    _mb("mbridge2604-gpt-oss-120b-64xh100-bf16",
        f"{MB}, {_MB_HEADER_2604}, table 'Model: GPT OSS 120B'; row '| DGX-H100 | 64 | BF16 | 1280 | 1 | 4096 | 0 "
        f"| 1 | 4 | 1 | n/a | 8 | 5824 | 158 |'; {_MB_BALANCE}",
        "GPT OSS 120B", "h100-sxm5", 64, "bf16", 1280, 1, 4096, 1, 4, 1, None, 8, 5824, 158,
        "BF16 MoE on H100 (EP 8 inside a node, PP 4 across nodes, no VP so plain 1F1B). Active parameters "
        "and expert count not printed on the page (model card not read).",
        categories=frozenset({"moe"}), params=120, active=None, container="NeMo 26.04.01"),
    _mb("mbridge2511-deepseek-v3-256xgb300-bf16",
        f"{MB}, {_MB_HEADER_2511}, 'System: DGX-GB300'; row '| DeepSeekV3 (w/o MTP) | 256 | BF16 | 4096 | 1 | "
        f"4096 | 0 | 1 | 2 | 1 | 4 | 32 | 32 | 3848 | 961 |'; {_MB_BALANCE}",
        "DeepSeekV3 (w/o MTP)", "gb300", 256, "bf16", 4096, 1, 4096, 1, 2, 1, 4, 32, 3848, 961,
        "BF16 twin of the FP8-MX row below (same layout, same release). GA 32 printed.",
        categories=frozenset({"moe"}), params=671, active=37, experts=256, top_k=8, container="NeMo 25.11"),
    _mb("mbridge2511-deepseek-v3-256xgb300-mxfp8",
        f"{MB}, {_MB_HEADER_2511}, 'System: DGX-GB300'; row '| DeepSeekV3 (w/o MTP)| 256 | FP8-MX | 4096 | 1 | "
        f"4096 | 0 | 1 | 2 | 1 | 4 | 32 | 32 | 4357 | 1088 |'; {_MB_BALANCE}",
        "DeepSeekV3 (w/o MTP)", "gb300", 256, "mxfp8", 4096, 1, 4096, 1, 2, 1, 4, 32, 4357, 1088,
        "MXFP8 / BF16 on the same layout: 4357 / 3848 = 1.13x tokens/s (derived). Blackwell, not H100.",
        categories=frozenset({"moe", "fp8"}), params=671, active=37, experts=256, top_k=8, recipe="mxfp8",
        twin="mbridge2511-deepseek-v3-256xgb300-bf16", container="NeMo 25.11"),
)


MB_SKILL = ("NVIDIA-NeMo/Megatron-Bridge skills/nemo-mbridge-perf-moe-hardware-configs/SKILL.md (commit 415e90afdaaf, "
            "2026-08-10; read @067f987df03b), '### Qwen3 30B-A3B on 16 H100'")
MB_SKILL_RUNS: tuple[ModernRun, ...] = (
    ModernRun(
        key="mbridge-skill-qwen3-30b-a3b-16xh100-bf16-hybridep-overlap",
        source=(
            f"{MB_SKILL}: 'Dispatcher: HybridEP | TP=1  EP=16  PP=1  CP=1 | Precision: BF16 | Sequence: 4096 | Batch: MBS1 "
            "GBS1024 | Routing: force balance | EP overlap: enabled | Delayed wgrad: disabled | CUDA Graph: moe_router + "
            "moe_preprocess | HybridEP: permute fusion, 32 SMs, 64-token combine chunks | Measured: 20.14729s/step, 299.352 "
            "model TFLOPS/GPU over iterations 41-50 | Rank-0 peak allocated memory: 62.166 GiB'; recipe "
            "src/megatron/bridge/perf_recipes/qwen/h100/qwen3_moe.py qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config "
            "(@067f987df03b): 'overlap_moe_expert_parallel_comm = True', 'delay_wgrad_compute = False'; base recipe "
            "src/megatron/bridge/recipes/qwen/h100/qwen3_moe.py: 'expert_tensor_parallel_size = 1', 'sequence_parallel = "
            "False', 'grad_reduce_in_fp32 = False', 'use_precision_aware_optimizer = True', recompute None"
        ),
        framework="megatron-bridge", gpu="h100-sxm5", gpus=16, gpus_per_node=8, nics_per_node=None, nic_gbps=None,
        layers=48, hidden=2048, heads=32, kv_heads=4, ffn_hidden=None, vocab=None,  # parcalc preset qwen3-30b-a3b
        seq_len=4096, mlp="swiglu", params_billion=30.5,
        global_batch=1024, micro_batch=1, tp=1, pp=1, dp=16, cp=1, virtual_stages=None, sequence_parallel=False,
        recompute="none", sharding="distributed optimizer (precision-aware)", flash_attention=None, precision="bf16",
        tflops_per_gpu=299.352, mfu_percent=None, step_time_s=20.14729,
        tokens_per_s_per_gpu=13014.0,  # derived: 1024 x 4096 / (20.14729 s x 16)
        flop_convention=_MB_FLOPS, peak_used=None,
        notes=("'The current number is the final multi-knob canonical recipe result. An earlier matched A/B isolated plain "
               "EP overlap: 244.039 to 287.305 TFLOPS/GPU, with communication hidden by GEMM/attention increasing from "
               "0.11% to 36.55%.' Same layout as the 26.04.01 FP8 row (8960 tokens/s/GPU), which ran without EP overlap."),
        categories=frozenset({"moe"}), model="Qwen3-30B-A3B", model_preset="qwen3-30b-a3b", active_params_billion=3.3,
        experts=128, top_k=8, ep=16, etp=1, edp=1, moe_dispatcher="hybridep", token_balance="force-balanced",
        comm_overlap="EP overlap (overlap_moe_expert_parallel_comm)", peak_memory_gib=62.166,
        memory_note="rank-0 peak allocated (torch.cuda.max_memory_allocated)", container=None,
    ),
)


# =============================================================================================
# 4. NeMo long-sequence performance: Llama 2 7B, FP8, context parallelism, DGX-H100 (NeMo 24.03.01).
# =============================================================================================

NEMO_LONG = (
    "NVIDIA/NeMo docs/source/performance/performance_long_sequence.md @19fadb67b09b (2025-05-09), section "
    "'LLAMA2-7B (FP8) - H100', 'Container: NeMo24.03.01.framework', 'System: DGX-H100'; columns 'SeqLen (K) | "
    "# of GPUs | Batch Size | Without CP: TFLOPS / GPU | With CP: TP | PP | DP | CP | TFLOPS / GPU | Speedup "
    "with CP/without CP'; 'In non-CP training runs, we use the most performant model- and data-parallel "
    "configurations without CP given the memory capacity constraint of the each GPU system.'"
)


def _nemo_long(seq_k: int, gpus: int, batch: int, no_cp: float, tp: int, pp: int, dp: int, cp: int,
               tflops: float, speedup: str) -> ModernRun:
    row = f"{seq_k} | {gpus} | {batch} | {no_cp} | {tp} | {pp} | {dp} | {cp} | {tflops} | {speedup}"
    return ModernRun(
        key=f"nemo-long-llama2-7b-{gpus}xh100-fp8-seq{seq_k}k-cp{cp}",
        source=f"{NEMO_LONG}; row '{row}' (HTML table cells joined with |)",
        framework="nemo", gpu="h100-sxm5", gpus=gpus, gpus_per_node=8, nics_per_node=None, nic_gbps=None,
        layers=None, hidden=None, heads=None, kv_heads=None, ffn_hidden=None, vocab=None,  # see model_preset
        seq_len=seq_k * 1024,  # 'SeqLen (K)'; K = 1024 assumed (the page's 1024K row is the '1M' case)
        mlp=None, params_billion=7,  # shape: parcalc preset llama2-7b (not on this page)
        global_batch=batch, micro_batch=None, tp=tp, pp=pp, dp=dp, cp=cp, virtual_stages=None,
        sequence_parallel=None, recompute=None, sharding=None, flash_attention=None, precision="fp8",
        tflops_per_gpu=tflops, mfu_percent=None, step_time_s=None, tokens_per_s_per_gpu=None,
        flop_convention="'TFLOPS / GPU' (NeMo 24.03 model FLOPs; formula not given on the page, not read)",
        peak_used=None,
        notes=(
            f"Without CP the best layout reached {no_cp} TFLOP/s/GPU (that layout is not printed); speed-up "
            f"with CP printed as {speedup}. 'Batch Size' is read as the global batch in sequences (tokens per "
            "batch = batch x seq is constant at 4M across rows). FP8 recipe not stated (NeMo 24.03 = "
            "Transformer Engine delayed scaling by default, not stated on the page). CP variant not stated "
            "(Megatron-Core p2p ring is the default)."
        ),
        categories=frozenset({"cp", "fp8"}), model="LLAMA2-7B", model_preset="llama2-7b",
        cp_comm=None, fp8_recipe=None, container="NeMo 24.03.01",
    )


NEMO_LONG_RUNS: tuple[ModernRun, ...] = (
    _nemo_long(32, 32, 128, 595, 2, 1, 8, 2, 610, "1.03"),
    _nemo_long(128, 128, 32, 424, 4, 1, 8, 4, 555, "1.31"),
    _nemo_long(256, 256, 16, 392, 4, 1, 8, 8, 549, "1.40"),
    _nemo_long(1024, 1024, 4, 26.5, 8, 1, 4, 32, 536, "20.23"),
)
# Rows of the same table not included above (as printed; 'SeqLen (K) | GPUs | Batch | no-CP TF | TP | PP |
# DP | CP | TF | speedup'): 4 | 4 | 1024 | 768 | 1 | 1 | 4 | 1 | 768 | 1.00;  8 | 8 | 512 | 730 | 1 | 2 | 4 | 1
# | 730 | 1.00;  16 | 16 | 256 | 660 | 2 | 1 | 8 | 1 | 660 | 1.00;  64 | 64 | 64 | 534 | 4 | 1 | 8 | 2 | 574 |
# 1.07;  512 | 512 | 8 | 104 | 8 | 1 | 4 | 16 | 549 | 5.28. The page also has a LLAMA3-8B (FP8) DGX-B200 table
# (NeMo 25.04.rc2), e.g. '128 | 128 | 32 | 1,438 | 2 | 1 | 4 | 4 | 1,588 | 1.10'.


# =============================================================================================
# 5. TorchTitan benchmarks: Float8 vs BF16 on the same layout, and context parallelism with memory.
# =============================================================================================

TT_DEC24 = "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md (read @b5bcd76c66d0)"
TT_ATP = "pytorch/torchtitan benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md (read @b5bcd76c66d0)"
_TT_HW = (
    "'Each host has 8 NVIDIA H100 GPUs fully connected with NVLink. Each H100 GPU is equipped with 96GB "
    "HBM2e with 2.4 TB/sec peak memory bandwidth. Hosts are inter-connected with backend RDMA network with "
    "400 Gb/s per GPU. We used the default 500W power limit'"
)
_TT_MEM = (
    "'memory readings are stable across the whole training process'; footnote 1: 'Different PP ranks can "
    "have different peak memory usages. We take the maximum across all GPUs.'; 'throughput numbers "
    "(TPS/GPU) are calculated and logged every 10 iterations, and always read at the (arbitrarily "
    "determined) 90th iteration'"
)
_TT_NO_MFU = (
    "none: 'We do not report Model FLOPS Utilization (MFU) because when Float8 is enabled (on nn.Linear "
    "modules), both BFLOAT16 Tensor Core and FP8 Tensor Core are involved'"
)
_TT_FLOAT8 = (
    "Float8 via torchao on nn.Linear only (attention SDPA stays BF16); the Dec 2024 page does not name the "
    "scaling recipe (torchao's default then was dynamic per-tensor scaling - not stated on the page)"
)
# Llama 3 / 3.1 shapes are parcalc presets (llama3-8b, llama3-70b, llama3-405b), sourced there.
_L3 = {"8B": (32, 4096, 32, 8, 14336), "70B": (80, 8192, 64, 8, 28672), "405B": (126, 16384, 128, 8, 53248)}


def _tt(key: str, source: str, size: str, gpus: int, seq: int | None, gbs: int | None, mbs: int | None,
        tp: int, pp: int, dp: int, cp: int, recompute: str, precision: str, tok: float,
        mem: float | None, notes: str, *, categories: frozenset[str], recipe: str | None = None,
        twin: str | None = None, schedule: str | None = None, container: str) -> ModernRun:
    layers, hidden, heads, kv, ffn = _L3[size]
    return ModernRun(
        key=key, source=source, framework="torchtitan", gpu="h100-sxm-96gb-hbm2e-500w", gpus=gpus,
        gpus_per_node=8, nics_per_node=8,  # derived: '400 Gb/s per GPU' x 8 GPUs per host (NIC count itself not printed)
        nic_gbps=400,
        layers=layers, hidden=hidden, heads=heads, kv_heads=kv, ffn_hidden=ffn, vocab=None,  # vocab not on the page
        seq_len=seq, mlp="swiglu", params_billion=float(size.rstrip("B")),
        global_batch=gbs, micro_batch=mbs, tp=tp, pp=pp, dp=dp, cp=cp, virtual_stages=None,
        sequence_parallel=None, recompute=recompute, sharding="FSDP2 (fully_shard) over the dp ranks",
        flash_attention=None, precision=precision,
        tflops_per_gpu=None, mfu_percent=None, step_time_s=None, tokens_per_s_per_gpu=tok,
        flop_convention=None, peak_used=None, notes=notes,
        categories=categories, model=f"Llama 3.1 {size}", model_preset=f"llama3-{size.lower()}",
        fp8_recipe=recipe, schedule=schedule, bf16_twin=twin,
        peak_memory_gib=mem,
        memory_note=("torchtitan 'Memory(GiB)': max over all GPUs of the peak (torch.cuda max reserved/allocated "
                     "not specified on the page)") if mem is not None else None,
        container=container,
    )


_DEC24 = "torch 1963fc8 / torchao eab345c / torchtitan 9dec370 (Dec 2024)"
_JUN25 = "torch 38410cf9 / torchao 6243040 / torchtitan 820504e (June 2025)"
_T2 = (f"{TT_DEC24}, Table 2 'FSDP + CP + torch.compile + Float8. Llama 3.1 8B model. 8 GPUs. Local batch size "
       f"1. Full activation checkpointing.', columns 'Parallelism | Sequence Length | TPS/GPU | Memory(GiB)'; {_TT_HW}; {_TT_MEM}; MFU {_TT_NO_MFU}")
_T6 = (f"{TT_DEC24}, Table 6 '4D parallelism (FSDP + TP + PP + CP) + torch.compile + Float8 + AsyncTP + 1F1B. "
       "Llama 3.1 405B model. 512 GPUs (TP 8, PP8). Local batch size 8. Full activation checkpointing.', columns "
       f"'Parallelism | Sequence Length | TPS/GPU | Memory(GiB)'; {_TT_HW}; {_TT_MEM}")
_CP_NOTE = ("CP variant not stated on the page (torchtitan's context_parallel is PyTorch's ring attention, "
            "all-gather or all-to-all rotation selectable; not stated which). 'Local batch size' is per data-"
            "parallel rank; the global batch is not printed (FSDP x local batch would be derived only if FSDP "
            "ranks are the only data-parallel ranks).")

TT_RUNS: tuple[ModernRun, ...] = (
    # ---- FP8 vs BF16 on the same layout (Dec 2024, Table 1 and 3) ----
    _tt("tt2412-llama31-8b-8xh100-fsdp-compile-bf16",
        f"{TT_DEC24}, Table 1 '1D Parallelism (FSDP). Llama 3.1 8B model. 8 GPUs. Local batch size 2, global batch "
        f"size 16. Selective activation checkpointing.', row '| FSDP + torch.compile | 6,667 | 77.0 |'; {_TT_HW}; {_TT_MEM}",
        "8B", 8, None, 16, 2, 1, 1, 8, 1, "selective", "bf16", 6667, 77.0,
        "seq_len not on the page (the torchtitan llama3_8b.toml default was 8192 - not re-read here). Without "
        "compile: 5,762 TPS, 82.4 GiB.",
        categories=frozenset(), container=_DEC24),
    _tt("tt2412-llama31-8b-8xh100-fsdp-compile-fp8",
        f"{TT_DEC24}, Table 1 (as above), row '| FSDP + torch.compile + Float8 | 8,532 | 76.8 |'; {_TT_HW}",
        "8B", 8, None, 16, 2, 1, 1, 8, 1, "selective", "fp8", 8532, 76.8,
        f"{_TT_FLOAT8}. FP8/BF16 = 8532 / 6667 = 1.28x (derived).",
        categories=frozenset({"fp8"}), recipe=None, twin="tt2412-llama31-8b-8xh100-fsdp-compile-bf16", container=_DEC24),
    _tt("tt2412-llama31-8b-128xh100-fsdp-compile-bf16",
        f"{TT_DEC24}, Table 3 '1D Parallelism (FSDP). Llama 3.1 8B model. 128 GPUs. Local batch size 2, global "
        f"batch size 256. Selective activation checkpointing.', row '| FSDP + torch.compile | 6,514 | 62.0 |'; {_TT_HW}",
        "8B", 128, None, 256, 2, 1, 1, 128, 1, "selective", "bf16", 6514, 62.0,
        "Without compile: 5,605 TPS, 67.0 GiB.", categories=frozenset(), container=_DEC24),
    _tt("tt2412-llama31-8b-128xh100-fsdp-compile-fp8",
        f"{TT_DEC24}, Table 3 (as above), row '| FSDP + torch.compile + Float8 | 8,380 | 61.8 |'; {_TT_HW}",
        "8B", 128, None, 256, 2, 1, 1, 128, 1, "selective", "fp8", 8380, 61.8,
        f"{_TT_FLOAT8}. FP8/BF16 = 8380 / 6514 = 1.29x (derived).",
        categories=frozenset({"fp8"}), twin="tt2412-llama31-8b-128xh100-fsdp-compile-bf16", container=_DEC24),
    # ---- FP8 tensorwise / rowwise vs BF16, FSDP + TP (June 2025 async-TP page) ----
    _tt("tt2506-llama3-70b-256xh100-fsdp32-tp8-bf16",
        f"{TT_ATP}, table 'Llama3 70b on 256 H100s with FSDP=32, TP=8, torch.compile, full AC,  local batch size "
        f"16', columns 'Quantization | Vanilla TP tokens/sec | Async TP tokens/sec | Async TP speedup', row '| None "
        f"(bfloat16)   | 597.3 | 652.4 | 1.09 |'; {_TT_HW}",
        "70B", 256, None, 512, 16, 8, 1, 32, 1, "full", "bf16", 597.3, None,
        "Vanilla TP. With async TP: 652.4 tokens/s. Whether 'tokens/sec' is per GPU is not restated on this page "
        "(the Dec 2024 page's TPS is per GPU; 597 per GPU matches its 829 TPS/GPU FP8 70B row in scale). seq_len "
        "not stated. global_batch 512 derived as local 16 x FSDP 32 (the Dec 2024 page states exactly this for "
        "the same FSDP 32 x TP 8 layout: 'Local batch size 16, global batch size 512').",
        categories=frozenset(), container=_JUN25),
    _tt("tt2506-llama3-70b-256xh100-fsdp32-tp8-fp8-tensorwise",
        f"{TT_ATP}, same table, row '| float8 tensorwise | 809.8 | 942.4 | 1.16 |'",
        "70B", 256, None, 512, 16, 8, 1, 32, 1, "full", "fp8", 809.8, None,
        "FP8 tensorwise / BF16 = 809.8 / 597.3 = 1.36x vanilla TP; 942.4 / 652.4 = 1.44x with async TP (derived).",
        categories=frozenset({"fp8"}), recipe="tensorwise", twin="tt2506-llama3-70b-256xh100-fsdp32-tp8-bf16",
        container=_JUN25),
    _tt("tt2506-llama3-70b-256xh100-fsdp32-tp8-fp8-rowwise",
        f"{TT_ATP}, same table, row '| float8 rowwise    | 599.6 | 624.8 | 1.04 |'; page note: 'the low baseline "
        "performance of the vanilla TP float8 rowwise training is being addressed here: "
        "https://github.com/pytorch/torchtitan/issues/1207'",
        "70B", 256, None, 512, 16, 8, 1, 32, 1, "full", "fp8", 599.6, None,
        "Rowwise scaling: no gain over BF16 (599.6 / 597.3 = 1.00x, derived); flagged by the authors as a known "
        "low baseline.",
        categories=frozenset({"fp8"}), recipe="rowwise", twin="tt2506-llama3-70b-256xh100-fsdp32-tp8-bf16",
        container=_JUN25),
    _tt("tt2506-llama3-8b-64xh100-fsdp8-tp8-bf16",
        f"{TT_ATP}, table 'Llama3 8b on 64 H100s with FSDP=8, TP=8, torch.compile, per op SAC, local batch size 12', "
        f"row '| None (bfloat16)   | 4378   | 4809.4 | 1.10 |'; {_TT_HW}",
        "8B", 64, None, 96, 12, 8, 1, 8, 1, "selective (per-op SAC)", "bf16", 4378, None,
        "Vanilla TP; async TP 4809.4. seq_len not stated. global_batch 96 derived as local 12 x FSDP 8.", categories=frozenset(), container=_JUN25),
    _tt("tt2506-llama3-8b-64xh100-fsdp8-tp8-fp8-tensorwise",
        f"{TT_ATP}, same table, row '| float8 tensorwise | 5078.1 | 5570.1 | 1.10 |'",
        "8B", 64, None, 96, 12, 8, 1, 8, 1, "selective (per-op SAC)", "fp8", 5078.1, None,
        "FP8 tensorwise / BF16 = 5078.1 / 4378 = 1.16x (derived); rowwise row: '| float8 rowwise    | 3708.5 | "
        "3914.9 | 1.06 |' (0.85x of BF16).",
        categories=frozenset({"fp8"}), recipe="tensorwise", twin="tt2506-llama3-8b-64xh100-fsdp8-tp8-bf16",
        container=_JUN25),
    # ---- context parallelism with peak memory (Dec 2024, Table 2 and 6; all Float8) ----
    _tt("tt2412-llama31-8b-8xh100-fsdp4-cp2-seq64k-fp8",
        f"{_T2}; row '| FSDP 4, CP 2 | 65536 | 2,540 | 84.2 |'",
        "8B", 8, 65536, None, 1, 1, 1, 4, 2, "full", "fp8", 2540, 84.2,
        f"{_CP_NOTE} Baseline of the table: '| FSDP 8, CP 1 | 32768 | 3,890 | 83.9 |'.",
        categories=frozenset({"cp", "fp8"}), container=_DEC24),
    _tt("tt2412-llama31-8b-8xh100-fsdp2-cp4-seq128k-fp8",
        f"{_T2}; row '| FSDP 2, CP 4 | 131072 | 1,071 | 84.0 |'",
        "8B", 8, 131072, None, 1, 1, 1, 2, 4, "full", "fp8", 1071, 84.0, _CP_NOTE,
        categories=frozenset({"cp", "fp8"}), container=_DEC24),
    _tt("tt2412-llama31-8b-8xh100-fsdp1-cp8-seq256k-fp8",
        f"{_T2}; row '| FSDP 1, CP 8 | 262144 | 548 | 84.5 |'",
        "8B", 8, 262144, None, 1, 1, 1, 1, 8, "full", "fp8", 548, 84.5, _CP_NOTE,
        categories=frozenset({"cp", "fp8"}), container=_DEC24),
    _tt("tt2412-llama31-405b-512xh100-tp8-pp8-fsdp4-cp2-seq64k-fp8",
        f"{_T6}; row '| FSDP 4, CP 2 | 65536 | 47 | 75.9 |'",
        "405B", 512, 65536, None, 8, 8, 8, 4, 2, "full", "fp8", 47, 75.9,
        f"{_CP_NOTE} Baseline: '| FSDP 8, CP 1 | 32768 | 76 | 75.3 |'. Schedule 1F1B with AsyncTP.",
        categories=frozenset({"cp", "fp8"}), schedule="1f1b", container=_DEC24),
    _tt("tt2412-llama31-405b-512xh100-tp8-pp8-fsdp2-cp4-seq128k-fp8",
        f"{_T6}; row '| FSDP 2, CP 4 | 131072 | 31 | 77.1 |'",
        "405B", 512, 131072, None, 8, 8, 8, 2, 4, "full", "fp8", 31, 77.1, _CP_NOTE,
        categories=frozenset({"cp", "fp8"}), schedule="1f1b", container=_DEC24),
    _tt("tt2412-llama31-405b-512xh100-tp8-pp8-fsdp1-cp8-seq256k-fp8",
        f"{_T6}; row '| FSDP 1, CP 8 | 262144 | 16 | 84.9 |'",
        "405B", 512, 262144, None, 8, 8, 8, 1, 8, "full", "fp8", 16, 84.9, _CP_NOTE,
        categories=frozenset({"cp", "fp8"}), schedule="1f1b", container=_DEC24),
)


# =============================================================================================
# 6. Llama 3 405B long-context stage (Meta), Table 4 row 3: CP 16 at 131,072 tokens.
# =============================================================================================

LLAMA3_CP_RUNS: tuple[ModernRun, ...] = (
    ModernRun(
        key="llama3-405b-16384xh100-cp16-seq131072",
        source=(
            "Dubey et al. 2024, 'The Llama 3 Herd of Models' (arXiv:2407.21783), Table 4 'Scaling configurations "
            "and MFU for each stage of Llama 3 405B pre-training', columns 'GPUs TP CP PP DP Seq. Len. Batch "
            "size/DP Tokens/Batch TFLOPs/GPU BF16 MFU'; row '16,384 8 16 16 4 131,072 16 16M 380 38%' in the PDF "
            "text conversion (index id 55567177796) and '| 16,384 | 8 | 16 | 16 | 8 | 131,072 | 16 | 16M | 380 | "
            "38% |' in two bilingual conversions (ids 70917390128, 62360967329)"
        ),
        framework="other: Meta internal 4D parallelism (TP, CP, PP, FSDP), PyTorch + NCCLX",
        gpu="h100-sxm5", gpus=16384, gpus_per_node=8, nics_per_node=None, nic_gbps=400,
        layers=126, hidden=16384, heads=128, kv_heads=8, ffn_hidden=53248, vocab=128000,  # parcalc preset llama3-405b (Table 3)
        seq_len=131072, mlp="swiglu", params_billion=405,
        global_batch=128,  # derived: 'Batch size/DP' 16 x DP 8 (= 16.8M tokens, the table's '16M'); 64 with DP 4
        micro_batch=None, tp=8, pp=16,
        dp=8,  # bilingual conversions; the PDF text prints 4 (8 x 16 x 16 x 4 = 8,192, not 16,384)
        cp=16, virtual_stages=None, sequence_parallel=None, recompute=None,
        sharding="FSDP (ZeRO-2-like, parameters not resharded after forward; sec. 3.3.2)",
        flash_attention=None, precision="bf16",
        tflops_per_gpu=380, mfu_percent=38, step_time_s=None, tokens_per_s_per_gpu=None,
        flop_convention="'BF16 MFU (Chowdhery et al. 2023)'; no FLOP formula and no peak given",
        peak_used=None,
        notes=(
            "Stage average. DP printed 4 in the PDF text and 8 in other conversions; 8 is the value that "
            "multiplies out to 16,384 GPUs and 16M tokens. CP (sec. 3.3.2, text conversion id 7196610426): 'we "
            "partition the input sequence into 2 x CP chunks so each CP rank receives two chunks for better load "
            "balancing ... our CP implementation adopts an all-gather based method where we first all-gather the "
            "key (K) and value (V) tensors, and then compute attention output for the local query (Q) tensor "
            "chunk. Although the all-gather communication latency is exposed in the critical path ...'. The same "
            "row is in tests/published_step_runs.LLAMA3_RUNS with DP 4."
        ),
        categories=frozenset({"cp"}), model="Llama 3 405B", model_preset="llama3-405b",
        cp_comm="all-gather", schedule="interleaved-1f1b",
    ),
)


# =============================================================================================
# All runs and the counts issue #19 asks for.
# =============================================================================================

RUNS: tuple[ModernRun, ...] = DSV_RUNS + MCORE_RUNS + MB_RUNS + MB_SKILL_RUNS + NEMO_LONG_RUNS + TT_RUNS + LLAMA3_CP_RUNS

MOE_RUNS = tuple(r for r in RUNS if "moe" in r.categories)
CP_RUNS = tuple(r for r in RUNS if "cp" in r.categories)
FP8_RUNS = tuple(r for r in RUNS if "fp8" in r.categories)
FP8_WITH_BF16_TWIN = tuple(r for r in FP8_RUNS if r.bf16_twin is not None)
BF16_TWINS = tuple(r for r in RUNS if r.key in {f.bf16_twin for f in FP8_WITH_BF16_TWIN})
WITH_MEMORY = tuple(r for r in RUNS if r.peak_memory_gib is not None)

SOURCES = (
    DSV3,
    "DeepSeek-AI, 'DeepSeek-V2' (arXiv:2405.04434)",
    MCORE_MOE,
    "NVIDIA-NeMo/Megatron-Bridge performance summaries",
    "NVIDIA/NeMo performance_long_sequence.md",
    "pytorch/torchtitan benchmarks",
    "Dubey et al. 2024, Llama 3 (arXiv:2407.21783)",
)

_keys = [r.key for r in RUNS]
assert len(set(_keys)) == len(_keys), "duplicate run keys"
assert all(r.bf16_twin in set(_keys) for r in FP8_WITH_BF16_TWIN), "a bf16_twin names no run"
