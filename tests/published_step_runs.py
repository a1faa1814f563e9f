"""Published dense-transformer training runs with their configurations and measured throughput.

Plain data for step-time and memory sanity tests; nothing from parcalc is imported and no tests
live here. It complements tests/published_runs.py (Narayanan et al. 2021 Table 1 and Korthikanti
et al. 2022 Table 5), whose two sources are deliberately not repeated here.

Rules. Every number below was read in a source through the search tools (read_file / find_string /
fetched git snapshots / an image of a table viewed directly); the `source` string of each run names
the place and quotes the row or sentence. A value a source does not state is None, and the
run's `notes` or an inline comment says so. Where a value is arithmetic on stated values (e.g. the
data-parallel size gpus / (tp * pp * cp), or a global batch from "batch size per DP group x DP")
the comment says "derived". Values are as printed: TFLOP/s per GPU, MFU in percent, step time in
seconds, tokens per second per GPU; `peak_used` is in TFLOP/s per GPU.

How each source was read, and caveats:
- Llama 3 405B (Dubey et al. 2024, "The Llama 3 Herd of Models", arXiv:2407.21783): a text
  conversion of the PDF found with find_string ("BF16 MFU"); Table 3 (architecture), Table 4
  (parallelism, TFLOPs/GPU, BF16 MFU) and sec. 3.3 read in full. Table 4's numbers are per training
  *stage* (8K-context on 8K GPUs, 8K-context on 16K GPUs, 128K long-context), not one step of one
  job; the paper calls 38-43% the "overall" MFU of those configurations. Its third row prints
  DP = 4, which does not multiply out (8*16*16*4 = 8,192 GPUs, not 16,384; 16 seq/DP * 4 * 131,072
  = 8.4M tokens, not 16M); DP = 8 would fit both. Kept as printed.
- BLOOM-176B: BigScience's own training README and SLURM script
  (bigscience-workshop/bigscience train/tr11-176B-ml/README.md and tr11-176B-ml.slurm), which
  include a logged iteration at full batch size. The Omni-Path link count/speed comes from
  secondary transcriptions of the BLOOM paper (arXiv:2211.05100, p. 18); the paper text itself was
  not found in the index.
- MT-NLG 530B (Smith et al. 2022, arXiv:2201.11990): the paper's text is NOT in the index. The
  numbers come from secondary transcriptions that quote sec. 2.4 and 3.2 (cli99/llm-analysis
  examples/megatron-turing-nlg/README.md; a paper reading note quoting sec. 3.2 verbatim; a
  dataset file citing "PDF p7, s2.4"). Two transcriptions agree on 60.1/50.2/44.4 s and
  126/121/113 TFLOP/s; they disagree on GPU memory (80GB vs 40GB). Treat as lower confidence.
- OPT-175B (Zhang et al. 2022, arXiv:2205.01068 v4): text conversion of the paper (sec. 2.2-2.4,
  Table 1) plus facebookresearch/metaseq projects/OPT/chronicles/10_percent_update.md for the
  tensor-parallel degree.
- GPT-NeoX-20B (Black et al. 2022): EleutherAI/gpt-neox configs/20B.yml ("the configuration file
  for the GPT-NeoX-20B model as it was trained on 96x 40GB A100"). The 117 TFLOP/s figure and the
  hardware description were read only in secondary summaries/quotations of the paper
  (arXiv:2204.06745); the paper text itself was not found. Lower confidence on 117.
- NVIDIA/Megatron-LM README: (a) the GPT-3 175B example paragraph (README at commit 152aab304d,
  2021, unchanged until 2025) with examples/pretrain_gpt3_175B.sh at that commit; (b) the H100
  weak-scaling table, which is an image (images/model_table.png, added in commit f2e5db402c,
  2024-07-15); the image was extracted from the git snapshot and read directly, digit by digit.
- MosaicML llm-foundry scripts/train/benchmarking/README.md (MPT models, FSDP via Composer),
  with collect_results.py (how MFU/HFU/"Model TFLOP" are computed), composer's GPU_AVAILABLE_FLOPS
  (peaks) and the scripts/train/yamls/pretrain/mpt-*.yaml files (model shapes). The A100 tables'
  "Model TFLOP" column prints nonsensical values (e.g. 1.66E+16) for some rows; those rows keep
  MFU and tokens/s only. These are 12-step throughput benchmarks, not production runs.
- TorchTitan (pytorch/torchtitan; Liang et al. 2024, arXiv:2410.06511): the paper PDF was not read;
  the team's tables were read in the repo's benchmarks/llama3_h100_202412_torchtitan.md
  (H100 96GB HBM2e at 500 W, Dec 2024, Float8 in most rows) and, for older A100/H100 numbers with
  MFU, docs/performance.md at commits 1ea476e9f (2024-04) and 4d88a8a44 (2024-12). The MFU formula
  and peaks are from torchtitan/utils.py / train.py at those commits.
- NVIDIA NeMo docs/source/performance/performance_summary.md (NeMo 24.07, DGX-H100, FP8) and
  NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md (26.04.01 container, DGX-H100,
  FP8). On DGX-H100 the published dense-model rows are all FP8; no BF16 dense H100 rows were found.
"""

from __future__ import annotations

from typing import NamedTuple


class PublishedRun(NamedTuple):
    """One published training configuration and its measured throughput.

    None = not stated by the source (see `notes`). `dp` is the data-parallel size (FSDP/ZeRO ranks
    included); `global_batch` and `micro_batch` are in sequences. `virtual_stages` is the number of
    interleaved model chunks per pipeline rank (Megatron "VP"), 1 = not interleaved.
    """

    key: str
    source: str
    framework: str  # "megatron" | "deepspeed" | "fsdp" | "fsdp2" | "torchtitan" | "nemo" | "other: ..."
    gpu: str
    gpus: int
    gpus_per_node: int | None
    nics_per_node: int | None
    nic_gbps: float | None  # per NIC
    # model shape
    layers: int | None
    hidden: int | None
    heads: int | None
    kv_heads: int | None
    ffn_hidden: int | None
    vocab: int | None
    seq_len: int | None
    mlp: str | None  # "gelu" | "swiglu" | "relu"
    params_billion: float | None  # as printed / as labelled by the source
    # parallelism and memory settings
    global_batch: int | None
    micro_batch: int | None
    tp: int | None
    pp: int | None
    dp: int | None
    cp: int | None
    virtual_stages: int | None
    sequence_parallel: bool | None
    recompute: str | None  # "none" | "selective" | "full" | description
    sharding: str | None  # ZeRO stage / FSDP strategy / distributed optimizer
    flash_attention: bool | None
    precision: str | None  # "bf16" | "fp16" | "fp8"
    # measured
    tflops_per_gpu: float | None
    mfu_percent: float | None
    step_time_s: float | None
    tokens_per_s_per_gpu: float | None
    flop_convention: str | None
    peak_used: float | None  # TFLOP/s per GPU the source divides by, if stated
    notes: str


# =============================================================================================
# 1. Llama 3 405B (Meta), Table 4.
# =============================================================================================

LLAMA3 = "Dubey et al. 2024, 'The Llama 3 Herd of Models' (arXiv:2407.21783)"
_LLAMA3_T4_HEADER = "Table 4 columns: 'GPUs TP CP PP DP Seq. Len. Batch size/DP Tokens/Batch TFLOPs/GPU BF16 MFU'"
_LLAMA3_HW = (
    "sec. 3.3.1: 'trained on up to 16K H100 GPUs, each running at 700W TDP with 80GB HBM3, using "
    "Meta's Grand Teton AI server platform. Each server is equipped with eight GPUs'; 'Llama 3 405B "
    "used RDMA over Converged Ethernet (RoCE) ... Both RoCE and Infiniband clusters leverage 400 Gbps "
    "interconnects between GPUs'"
)
_LLAMA3_SHAPE = (
    "Table 3: 405B 'Layers 126, Model Dimension 16,384, FFN Dimension 53,248, Attention Heads 128, "
    "Key/Value Heads 8 ... Activation Function SwiGLU, Vocabulary Size 128,000'"
)
_LLAMA3_FLOPS = (
    "'BF16 Model FLOPs Utilization (MFU; Chowdhery et al. (2023))' (sec. 3.3.2); the paper gives no "
    "FLOP formula and no peak value"
)
_LLAMA3_SHARDING = (
    "FSDP as the DP dimension: 'shards optimizer states and gradients, but for model shards we do not "
    "reshard after forward computation' (sec. 3.3.2), i.e. ZeRO-2-like with parameters kept "
    "gathered between forward and backward"
)


def _llama3(row: str, gpus: int, tp: int, cp: int, pp: int, dp: int, seq: int,
            global_batch: int | None, recompute: str | None, tflops: float, mfu: float,
            notes: str) -> PublishedRun:
    return PublishedRun(
        key=f"llama3-405b-{gpus}xh100-seq{seq}",
        source=f"{LLAMA3}, Table 4 row '{row}' ({_LLAMA3_T4_HEADER}); {_LLAMA3_SHAPE}; {_LLAMA3_HW}",
        framework="other: Meta internal 4D parallelism (TP, CP, PP, FSDP), PyTorch + NCCLX",
        gpu="h100-sxm5",  # '700W TDP with 80GB HBM3' (SXM form factor implied by 700 W, not named)
        gpus=gpus,
        gpus_per_node=8,
        nics_per_node=None,  # not stated; only '400 Gbps interconnects between GPUs'
        nic_gbps=400,
        layers=126, hidden=16384, heads=128, kv_heads=8, ffn_hidden=53248, vocab=128000,
        seq_len=seq, mlp="swiglu", params_billion=405,
        global_batch=global_batch,
        micro_batch=None,  # not stated (the pipeline schedule's micro-batch count N is tunable, sec. 3.3.2)
        tp=tp, pp=pp, dp=dp, cp=cp,
        virtual_stages=None,  # 'we use an interleaved schedule ... with V pipeline stages on one pipeline rank'; V not given
        sequence_parallel=None,  # not stated
        recompute=recompute,
        sharding=_LLAMA3_SHARDING,
        flash_attention=None,  # not stated
        precision="bf16",
        tflops_per_gpu=tflops, mfu_percent=mfu, step_time_s=None, tokens_per_s_per_gpu=None,
        flop_convention=_LLAMA3_FLOPS,
        peak_used=None,  # not stated (430 / 0.43 = 1000, arithmetic here, not the paper's)
        notes=notes,
    )


LLAMA3_RUNS: tuple[PublishedRun, ...] = (
    _llama3(
        "8,192 8 1 16 64 8,192 32 16M 430 43%", 8192, 8, 1, 16, 64, 8192,
        2048,  # derived: 'Batch size/DP' 32 x DP 64 (= 16.8M tokens; the table prints 16M)
        # sec. 3.3.2: 'With these optimizations, we could pre-train Llama 3 on sequences of 8K tokens
        # without activation checkpointing.'
        "none", 430, 43,
        "Stage average, not a single-step measurement. Pipeline: first and last stages each hold one "
        "Transformer layer fewer; asynchronous P2P; document attention mask.",
    ),
    _llama3(
        "16,384 8 1 16 128 8,192 16 16M 400 41%", 16384, 8, 1, 16, 128, 8192,
        2048,  # derived: 16 x DP 128
        "none", 400, 41,
        "Sec. 3.3.2: 'The slight drop in MFU to 41% on 16K GPUs with DP=128 compared to 43% on 8K GPUs "
        "with DP=64 is due to the lower batch size per DP group needed to keep the global tokens per "
        "batch constant during training.'",
    ),
    _llama3(
        "16,384 8 16 16 4 131,072 16 16M 380 38%", 16384, 8, 16, 16, 4, 131072,
        None,  # not derivable: printed DP=4 gives 16*4 = 64 sequences = 8.4M tokens, not the printed 16M
        None,  # activation checkpointing for the 128K stage is not stated
        380, 38,
        "Long-context stage. DP=4 is as printed but inconsistent (8*16*16*4 = 8,192 GPUs, not 16,384; "
        "DP=8 would match both the GPU count and the 16M tokens). CP is all-gather based (K/V "
        "all-gathered, 2*CP load-balanced chunks).",
    ),
)


# =============================================================================================
# 2. BLOOM-176B (BigScience), Megatron-DeepSpeed on Jean Zay.
# =============================================================================================

BLOOM_README = "bigscience-workshop/bigscience train/tr11-176B-ml/README.md"
BLOOM_SLURM = "bigscience-workshop/bigscience train/tr11-176B-ml/tr11-176B-ml.slurm (commit 003b25057ea7)"

BLOOM_RUNS: tuple[PublishedRun, ...] = (
    PublishedRun(
        key="bloom-176b-384xa100",
        source=(
            f"{BLOOM_README}, 'Important checkpoints': log line 'iteration 85376/ 115311 | ... | "
            "elapsed time per iteration (s): 104.70 | ... | global batch size: 2048 | ... | TFLOPs: "
            f"149.77'; 'Replica setup: GPUs = 384 (48 nodes of 8) TP=4 PP=12 DP=8 MBS=2'; {BLOOM_SLURM}: "
            "'NHIDDEN=14336 NLAYERS=70 NHEADS=112 SEQ_LEN=2048', '--bf16', '--checkpoint-activations', "
            "'ZERO_STAGE=0 # important: bf16 must use z0! it implements its own zero stage 1 equivalent'"
        ),
        framework="deepspeed",  # Megatron-DeepSpeed (BigScience fork): Megatron TP + DeepSpeed PP/ZeRO/BF16Optimizer
        gpu="a100-80gb",  # README: '416 A100 80GB GPUs (52 nodes) - using 384 gpus'; form factor not named
        gpus=384,
        gpus_per_node=8,
        # README: '8 GPUs per node Using NVLink 4 inter-gpu connects, 4 OmniPath links'; the 100 Gbps
        # link speed is from secondary transcriptions of the BLOOM paper (p. 18): '4 Omni-Path 100
        # Gbps links per node'.
        nics_per_node=4,
        nic_gbps=100,
        layers=70, hidden=14336, heads=112, kv_heads=112,  # standard MHA (no GQA/MQA mentioned)
        ffn_hidden=None,  # not stated explicitly (README's per-layer count '12*h**2 + 13*h' implies 4h)
        vocab=250680,  # README: 'Vocabulary size is 250,680 tokens'; slurm pads: '--pad-vocab-size-to 250880'
        seq_len=2048,
        mlp="gelu",  # README 'Activation Function: torch.nn.functional.gelu'
        params_billion=176,
        global_batch=2048, micro_batch=2,
        tp=4, pp=12, dp=8, cp=1,
        virtual_stages=1,  # DeepSpeed pipeline engine (no interleaving)
        sequence_parallel=False,  # HF blog: 'Sequence parallelism was developed after BLOOM was trained so not used'
        recompute="full",  # '--checkpoint-activations' + '--deepspeed-activation-checkpointing'
        sharding="ZeRO-1 equivalent inside DeepSpeed BF16_Optimizer (DeepSpeed ZeRO stage set to 0)",
        flash_attention=None,  # not stated (HF blog describes Megatron fused scale/mask/softmax kernels; run predates FlashAttention)
        precision="bf16",
        tflops_per_gpu=149.77,
        mfu_percent=None,  # not stated
        step_time_s=104.70,
        tokens_per_s_per_gpu=None,  # not printed (log prints 'samples per second: 19.561' for all 384 GPUs)
        flop_convention=(
            "hardware FLOPs counting recomputation: README 'Throughput' section: 'it's the hardware "
            "TFLOPs that we calculate - using the 4*2 co-efficient, instead of the 3*2 coefficient'; "
            "bigscience math/README.md: exact formula is Narayanan et al. eq. 3 (Megatron-DeepSpeed PR 251)"
        ),
        peak_used=None,  # not stated in these files
        notes=(
            "Mid-training log line (end of first epoch), full GBS 2048. README 'Times': '1 train iteration "
            "~100sec'; 'Estimated run time': '~150 TFLOPs per GPU'. Embedding counted as a pipeline "
            "layer ('--pp-partition-method type:transformer|embedding'): 'pp rank 0: [embed | 5 "
            "transformer blocks] ... pp rank 11: [5 transformer blocks | embed]'. ALiBi, embedding "
            "LayerNorm, tied embeddings. Node interconnect: Omni-Path, 'NCCL-communications network: a "
            "fully dedicated subnet'. CUDA_LAUNCH_BLOCKING=1 was set (README says tiny/no impact)."
        ),
    ),
)


# =============================================================================================
# 3. MT-NLG 530B (Microsoft + NVIDIA), DeepSpeed + Megatron 3D parallelism. SECONDARY SOURCES.
# =============================================================================================

MTNLG = "Smith et al. 2022, 'Using DeepSpeed and Megatron to Train Megatron-Turing NLG 530B' (arXiv:2201.11990)"
_MTNLG_QUOTE = (
    "sec. 2.4 as transcribed in cli99/llm-analysis examples/megatron-turing-nlg/README.md: 'with "
    "global batch size 1920 on 280, 350, and 420 DGX A100 servers ... the latency per iteration "
    "observed is 60.1, 50.2, and 44.4 seconds respectively. These correspond to 126, 121, and 113 "
    "TFLOP/s per GPU, respectively.'; sec. 3.2 as quoted in a paper reading note: 'The number of "
    "layers, hidden dimensions, attention heads are 105, 20480, and 128, respectively. The sequence "
    "length is 2048 and global batch size is 1920. We used 8-way tensor and 35-way pipeline parallelism.'"
)


def _mtnlg(servers: int, step_s: float, tflops: float) -> PublishedRun:
    gpus = servers * 8
    return PublishedRun(
        key=f"mtnlg-530b-{gpus}xa100",
        source=f"{MTNLG}, sec. 2.4 / 3.2 via secondary transcriptions: {_MTNLG_QUOTE}; row {servers} servers",
        framework="deepspeed",  # DeepSpeed pipeline + ZeRO data parallelism with Megatron tensor slicing
        gpu="a100-sxm4-80gb",  # DGX A100; '80GB' per the MS/NVIDIA blog as quoted by secondary pages; llm-analysis says 40GB
        gpus=gpus,
        gpus_per_node=8,
        nics_per_node=None,  # not stated in the sources read (blog: 'HDR InfiniBand with full-fat tree')
        nic_gbps=None,
        layers=105, hidden=20480, heads=128, kv_heads=128,
        ffn_hidden=None,  # not stated in the text read (llm-analysis config uses 81920 = 4h)
        vocab=None,  # not stated in the text read (llm-analysis config uses 50272)
        seq_len=2048,
        mlp=None,  # not stated in the text read
        params_billion=530,
        global_batch=1920,
        micro_batch=None,  # not stated in the text read
        tp=8, pp=35,
        dp=servers * 8 // 280,  # derived: gpus / (8 * 35)
        cp=1,
        virtual_stages=None,  # not stated
        sequence_parallel=None,  # not stated (the run predates Korthikanti et al. 2022)
        recompute=None,  # not stated in the text read
        sharding="ZeRO data parallelism (stage not in the text read; a secondary DeepSpeed-docs summary says 'Data parallelism with ZeRO Stage 1')",
        flash_attention=None,  # not stated (predates FlashAttention, 2022-05)
        precision=None,  # 'mixed precision' (blog); 16-bit format not stated in the text read
        tflops_per_gpu=tflops,
        mfu_percent=None,  # the paper reports TFLOP/s only
        step_time_s=step_s,
        tokens_per_s_per_gpu=None,
        flop_convention=(
            "not read in the primary text; a secondary annotation calls the 126/121/113 'hardware FLOPs'. "
            "PaLM (Chowdhery et al. 2022) recomputes MFU 29.7% without / 30.2% with self-attention for "
            "the 280-server run from 65.43K tokens/s (as quoted in the same secondary file)"
        ),
        peak_used=None,
        notes=(
            "LOWER CONFIDENCE: the MT-NLG paper text was not in the index; values from secondary "
            "transcriptions that agree with each other. System throughput benchmark of the training "
            "configuration (Selene, 560 DGX A100 servers). 'Each 530 billion parameter model replica "
            "spans 280 NVIDIA A100 GPUs, with 8-way tensor-slicing within a node and 35-way pipeline "
            "parallelism across nodes' (sec. 2.2 as quoted)."
        ),
    )


MTNLG_RUNS: tuple[PublishedRun, ...] = (
    _mtnlg(280, 60.1, 126),
    _mtnlg(350, 50.2, 121),
    _mtnlg(420, 44.4, 113),
)


# =============================================================================================
# 4. OPT-175B (Meta), FSDP + Megatron tensor parallelism (metaseq).
# =============================================================================================

OPT = "Zhang et al. 2022, 'OPT: Open Pre-trained Transformer Language Models' (arXiv:2205.01068v4)"

OPT_RUNS: tuple[PublishedRun, ...] = (
    PublishedRun(
        key="opt-175b-992xa100",
        source=(
            f"{OPT}, sec. 2.4: 'We trained OPT-175B on 992 80GB A100 GPUs, by utilizing Fully Sharded "
            "Data Parallel (Artetxe et al., 2021) with Megatron-LM Tensor Parallelism (Shoeybi et al., "
            "2019). We achieve utilization of up to 147 TFLOP/s per GPU. We keep Adam state in FP32, "
            "since we shard it across all hosts, while the model weights remained in FP16.'; Table 1 row "
            "'175B 96 96 12288 1.2e-4 2M'; sec. 2.2: 'all models are trained with ReLU activation and a "
            "sequence length of 2048'; facebookresearch/metaseq projects/OPT/chronicles/"
            "10_percent_update.md: '8x Tensor Parallelism', 'Batch-size of 2M'"
        ),
        framework="other: metaseq (FairScale FSDP + Megatron-LM tensor parallelism)",
        gpu="a100-80gb",  # '80GB A100'; form factor not named
        gpus=992,
        gpus_per_node=None,  # not stated in the sources read
        nics_per_node=None,
        nic_gbps=None,
        layers=96, hidden=12288, heads=96, kv_heads=96,
        ffn_hidden=None,  # not stated (paper follows GPT-3 / Megatron settings)
        vocab=None,  # 'GPT-2 byte level BPE tokenizer'; size not stated
        seq_len=2048,
        mlp="relu",  # 'trained with ReLU activation'
        params_billion=175,
        global_batch=None,  # '2M' tokens (Table 1); exact sequence count not stated (~1024 x 2048)
        micro_batch=None,  # not stated
        tp=8,
        pp=1,  # none mentioned: the paper and logbook name only FSDP + tensor parallelism
        dp=124,  # derived: 992 / 8 (assuming no pipeline parallelism)
        cp=1,
        virtual_stages=None,
        sequence_parallel=None,  # not stated
        recompute=None,  # not stated
        sharding="FSDP (FairScale), Adam state sharded across all hosts; strategy details not stated",
        flash_attention=None,  # not stated (predates FlashAttention)
        precision="fp16",  # 'model weights remained in FP16', dynamic loss scaling
        tflops_per_gpu=147,
        mfu_percent=None,
        step_time_s=None,
        tokens_per_s_per_gpu=None,
        flop_convention=None,  # not stated
        peak_used=None,
        notes=(
            "'up to' 147 TFLOP/s: a best-case figure, not an average. Mid-flight changes included "
            "'switching to a newer version of Megatron (this reduced pressure on activation norms and "
            "improved throughput)'. Chronicles: 'we need 33 days to fully train at this scale with 1024 "
            "80GB A100s'. FLOP convention and whether recomputation is counted are not stated."
        ),
    ),
)


# =============================================================================================
# 5. GPT-NeoX-20B (EleutherAI), Megatron + DeepSpeed (gpt-neox).
# =============================================================================================

NEOX_CONFIG = "EleutherAI/gpt-neox configs/20B.yml (commit 252ddc522fba)"

NEOX_RUNS: tuple[PublishedRun, ...] = (
    PublishedRun(
        key="gpt-neox-20b-96xa100-40gb",
        source=(
            f"{NEOX_CONFIG}: 'configuration file for the GPT-NeoX-20B model as it was trained on 96x "
            "40GB A100', 'pipe-parallel-size: 4, model-parallel-size: 2', 'num-layers: 44, hidden-size: "
            "6144, num-attention-heads: 64, seq-length: 2048', 'zero_optimization stage: 1', "
            "'train_micro_batch_size_per_gpu: 4, gradient_accumulation_steps: 32', 'checkpoint-activations: "
            "true, checkpoint-num-layers: 1', 'fp16 enabled'; Black et al. 2022 (arXiv:2204.06745) sec. 3 "
            "as summarised in a reading note: 'tensor parallel size = 2, pipeline parallel size = 4 - 117 "
            "teraflops per gpus'"
        ),
        framework="other: gpt-neox (Megatron tensor parallelism + DeepSpeed pipeline/ZeRO)",
        # paper as quoted (nl2code.github.io): 'twelve Supermicro AS-4124GO-NART servers, each with eight
        # NVIDIA A100-SXM4-40GB GPUs ... All GPUs can directly access the InfiniBand switched fabric
        # through one of four ConnectX-6 HCAs for GPUDirect RDMA'
        gpu="a100-sxm4-40gb",
        gpus=96,
        gpus_per_node=8,
        nics_per_node=4,
        nic_gbps=None,  # HCA speed not stated in the text read
        layers=44, hidden=6144, heads=64, kv_heads=64,
        ffn_hidden=24576,  # model card (as quoted): 'D_ff 24,576'
        vocab=50257,  # model card: 'Vocab Size 50257/50432*' - 'padded up to 50432 in order to be divisible by 128'
        seq_len=2048,
        mlp="gelu",  # config 'bias-gelu-fusion: true'
        params_billion=20,
        global_batch=1536,  # derived from the config: micro 4 x grad-accum 32 x DP 12 (paper summaries say '1538 contexts', ~3.15M tokens)
        micro_batch=4,
        tp=2, pp=4,
        dp=12,  # derived: 96 / (2 * 4)
        cp=1,
        virtual_stages=1,  # DeepSpeed pipeline engine, no interleaving option in the config
        sequence_parallel=None,  # not stated (predates sequence parallelism)
        recompute="full",  # 'checkpoint-activations: true', 'checkpoint-num-layers: 1'
        sharding="DeepSpeed ZeRO stage 1",
        flash_attention=None,  # not stated; config uses 'scaled-upper-triang-masked-softmax-fusion' (predates FlashAttention)
        precision="fp16",
        tflops_per_gpu=117,
        mfu_percent=None,
        step_time_s=None,
        tokens_per_s_per_gpu=None,
        flop_convention=None,  # not stated in the text read
        peak_used=None,
        notes=(
            "LOWER CONFIDENCE on 117 TFLOP/s: read only in a secondary summary of the paper, not in the "
            "paper text. Parallel attention + MLP ('gpt_j_residual: true'), rotary on 25% of head dims, "
            "untied embeddings ('no-weight-tying: true'). Training time 1,830 hours (secondary)."
        ),
    ),
)


# =============================================================================================
# 6. NVIDIA/Megatron-LM README: (a) GPT-3 175B example on 1024 A100; (b) H100 weak scaling table.
# =============================================================================================

MLM_README_2021 = "NVIDIA/Megatron-LM README.md 'GPT-3 Example' (commit 152aab304d, 2021-01-11; text unchanged until 2025)"
MLM_GPT3_SCRIPT = "NVIDIA/Megatron-LM examples/pretrain_gpt3_175B.sh (commit 152aab304d)"

MLM_GPT3_RUNS: tuple[PublishedRun, ...] = (
    PublishedRun(
        key="megatron-gpt3-175b-1024xa100",
        source=(
            f"{MLM_README_2021}: 'It uses 8-way and 16-way tensor and pipeline parallelism, respectively. "
            "... With full global batch size of 1536 on 1024 A100 GPUs, each iteration takes around 32 "
            "seconds resulting in 138 teraFLOPs per GPU which is 44% of the theoretical peak FLOPs.'; "
            f"{MLM_GPT3_SCRIPT}: '--num-layers 96 --hidden-size 12288 --num-attention-heads 96 "
            "--seq-length 2048 --micro-batch-size 1 --global-batch-size 1536 --fp16 "
            "--checkpoint-activations', '#SBATCH --nodes=128 --ntasks-per-node=8'"
        ),
        framework="megatron",
        gpu="a100",  # memory size and form factor not stated in the README
        gpus=1024,
        gpus_per_node=8,  # script: '--nodes=128 ... --ntasks-per-node=8'
        nics_per_node=None,  # not stated
        nic_gbps=None,
        layers=96, hidden=12288, heads=96, kv_heads=96,
        ffn_hidden=None,  # not passed (Megatron default 4h)
        vocab=None,  # GPT-2 BPE vocab file; padded size not stated
        seq_len=2048, mlp="gelu", params_billion=175,
        global_batch=1536, micro_batch=1,
        tp=8, pp=16,
        dp=8,  # derived: 1024 / (8 * 16)
        cp=1,
        virtual_stages=1,  # script passes no interleaving flag
        sequence_parallel=None,  # not stated (predates sequence parallelism)
        recompute="full",  # '--checkpoint-activations'
        sharding=None,  # not stated; the script passes no optimizer-sharding flag
        flash_attention=None,  # not stated (predates FlashAttention)
        precision="fp16",
        tflops_per_gpu=138,
        mfu_percent=44,  # '44% of the theoretical peak FLOPs' (a percent-of-peak of the printed TFLOP/s, not necessarily MFU)
        step_time_s=32,  # 'around 32 seconds'
        tokens_per_s_per_gpu=None,
        flop_convention=(
            "not stated in the README (same team and period as Narayanan et al. 2021 eq. 3, which counts "
            "the recomputation forward pass)"
        ),
        peak_used=None,  # not stated (138 / 0.44 = 313.6, consistent with A100's 312; arithmetic here)
        notes=(
            "Batch-size ramp-up '--rampup-batch-size 16 16 5859375'; the 32 s / 138 TFLOP/s refer to the "
            "full GBS 1536. Close to Narayanan et al. 2021 sec. 5.1 (1024 GPUs, batch 1536, 140 TFLOP/s), "
            "which does not give TP/PP; this README does."
        ),
    ),
)

MLM_README_2024 = (
    "NVIDIA/Megatron-LM README.md 'Training Speed and Scalability' and images/model_table.png "
    "(commit f2e5db402c, 2024-07-15; image read directly from the git snapshot)"
)
_MLM_H100_HEADER = (
    "table columns: 'Model size | Attention heads | Hidden size | Number of layers | Tensor MP size | "
    "Pipeline MP size | Data-parallel size | Number of GPUs | Batch size | Per-GPU teraFLOP/s | MFU | "
    "Aggregate petaFLOP/s'"
)
_MLM_H100_TEXT = (
    "'All models use a vocabulary size of 131,072 and a sequence length of 4096 ... Our experiments "
    "use up to 6144 H100 GPUs. We perform fine-grained overlapping of data-parallel "
    "(--overlap-grad-reduce --overlap-param-gather), tensor-parallel (--tp-comm-overlap) and "
    "pipeline-parallel communication ... The reported throughputs are measured for end-to-end training'"
)


def _mlm_h100(label: str, heads: int, hidden: int, layers: int, tp: int, pp: int, dp: int,
              gpus: int, batch: int, tflops: float, mfu: float, agg_pflops: float) -> PublishedRun:
    return PublishedRun(
        key=f"megatron-gpt-{label.lower()}-{gpus}xh100",
        source=(
            f"{MLM_README_2024}, {_MLM_H100_HEADER}; row '{label} {heads} {hidden} {layers} {tp} {pp} "
            f"{dp} {gpus} {batch} {tflops} {mfu:g}% {agg_pflops}'; {_MLM_H100_TEXT}"
        ),
        framework="megatron",
        gpu="h100",  # 'H100'; form factor not stated (MFU / TFLOP/s is consistent with a ~989 TFLOP/s dense BF16 peak)
        gpus=gpus,
        gpus_per_node=None,  # not stated
        nics_per_node=None,  # not stated
        nic_gbps=None,
        layers=layers, hidden=hidden, heads=heads,
        kv_heads=None,  # not stated
        ffn_hidden=None,  # not stated
        vocab=131072, seq_len=4096,
        mlp=None,  # not stated
        params_billion=float(label.rstrip("B")),
        global_batch=batch,
        micro_batch=None,  # not stated
        tp=tp, pp=pp, dp=dp, cp=1,
        virtual_stages=None,  # not stated
        sequence_parallel=None,  # not stated
        recompute=None,  # not stated
        sharding=None,  # not stated; the README names '--overlap-grad-reduce --overlap-param-gather'
        flash_attention=None,  # not stated
        precision=None,  # not stated
        tflops_per_gpu=tflops,
        mfu_percent=mfu,
        step_time_s=None,
        tokens_per_s_per_gpu=None,
        flop_convention="not stated in the README",
        peak_used=None,  # not stated
        notes=(
            f"Weak-scaling table (DP fixed at 48). Aggregate petaFLOP/s printed: {agg_pflops}. 'Note that "
            "we did not train these models to convergence.' Precision, recompute, micro-batch and "
            "interleaving are not given."
        ),
    )


MLM_H100_RUNS: tuple[PublishedRun, ...] = (
    _mlm_h100("1.7B", 16, 2048, 24, 1, 1, 48, 48, 192, 408.8, 41, 19.6),
    _mlm_h100("7.1B", 32, 4096, 30, 2, 1, 48, 96, 192, 465.9, 47, 44.7),
    _mlm_h100("32B", 56, 7168, 48, 8, 1, 48, 384, 192, 459.6, 46, 176.5),
    _mlm_h100("70B", 64, 8192, 84, 8, 2, 48, 768, 384, 419.7, 42, 322.3),
    _mlm_h100("177B", 96, 12288, 96, 8, 6, 48, 2304, 1152, 432.8, 44, 997.2),
    _mlm_h100("462B", 144, 18432, 112, 8, 16, 48, 6144, 3072, 459.9, 47, 2825.6),
)
# Rows of the same table not included above (for completeness, as printed):
# 16B 48 6144 32 | TP 4 PP 1 DP 48 | 192 GPUs | batch 192 | 489.1 TFLOP/s | 49% | 93.9
# 119B 80 10240 92 | TP 8 PP 4 DP 48 | 1536 GPUs | batch 768 | 420.5 | 43% | 645.9
# 314B 128 16384 96 | TP 8 PP 8 DP 48 | 3072 GPUs | batch 1536 | 474.4 | 48% | 1457.4


# =============================================================================================
# 7. MosaicML llm-foundry MPT benchmarks (Composer + PyTorch FSDP), H100 and A100.
# =============================================================================================

MPT_README = "mosaicml/llm-foundry scripts/train/benchmarking/README.md (commit 061f2c7ce64e)"
_MPT_HEADER = (
    "columns: 'Model | SeqLen (T) | # GPUs | GPU | MFU | HFU | Model TFLOP | MicroBatchSize | GradAccum | "
    "GlobalBatchSize | Throughput (S/s) | Throughput (T/s) | Throughput (T/s/GPU) | GlobalBatchSize (T) | "
    "Precision | MP Mode | Sharding Strategy | Activation Checkpointing | Activation CPUOffload | NumParams'"
)
_MPT_FLOPS = (
    "collect_results.py: flops_per_seq = 2 * n_params * seq_len (n_params includes embeddings); "
    "attn_flops_per_seq = n_layers * 2 * 2 * d_model * seq_len**2 (full, non-causal); "
    "MFU = (3*flops_per_seq + 3*attn_flops_per_seq) * seq_per_sec / (gpus * peak); HFU uses 4x instead "
    "of 3x when activation checkpointing is on; 'All FLOP calculations exclude the operations required "
    "for normalization, activation, and residuals'; 'Model TFLOP' = the MFU numerator per GPU"
)
# composer GPU_AVAILABLE_FLOPS: 'h100-sxm' 'amp_bf16': 1.979e15 / 2; 'a100' 'bf16': 312e12.
_MPT_PEAK = {"h100": 989.5, "a100": 312.0}
_MPT_SHAPES = {
    # scripts/train/yamls/pretrain/mpt-*.yaml: d_model, n_heads, n_layers, expansion_ratio 4, vocab_size 50368
    "70b": (80, 8192, 64),
    "30b": (48, 7168, 56),
    "13b": (40, 5120, 40),
    "7b": (32, 4096, 32),
    "1b": (24, 2048, 16),  # 'n_heads: 16 # Modified 24->16 so that d_head == 128 to statisfy FlashAttention'
}


def _mpt(model: str, gpu: str, table: str, seq: int, gpus: int, mfu: float, hfu: float,
         model_tflop: float | None, mbs: int, ga: int, gbs: int, tok_s_gpu: int, precision_cell: str,
         mp_mode: str, act_ckpt: bool, n_params: int, row: str) -> PublishedRun:
    layers, hidden, heads = _MPT_SHAPES[model]
    kind = "h100" if gpu.startswith("h100") else "a100"
    return PublishedRun(
        key=f"mpt-{model}-{gpus}x{gpu}-seq{seq}",
        source=(
            f"{MPT_README}, table '{table}', {_MPT_HEADER}; row '{row}'; shape from llm-foundry "
            f"scripts/train/yamls/pretrain/mpt-{model}.yaml"
        ),
        framework="fsdp",  # Composer + PyTorch FSDP (FSDP1)
        gpu=gpu,
        gpus=gpus,
        gpus_per_node=None,  # not stated
        # A100 tables: 'with 1600 Gbps node-node interconnect (RoCE)' per node; NIC count/speed not split
        nics_per_node=None,
        nic_gbps=None,
        layers=layers, hidden=hidden, heads=heads, kv_heads=heads,  # MPT: multi-head attention
        ffn_hidden=4 * hidden,  # 'expansion_ratio: 4'
        vocab=50368,
        seq_len=seq,
        mlp="gelu",  # llm-foundry ffn.py: _FFN_ACT_FN_DEFAULT = {'name': 'gelu', 'approximate': 'none'}
        params_billion=float(model.rstrip("b")),  # the README's model label; exact count in notes (NumParams)
        global_batch=gbs, micro_batch=mbs,
        tp=1, pp=1, dp=gpus, cp=1,
        virtual_stages=None,
        sequence_parallel=False,  # no tensor parallelism (pure FSDP)
        recompute="full (FSDP activation_checkpointing=True)" if act_ckpt else "none",
        sharding="FSDP FULL_SHARD",
        flash_attention=True,  # README: 'our models use Flash Attention' (the yamls in the index name triton/flash impls)
        precision="bf16",
        tflops_per_gpu=model_tflop,
        mfu_percent=mfu,
        step_time_s=None,  # not printed (12-step throughput runs)
        tokens_per_s_per_gpu=tok_s_gpu,
        flop_convention=_MPT_FLOPS,
        peak_used=_MPT_PEAK[kind],
        notes=(
            f"HFU printed: {hfu}. Precision cell '{precision_cell}', MP Mode '{mp_mode}', "
            f"GradAccum {ga}, NumParams {n_params}. Benchmark of a few steps on the MosaicML platform, "
            "not a production run."
            + (" A100 table heading: '1600 Gbps node-node interconnect (RoCE)'." if kind == "a100" else "")
        ),
    )


_H100 = "H100 80GB BF16"
_A100_80 = "A100 80GB with 1600 Gbps node-node interconnect (RoCE)"
_A100_40 = "A100 40GB with 1600 Gbps node-node interconnect (RoCE)"

MPT_RUNS: tuple[PublishedRun, ...] = (
    _mpt("70b", "h100-80gb", _H100, 2048, 64, 42.57, 56.76, 421.2583, 8, 4, 2048, 1039, "amp_bf16", "DEFAULT", True,
         64862437376,
         "70b | 2048 | 64 | h100_80gb | 42.57 | 56.76 | 4.212583E+14 | 8 | 4 | 2048 | 32 | 66523 | 1039 | 4194304 | "
         "amp_bf16 | DEFAULT | FULL_SHARD | True | False | 64862437376"),
    _mpt("13b", "h100-80gb", _H100, 2048, 64, 39.86, 39.86, 394.3653, 2, 1, 128, 4800, "amp_bf16", "DEFAULT", False,
         12853954560,
         "13b | 2048 | 64 | h100_80gb | 39.86 | 39.86 | 3.943653E+14 | 2 | 1 | 128 | 150 | 307209 | 4800 | 262144 | "
         "amp_bf16 | DEFAULT | FULL_SHARD | False | False | 12853954560"),
    _mpt("7b", "h100-80gb", _H100, 2048, 8, 46.44, 46.44, 459.5096, 6, 1, 48, 10643, "amp_bf16", "DEFAULT", False,
         6658859008,
         "7b | 2048 | 8 | h100_80gb | 46.44 | 46.44 | 4.595096E+14 | 6 | 1 | 48 | 41 | 85144 | 10643 | 98304 | "
         "amp_bf16 | DEFAULT | FULL_SHARD | False | False | 6658859008"),
    _mpt("1b", "h100-80gb", _H100, 2048, 64, 40.85, 40.85, 404.2246, 20, 1, 1280, 44402, "amp_bf16", "DEFAULT", False,
         1315950592,
         "1b | 2048 | 64 | h100_80gb | 40.85 | 40.85 | 4.042246E+14 | 20 | 1 | 1280 | 1387 | 2841754 | 44402 | 2621440 | "
         "amp_bf16 | DEFAULT | FULL_SHARD | False | False | 1315950592"),
    # 'Model TFLOP' printed as 1.663896E+16 for this row (not a per-GPU TFLOP/s); kept as None.
    _mpt("70b", "a100-80gb", _A100_80, 2048, 64, 53.33, 71.1, None, 8, 4, 2048, 410, "bf16", "PURE", True,
         64862437376,
         "70b | 2048 | 64 | a100_80gb | 53.33 | 71.1 | 1.663896E+16 | 8 | 4 | 2048 | 12 | 26274 | 410 | 4194304 | "
         "bf16 | PURE | FULL_SHARD | True | False | 64862437376"),
    _mpt("30b", "a100-80gb", _A100_80, 2048, 8, 55.3, 73.74, 172.5420, 3, 21, 504, 916, "amp_bf16", "DEFAULT", True,
         29975214080,
         "30b | 2048 | 8 | a100_80gb | 55.3 | 73.74 | 1.725420E+14 | 3 | 21 | 504 | 3 | 7330 | 916 | 1032192 | "
         "amp_bf16 | DEFAULT | FULL_SHARD | True | False | 29975214080"),
    _mpt("7b", "a100-80gb", _A100_80, 2048, 8, 64.23, 64.23, 200.3836, 6, 2, 96, 4641, "amp_bf16", "DEFAULT", False,
         6658859008,
         "7b | 2048 | 8 | a100_80gb | 64.23 | 64.23 | 2.003836E+14 | 6 | 2 | 96 | 18 | 37130 | 4641 | 196608 | "
         "amp_bf16 | DEFAULT | FULL_SHARD | False | False | 6658859008"),
    # A100 40GB table: its 'Model TFLOP'-position values (e.g. 1.525992E+16) are not per-GPU TFLOP/s; None.
    _mpt("70b", "a100-40gb", _A100_40, 2048, 128, 48.91, 65.21, None, 4, 1, 512, 376, "bf16", "PURE", True,
         64862437376,
         "70b | 2048 | 128 | a100_40gb | 48.91 | 65.21 | 1.525992E+16 | 4 | 1 | 512 | 23 | 48194 | 376 | 1048576 | "
         "bf16 | PURE | FULL_SHARD | True | False | 64862437376"),
    _mpt("13b", "a100-40gb", _A100_40, 2048, 128, 51.93, 69.24, None, 16, 1, 2048, 1972, "bf16", "PURE", True,
         12853954560,
         "13b | 2048 | 128 | a100_40gb | 51.93 | 69.24 | 1.620216E+16 | 16 | 1 | 2048 | 123 | 252444 | 1972 | 4194304 | "
         "bf16 | PURE | FULL_SHARD | True | False | 12853954560"),
)


# =============================================================================================
# 8. TorchTitan (PyTorch-native FSDP2 / TP / PP / CP), Llama 3 / 3.1.
# =============================================================================================

TT_BENCH = (
    "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md (torchtitan team, end of 2024; "
    "the arXiv paper 2410.06511 itself was not read)"
)
_TT_BENCH_HW = (
    "'Each host has 8 NVIDIA H100 GPUs fully connected with NVLink. Each H100 GPU is equipped with 96GB "
    "HBM2e ... Hosts are inter-connected with backend RDMA network with 400 Gb/s per GPU. We used the "
    "default 500W power limit'"
)
TT_PERF_APR24 = "pytorch/torchtitan docs/performance.md (commit 1ea476e9f, 2024-04-24)"
TT_PERF_DEC24 = "pytorch/torchtitan docs/performance.md (commit 4d88a8a44, 2024-12-03)"
_TT_FLOPS_APR24 = (
    "torchtitan utils.py/train.py at 1ea476e9f: flop_per_token = 6 * num_params (ALL parameters, "
    "embeddings included) + 12 * n_layers * n_heads * head_dim * seq_len (full, non-causal attention); "
    "MFU = flop_per_token * tokens/s / peak; no recompute counted"
)
_TT_FLOPS_AUG24 = (
    "torchtitan utils.py/train.py at 3faaa1a0d: flop_per_token = 6 * num_params (excluding the input "
    "embedding) + 12 * n_layers * n_heads * head_dim * seq_len; no recompute counted"
)
# Llama 3 shapes: Llama 3 paper Table 3 (8B: 32 layers, 4096, FFN 14,336, 32 heads, 8 KV heads;
# 70B: 80, 8192, 28,672, 64, 8; 405B: 126, 16,384, 53,248, 128, 8; vocab 128,000; SwiGLU), which
# agree with torchtitan's ModelArgs (dim / n_layers / n_heads / n_kv_heads) at the same commits.
_L3 = {
    "8B": (32, 4096, 32, 8, 14336),
    "70B": (80, 8192, 64, 8, 28672),
    "405B": (126, 16384, 128, 8, 53248),
}


def _tt(key: str, source: str, size: str, gpu: str, gpus: int, nics: int | None, nic_gbps: float | None,
        seq: int, gbs: int, mbs: int, tp: int, pp: int, dp: int, cp: int, vstages: int | None,
        recompute: str, precision: str, tflops: float | None, mfu: float | None, tok: float,
        flop_conv: str | None, peak: float | None, notes: str, gpus_per_node: int | None = 8) -> PublishedRun:
    layers, hidden, heads, kv, ffn = _L3[size]
    return PublishedRun(
        key=key, source=source, framework="torchtitan", gpu=gpu, gpus=gpus, gpus_per_node=gpus_per_node,
        nics_per_node=nics, nic_gbps=nic_gbps,
        layers=layers, hidden=hidden, heads=heads, kv_heads=kv, ffn_hidden=ffn,
        vocab=128000,  # Llama 3 paper Table 3 (the tokenizer's exact padded size was not read)
        seq_len=seq, mlp="swiglu", params_billion=float(size.rstrip("B")),
        global_batch=gbs, micro_batch=mbs, tp=tp, pp=pp, dp=dp, cp=cp, virtual_stages=vstages,
        sequence_parallel=(None if tp > 1 else False),  # not stated in the tables for TP > 1; False when there is no TP
        recompute=recompute,
        sharding="FSDP2 (fully_shard), full sharding over the dp ranks",
        flash_attention=None,  # not stated in the tables (torchtitan uses PyTorch SDPA)
        precision=precision,
        tflops_per_gpu=tflops, mfu_percent=mfu, step_time_s=None, tokens_per_s_per_gpu=tok,
        flop_convention=flop_conv, peak_used=peak, notes=notes,
    )


TT_RUNS: tuple[PublishedRun, ...] = (
    _tt("torchtitan-llama3-8b-64xa100", (
            f"{TT_PERF_APR24}: 'WPS ... and MFU ... on Llama 3 models with FSDP2 on 64 A100 (80GB) GPUs', "
            "row '| 8B | 1 | selective op | 2973 | 58.2% |'; 'global batch size = local batch size 1 * number "
            "of FSDP ranks 64 = 64'; train_configs/llama3_8b.toml at that commit: 'seq_len = 8192'"),
        "8B", "a100-80gb", 64, None, None, 8192, 64, 1, 1, 1, 64, 1, None,
        "selective (per-op policy, 'selective op')", "bf16", None, 58.2, 2973,
        _TT_FLOPS_APR24, 312,  # get_peak_flops: 'if "A100" in device_name: return 312e12'
        "Same table: 'selective layer' AC gives 2904 WPS / 56.8%. Node size and interconnect not stated.",
        gpus_per_node=None),
    _tt("torchtitan-llama3-70b-64xa100", (
            f"{TT_PERF_APR24}: row '| 70B | 1 | full | 331 | 51.7% |' (64 A100 80GB, FSDP2, global batch 64); "
            "train_configs/llama3_70b.toml: 'seq_len = 8192'"),
        "70B", "a100-80gb", 64, None, None, 8192, 64, 1, 1, 1, 64, 1, None,
        "full", "bf16", None, 51.7, 331,
        _TT_FLOPS_APR24, 312, "1D FSDP2 (the toml's tensor_parallel_degree = 8 was not used for this 1D table). Node size and interconnect not stated.",
        gpus_per_node=None),
    _tt("torchtitan-llama31-405b-128xh100-2d-bf16", (
            f"{TT_PERF_DEC24}: 'Llama 3.1 (405B) on 128 H100 (94GB memory)' ... 'we only tested 2D parallelism "
            "(FSDP2 + Tensor Parallel)', row '| 405B | 2 | full | 109 | 29.0% | None'; 'global batch size = "
            "local batch size 2 * number of FSDP ranks 16 = 32'; train_configs/llama3_405b.toml: 'seq_len = "
            "8192', 'tensor_parallel_degree = 8'"),
        "405B", "h100-sxm-hbm2e-lower-tdp", 128, None, None, 8192, 32, 2, 8, 1, 16, 1, None,
        "full", "bf16", None, 29.0, 109,
        _TT_FLOPS_AUG24, 989,  # get_peak_flops: SXM -> 989e12, used for this lower-TDP part (footnote)
        "Footnote: 'We used HBM2e based lower TDP SXM H100(95GB) for our test, the actual peak TFLOPs number "
        "is between SXM and NVL ... So this MFU number is lower than actual MFU because we use the peak "
        "number of SXM directly.' Same table: Float8 177 WPS / 23.46%; Float8 + Async TP 185 / 24.52%. "
        "Whether torch.compile was on for the 'None' row is not stated (the toml has compile = true). "
        "Node size and interconnect not stated in that document.",
        gpus_per_node=None),
    _tt("torchtitan-llama31-8b-8xh100-fsdp-bf16", (
            f"{TT_BENCH}, Table 1 '1D Parallelism (FSDP). Llama 3.1 8B model. 8 GPUs. Local batch size 2, "
            "global batch size 16. Selective activation checkpointing.', row '| FSDP | 5,762 | 82.4 |'; "
            f"{_TT_BENCH_HW}"),
        "8B", "h100-sxm-96gb-hbm2e-500w", 8, 8, 400, 8192, 16, 2, 1, 1, 8, 1, None,
        "selective", "bf16", None, None, 5762, None, None,
        "TPS/GPU read at iteration 90; peak memory 82.4 GiB. seq_len not in the table: 8192 is the "
        "train_configs/llama3_8b.toml default at the benchmarked torchtitan commit 9dec370. nics_per_node "
        "derived from '400 Gb/s per GPU' x 8 GPUs per host. MFU not reported ('33% to 39% MFU' for 1D 8B "
        "without Float8, with/without torch.compile). Same table: + torch.compile 6,667; + Float8 8,532.",
    ),
    _tt("torchtitan-llama31-8b-128xh100-fsdp-bf16", (
            f"{TT_BENCH}, Table 3 '1D Parallelism (FSDP). Llama 3.1 8B model. 128 GPUs. Local batch size 2, "
            "global batch size 256. Selective activation checkpointing.', row '| FSDP | 5,605 | 67.0 |'; "
            f"{_TT_BENCH_HW}"),
        "8B", "h100-sxm-96gb-hbm2e-500w", 128, 8, 400, 8192, 256, 2, 1, 1, 128, 1, None,
        "selective", "bf16", None, None, 5605, None, None,
        "seq_len from the toml default (see the 8-GPU row). Same table: + torch.compile 6,514; + Float8 8,380.",
    ),
    _tt("torchtitan-llama31-8b-8xh100-fsdp-compile-bf16", (
            f"{TT_BENCH}, Table 1 (as torchtitan-llama31-8b-8xh100-fsdp-bf16), row '| FSDP + torch.compile | 6,667 | 77.0 |'; "
            f"{_TT_BENCH_HW}"),
        "8B", "h100-sxm-96gb-hbm2e-500w", 8, 8, 400, 8192, 16, 2, 1, 1, 8, 1, None,
        "selective", "bf16", None, None, 6667, None, None,
        "The compile twin of torchtitan-llama31-8b-8xh100-fsdp-bf16 (5,762 TPS/GPU): 6667 / 5762 = 1.157 (derived). "
        "TorchTitan compiles each TransformerBlock (torchtitan/parallelisms/parallelize_llama.py apply_compile at "
        "9dec370). seq_len from the toml default.",
    ),
    _tt("torchtitan-llama31-8b-128xh100-fsdp-compile-bf16", (
            f"{TT_BENCH}, Table 3 (as torchtitan-llama31-8b-128xh100-fsdp-bf16), row '| FSDP + torch.compile | 6,514 | 62.0 |'; "
            f"{_TT_BENCH_HW}"),
        "8B", "h100-sxm-96gb-hbm2e-500w", 128, 8, 400, 8192, 256, 2, 1, 1, 128, 1, None,
        "selective", "bf16", None, None, 6514, None, None,
        "The compile twin of torchtitan-llama31-8b-128xh100-fsdp-bf16 (5,605 TPS/GPU): 6514 / 5605 = 1.162 (derived).",
    ),
    _tt("torchtitan-llama31-70b-256xh100-2d-fp8", (
            f"{TT_BENCH}, Table 4 '2D parallelism (FSDP + TP) + torch.compile + Float8. Llama 3.1 70B model. "
            "256 GPUs (FSDP 32, TP 8). Local batch size 16, global batch size 512. Full activation "
            f"checkpointing.', row '| 2D | 829 | 71.9 |'; {_TT_BENCH_HW}"),
        "70B", "h100-sxm-96gb-hbm2e-500w", 256, 8, 400, 8192, 512, 16, 8, 1, 32, 1, None,
        "full", "fp8", None, None, 829, None, None,
        "Float8 on nn.Linear only (attention stays BF16). With AsyncTP: 876 TPS/GPU, 67.6 GiB. seq_len from "
        "the toml default. 'Local batch size 16' is per FSDP rank (16 x 32 = 512)."),
    _tt("torchtitan-llama31-405b-512xh100-3d-fp8", (
            f"{TT_BENCH}, Table 5 '3D parallelism (FSDP + TP + PP) + torch.compile + Float8 + AsyncTP. Llama "
            "3.1 405B model. 512 GPUs (FSDP 8, TP 8, PP8). Local batch size 32, global batch size 256. Full "
            f"activation checkpointing.', row '| Interleaved 1F1B | 128 | 72.7 |'; {_TT_BENCH_HW}"),
        "405B", "h100-sxm-96gb-hbm2e-500w", 512, 8, 400, 8192, 256, None, 8, 8, 8, 1,
        None,  # interleaved, but the number of stages per rank is not stated
        "full", "fp8", None, None, 128, None, None,
        "Same table: plain 1F1B 100 TPS/GPU (82.5 GiB). Micro-batch size not stated. Table 6 (4D with CP, "
        "local batch 8, 1F1B): 76 TPS/GPU at seq 32768 (FSDP 8, CP 1) down to 16 at 262144 (FSDP 1, CP 8)."),
)


# =============================================================================================
# 9. NVIDIA NeMo (24.07) and Megatron-Bridge (26.04.01) performance summaries, DGX-H100, FP8.
# =============================================================================================

NEMO_2407 = "NVIDIA/NeMo docs/source/performance/performance_summary.md (NeMo 24.07 container)"
_NEMO_2407_HEADER = (
    "'The results in the table below show pre-training performance for various tasks at FP8 precision. "
    "Container: NeMo24.07, System: DGX-H100'; columns 'Model | #-GPUs | GBS | MBS | Sequence Length | TP | "
    "PP | CP | VP | Tokens / sec / GPU | Model TFLOP / sec / GPU | Est. time to train'"
)
MBRIDGE = "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md, section '26.04.01 NeMo Container'"
_MBRIDGE_HEADER = (
    "columns 'System | #-GPUs | Precision | GBS | MBS | Sequence Length | FSDP | TP | PP | CP | VP | EP | "
    "Tokens / sec / GPU | Model TFLOP / sec / GPU'; 'FSDP = 0: use DDP'"
)


def _nemo(key: str, source: str, size: str, gpus: int, gbs: int, mbs: int, seq: int, tp: int, pp: int,
          cp: int, vp: int, tok: float, tflops: float, notes: str) -> PublishedRun:
    layers, hidden, heads, kv, ffn = _L3[size]
    return PublishedRun(
        key=key, source=source, framework="nemo",
        gpu="h100-sxm5",  # 'DGX-H100'
        gpus=gpus, gpus_per_node=8,  # DGX-H100 systems hold 8 GPUs; not restated on the pages
        nics_per_node=None, nic_gbps=None,  # not stated on the pages
        layers=layers, hidden=hidden, heads=heads, kv_heads=kv, ffn_hidden=ffn,
        vocab=128000,  # Llama 3 paper Table 3; not stated on the page
        seq_len=seq, mlp="swiglu", params_billion=float(size.rstrip("B")),
        global_batch=gbs, micro_batch=mbs, tp=tp, pp=pp,
        dp=gpus // (tp * pp * cp),  # derived
        cp=cp, virtual_stages=vp,
        sequence_parallel=None,  # not stated
        recompute=None,  # not stated
        sharding=None,  # 24.07 page: not stated; Megatron-Bridge rows: 'FSDP 0' = DDP (distributed optimizer use not stated)
        flash_attention=None,  # not stated
        precision="fp8",
        tflops_per_gpu=tflops, mfu_percent=None, step_time_s=None, tokens_per_s_per_gpu=tok,
        flop_convention="'Model TFLOP / sec / GPU' (model FLOPs; formula not given on the page)",
        peak_used=None,
        notes=notes,
    )


NEMO_RUNS: tuple[PublishedRun, ...] = (
    _nemo("nemo2407-llama3-8b-8xh100-fp8",
          f"{NEMO_2407}, {_NEMO_2407_HEADER}; row '| LLAMA3-8B | 8 | 128 | 1 | 8192 | 1 | 1 | 2 | 1 | 12036 | 697 | 9 |'",
          "8B", 8, 128, 1, 8192, 1, 1, 2, 1, 12036, 697,
          "FP8 (Transformer Engine). Context parallelism 2 at 8K sequence."),
    _nemo("nemo2407-llama3-70b-64xh100-fp8",
          f"{NEMO_2407}, {_NEMO_2407_HEADER}; row '| LLAMA3-70B | 64 | 128 | 1 | 8192 | 4 | 4 | 2 | 5 | 1533 | 738 | 74 |'",
          "70B", 64, 128, 1, 8192, 4, 4, 2, 5, 1533, 738,
          "FP8. VP 5 interleaved chunks per pipeline rank."),
    _nemo("mbridge2604-llama3-70b-64xh100-fp8",
          f"{MBRIDGE}, table 'Model: LLAMA3_70B', {_MBRIDGE_HEADER}; row '| DGX-H100 | 64 | FP8 | 256 | 1 | 8192 | 0 | 4 | 8 | 1 | 5 | n/a | 1664 | 731 |'",
          "70B", 64, 256, 1, 8192, 4, 8, 1, 5, 1664, 731,
          "Megatron-Bridge (NeMo Framework) recipe; 'FSDP 0' = DDP. FP8 flavour not specified in this "
          "row (other releases label H100 rows 'FP8-CS')."),
    _nemo("mbridge2604-llama31-405b-1024xh100-fp8",
          f"{MBRIDGE}, table 'Model: LLAMA3.1_405B', {_MBRIDGE_HEADER}; row '| DGX-H100 | 1024 | FP8 | 1536 | 1 | 8192 | 0 | 8 | 8 | 2 | 8 | n/a | 328 | 827 |'",
          "405B", 1024, 1536, 1, 8192, 8, 8, 2, 8, 328, 827,
          "Megatron-Bridge recipe; 'FSDP 0' = DDP; CP 2 at 8K sequence; VP 8."),
)


# =============================================================================================
# All runs.
# =============================================================================================

RUNS: tuple[PublishedRun, ...] = (
    LLAMA3_RUNS
    + BLOOM_RUNS
    + MTNLG_RUNS
    + OPT_RUNS
    + NEOX_RUNS
    + MLM_GPT3_RUNS
    + MLM_H100_RUNS
    + MPT_RUNS
    + TT_RUNS
    + NEMO_RUNS
)

assert len({r.key for r in RUNS}) == len(RUNS), "duplicate run keys"
