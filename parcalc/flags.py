"""The flag vocabulary: every flag of every command, in one table, and its hidden spellings.

One concept, one name, in every command: --gpus, --tp, --pp, --dp, --cp, --ep, --batch (global),
--micro-batch, --seq-len, --dtype (an element type), --precision (a training recipe), --recompute
KIND, --zero STAGE, --shard-group... FLAGS says, for each flag, what it means, its type, its unit,
its default and which commands take it; docs/flags.md is written from it (`python -m
parcalc.flags > docs/flags.md`) and tests/test_flags.py checks it against every command's real
options, so the table cannot drift from the CLI.

Aliases are accepted without being shown: parcalc's old spellings (bubble --stages, comm-volume
--workers) and Megatron-LM's argument names (megatron/training/arguments.py), so that the model,
batch and parallelism flags of a Megatron launch line paste in. MEGATRON_VALUES turns Megatron's
switches into parcalc's flag and value (--bf16 is --precision mixed-bf16); MEGATRON_IGNORED lists
Megatron arguments that change nothing parcalc computes (learning rate, data paths, logging): they
are dropped with one note on stderr. Any other unknown flag stays an error.

This module is imported only when a command line holds a flag its command does not declare
(parcalc.cli._accept_vocabulary), by the docs and by the tests: start-up does not pay for it.
"""

import sys

from parcalc.named_tuple import NamedTuple

# The commands that take --format / --output and --presets (the calculation commands and their kin).
_OUT = ("peak-flops", "intensity", "comm-volume", "bubble", "memory", "flops", "fit", "presets list", "presets show",
        "calibrate gemm", "calibrate nccl", "calibrate trace", "report", "analyze", "scaling")  # fmt: skip
_PRESETS = tuple(c for c in _OUT if c != "bubble")
_MODEL = ("comm-volume", "memory", "flops", "fit")  # the transformer's shape flags
_SHAPE = _MODEL + ("scaling",)  # the shape flags of a model (scaling takes them, not --gpus/--cp as the others do)
# Every command but sweep takes --config (parcalc.cli._give_config_option; sweep reads its run file as its argument).
_CONFIG = _OUT + ("schema",)
_PIPE = ("comm-volume", "bubble", "memory", "flops", "fit")  # the uneven pipeline split

MEGATRON = "NVIDIA/Megatron-LM megatron/training/arguments.py"


# A NamedTuple, not a frozen dataclass: the table below makes 139 of them when a command line holds a Megatron-LM or an
# old spelling (parcalc.cli._accept_vocabulary), and a tuple's __new__ is the cheapest constructor (the module's
# import 1.0 -> 0.6 ms, benchmarks/startup.py's "comm-volume 3d megatron"). No `from __future__ import annotations`
# here for the same reason: typing.NamedTuple would compile each field's annotation string (typing.ForwardRef).
class Flag(NamedTuple):
    """One flag: `name` as typed; `meaning` in a line; `type` one of TYPES; `unit` of its value
    (base units, or what the value counts); `default` in words ("" when there is none, "required"
    when a command needs it); `commands` that take it; `aliases` hidden spellings of it."""

    name: str
    meaning: str
    type: str
    unit: str
    default: str
    commands: tuple[str, ...]
    aliases: tuple[str, ...] = ()
    short: str = ""


TYPES = {
    "count": "a whole number of at least 1 (k, M and 2^n forms as `parcalc.units.parse_count` reads them)",
    "number": "a plain number (a ratio, a factor, a share such as 40%)",
    "quantity": "a number with its unit, e.g. 80GiB, 900GB/s, 1.41GHz, 10ms, 700W",
    "choice": "one of the listed words, in any case",
    "switch": "on when given (--no-X turns a default-on switch off)",
    "name": "a preset name (case-insensitive) or a file",
    "text": "free text",
    "path": "a file or directory",
    "list": "several values, comma-separated or the flag repeated",
}

FLAGS: tuple[Flag, ...] = (
    # output and presets, shared by every command
    Flag("--format", "Output format: table, json, csv, markdown or latex (calibrate: text or json; report: markdown, latex or json, -o .pdf a PDF; sweep: csv or json)", "choice", "", "table (or from --output's extension; sweep: csv)", _OUT + ("sweep",), short="-f"),
    Flag("--output", "Write the result to FILE instead of stdout, all or nothing (scaling: .svg draws the curve; fit: .trace.json the step as a Chrome trace; calibrate trace: .yaml the calibrated GPU preset)", "path", "", "stdout", _OUT + ("sweep",), short="-o"),
    Flag("--presets", "Extra preset directory (gpus/, links/, models/ inside); repeatable; also PARCALC_PRESETS", "path", "", "", _PRESETS),
    Flag("--table", "With --format csv: which of the result's tables to print (CSV holds one)", "choice", "", "the command's main table", _OUT[:7] + ("presets list", "presets show", "analyze", "scaling")),
    Flag("--config", "Read flags from a run file (YAML or .toml; - for stdin): keys are flag names, the command line wins", "path", "", "",
         _CONFIG),
    # the model
    Flag("--model", "Model preset, or a Hugging Face config.json / model directory", "name", "", "", _SHAPE + ("intensity", "analyze", "calibrate trace")),
    Flag("--layers", "Transformer layers", "count", "layers", "the model's", _PIPE + ("scaling",), aliases=("--num-layers",)),
    Flag("--hidden", "Hidden size (model dimension)", "count", "elements", "the model's", _SHAPE, aliases=("--hidden-size",)),
    Flag("--heads", "Attention heads", "count", "heads", "the model's", _SHAPE, aliases=("--num-attention-heads",)),
    Flag("--kv-heads", "Key/value heads (grouped-query attention)", "count", "heads", "--heads", _SHAPE, aliases=("--num-query-groups",)),
    Flag("--ffn-hidden", "MLP width", "count", "elements", "4 x hidden (8/3 x hidden for swiglu)", _SHAPE, aliases=("--ffn-hidden-size",)),
    Flag("--mlp", "MLP kind: gelu, relu, swiglu or geglu", "choice", "", "the model's, else gelu", _SHAPE),
    Flag("--vocab", "Vocabulary size", "count", "tokens", "the model's", _SHAPE, aliases=("--padded-vocab-size", "--vocab-size")),
    Flag("--tied", "Tie the LM head to the word embeddings (--untied: a separate head)", "switch", "", "the model's", _SHAPE,
         aliases=("--untie-embeddings-and-output-weights",)),
    # the batch
    Flag("--batch", "Global batch: sequences per iteration (intensity: sequences through the kernel; scaling --weak: per GPU)", "count", "sequences", "",
         ("intensity", "comm-volume", "memory", "flops", "fit", "scaling", "calibrate trace"),
         aliases=("--global-batch-size",)),
    Flag("--micro-batch", "Sequences per micro-batch per replica", "count", "sequences", "1", ("comm-volume", "memory", "fit", "scaling"), aliases=("--micro-batch-size",)),
    Flag("--micro-batches", "Micro-batches per iteration of each pipeline", "count", "micro-batches", "p (2p interleaved)", ("bubble", "memory")),
    Flag("--seq-len", "Sequence length", "count", "tokens", "the model's maximum", ("intensity", "comm-volume", "memory", "flops", "fit", "scaling", "calibrate trace"), aliases=("--seq-length",)),
    # the GPUs and the parallel layout
    Flag("--gpus", "GPUs in all: tp x pp x cp x dp (comm-volume --collective: the ranks taking part; scaling: the curve's counts, a list such as 1,2,4,...,64)",
         "count", "GPUs", "the product of the degrees (scaling: required)", _SHAPE, aliases=("--workers",)),
    Flag("--tp", "Tensor-parallel degree (scaling: pinned at every N)", "count", "ranks", "1", ("comm-volume", "memory", "fit", "scaling"), aliases=("--tensor-model-parallel-size",)),
    Flag("--pp", "Pipeline-parallel degree (stages; scaling: pinned at every N)", "count", "stages", "1", _PIPE + ("scaling",), aliases=("--pipeline-model-parallel-size", "--stages")),
    Flag("--dp", "Data-parallel degree", "count", "replicas", "gpus / (tp x pp x cp)", ("comm-volume", "memory", "fit")),
    Flag("--cp", "Context-parallel degree: each sequence split over c ranks", "count", "ranks", "1", _MODEL, aliases=("--context-parallel-size",)),
    Flag("--cp-comm", "How attention gets the other CP ranks' K/V: p2p, all-gather or a2a", "choice", "", "p2p", ("comm-volume", "memory", "fit")),
    Flag("--ep", "Expert-parallel degree of an MoE model (folds over tp x cp x dp)", "count", "ranks", "1", ("comm-volume", "memory", "fit"), aliases=("--expert-model-parallel-size",)),
    Flag("--etp", "Expert tensor-parallel degree", "count", "ranks", "--tp", ("comm-volume", "memory", "fit"), aliases=("--expert-tensor-parallel-size",)),
    Flag("--zero", "ZeRO stage over the data-parallel ranks: 0 (DDP), 1, 2 or 3 (fit --search: repeatable)", "choice", "", "0 (fit --search: 0-3)", ("comm-volume", "memory", "fit", "scaling")),
    Flag("--shard-group", "Hybrid sharding: ZeRO shards over S data-parallel ranks, replicated over dp x cp / S", "count", "ranks", "dp x cp (full sharding)", ("comm-volume", "memory", "fit")),
    Flag("--sequence-parallel", "Megatron sequence parallelism with TP (with --tp 1: a stated no-op)", "switch", "", "off (fit --search: both; torchtitan: on with TP)", ("comm-volume", "memory", "fit", "scaling")),
    Flag("--schedule", "Pipeline schedule: gpipe, 1f1b, interleaved, zb-h1, zb-h2, zb-v, dualpipev, dualpipe (fit: all but gpipe; fit --search: a split-backward one but dualpipe)", "choice", "", "1f1b", ("comm-volume", "bubble", "memory", "fit")),
    Flag("--chunks", "Model chunks (virtual stages) per device, interleaved schedule", "count", "chunks", "1 (bubble interleaved: 2)", ("comm-volume", "bubble", "memory", "fit"),
         aliases=("--num-virtual-stages-per-pipeline-rank",)),
    Flag("--first-stage-layers", "Layers on the first pipeline stage", "count", "layers", "an even split", _PIPE, aliases=("--decoder-first-pipeline-num-layers",)),
    Flag("--last-stage-layers", "Layers on the last pipeline stage", "count", "layers", "an even split", _PIPE, aliases=("--decoder-last-pipeline-num-layers",)),
    Flag("--pipeline-layout", "Every virtual pipeline stage's layers, Megatron-LM's layout string (E t m L |)", "text", "", "an even split",
         ("comm-volume", "bubble", "flops", "memory", "fit"), aliases=("--pipeline-model-parallel-layout",)),
    Flag("--embedding-in-split", "The embedding takes one layer slot of the first stage", "switch", "", "off", _PIPE, aliases=("--account-for-embedding-in-pipeline-split",)),
    Flag("--loss-in-split", "The LM head and loss take one layer slot of the last stage", "switch", "", "off", _PIPE, aliases=("--account-for-loss-in-pipeline-split",)),
    Flag("--gpus-per-node", "GPUs per node (the NVLink domain)", "count", "GPUs", "8 (fit, scaling: the GPU preset's node)", ("comm-volume", "fit", "scaling")),
    # numbers and recipes
    Flag("--dtype", "Element type: of the numbers moved (comm-volume, intensity), of the peak FLOP/s (peak-flops, flops, fit, calibrate gemm)", "choice", "",
         "bf16 (intensity: fp16; fit: the --precision's GEMM type)", ("peak-flops", "intensity", "comm-volume", "flops", "fit", "calibrate gemm")),
    Flag("--grad-dtype", "Element type of the gradients reduced", "choice", "", "--dtype", ("comm-volume",)),
    Flag("--precision", "Training recipe: fp32, mixed-fp16, mixed-bf16, bf16, fp8, fp4 (NVFP4, Blackwell)", "choice", "", "mixed-bf16 (mixed-fp16 without bf16)", ("memory", "fit", "scaling")),
    Flag("--fp8-recipe", "With --precision fp8: delayed, current, blockwise or mxfp8 scaling", "choice", "", "delayed", ("fit",)),
    Flag("--fp8-all-gather", "FSDP all-gathers the Float8 linears' weights in FP8 (torchao's enable_fsdp_float8_all_gather; memory and "
         "fit: with --precision fp8 --framework torchtitan)", "switch", "", "off", ("memory", "fit", "comm-volume")),
    Flag("--compile-loss", "With --compile --framework torchtitan: the loss compiled too (torchtitan from 2025-04-02)", "switch", "", "off",
         ("memory", "fit")),
    Flag("--expandable-segments", "With --framework fsdp2 or torchtitan: the caching allocator replayed with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; "
         "--no-expandable-segments: with its defaults (a run started with torchrun directly)", "switch", "", "the framework launcher's (torchtitan: on)",
         ("memory",)),
    Flag("--fp32-grads", "Mixed precision with fp32 gradients (Megatron-LM's main_grad)", "switch", "", "off (fit: the framework's)", ("memory", "fit")),
    Flag("--optimizer", "Optimizer: adam, adamw, lion, sgd-momentum, sgd, adam-8bit, adafactor, muon", "choice", "", "adamw", ("memory", "fit")),
    Flag("--offload", "Move to host memory (repeatable): optimizer, activations", "choice", "", "none", ("memory", "fit")),
    Flag("--recompute", "Activation recomputation: none, selective, full, op (fit --search: repeatable; comm-volume: a bare --recompute is full)", "choice", "",
         "none (fit --search: none, selective, full)", ("comm-volume", "memory", "flops", "fit", "scaling"), aliases=("--recompute-granularity",)),
    Flag("--recompute-layers", "With --recompute full: recompute only the first n layers of each stage", "count", "layers", "all", ("memory", "flops", "fit"),
         aliases=("--recompute-num-layers",)),
    Flag("--recompute-modules", "With --recompute selective: Megatron-LM's modules recomputed (core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts)",
         "choice", "", "core_attn", ("memory", "flops", "fit")),
    Flag("--flash-attention", "FlashAttention/SDPA, what frameworks run: no s x s scores stored, attention timed as its fused kernel; --no-flash-attention: "
         "the scores materialised (Korthikanti et al. 2022's 5as^2b), attention as explicit GEMMs and softmax", "switch", "",
         "on", ("intensity", "memory", "flops", "fit", "scaling"), aliases=("--use-flash-attn",)),
    Flag("--compile", "torch.compile (Inductor): memory-bound kernels between GEMMs fused (fit, intensity --model); what its partitioner saves for backward (memory); "
         "under --framework torchtitan the step walk follows each block's compiled code (memory, fit)",
         "switch", "", "off", ("intensity", "memory", "fit")),
    Flag("--kernels", "The memory-bound kernels between GEMMs: fused (Megatron-LM / Transformer Engine) or eager (one per PyTorch op of the model code)",
         "choice", "", "the framework's (intensity: fused)", ("intensity", "fit")),
    Flag("--dropout", "Dropout layers and their masks (--no-dropout: none)", "switch", "", "the model's", ("memory", "fit")),
    Flag("--causal", "Count the causal attention products at half", "switch", "", "off", ("flops",)),
    # the GPU and the network
    Flag("--gpu", "GPU preset (see `parcalc presets list gpus`); fit --search: repeatable; comm-volume --collective: the node NCCL's model times the call on", "name", "", "",
         ("peak-flops", "intensity", "comm-volume", "memory", "flops", "fit", "calibrate gemm", "scaling", "calibrate trace")),
    Flag("--capacity", "GPU memory capacity instead of --gpu's", "quantity", "B", "the GPU's", ("memory", "fit")),
    Flag("--reserve", "Memory the formulas do not see (CUDA context, NCCL buffers, fragmentation)", "quantity", "B", "2GiB", ("memory", "fit")),
    Flag("--peak", "Peak FLOP/s instead of the GPU preset's", "quantity", "FLOP/s", "the GPU's", ("intensity", "flops", "fit", "calibrate gemm")),
    Flag("--power-limit", "Board power limit per GPU: Tensor Core rates from the GPU preset's power curve", "quantity", "W",
         "the GPU preset's own limit, else its rated peaks", ("peak-flops", "intensity", "fit")),
    Flag("--bandwidth", "Bandwidth instead of a preset's: memory (intensity), link per direction (comm-volume, analyze)", "quantity", "B/s", "the preset's", ("intensity", "comm-volume", "analyze")),
    Flag("--latency", "Latency per message (alpha) instead of --link's", "quantity", "s", "the link's", ("comm-volume", "analyze")),
    Flag("--link", "Link preset within a node", "name", "", "nvlink3 (fit, scaling: the GPU's)", ("comm-volume", "fit", "analyze", "scaling")),
    Flag("--inter-node-link", "Link preset between nodes (one network card's)", "name", "", "ib-hdr (fit, scaling: the GPU's)", ("comm-volume", "fit", "scaling")),
    Flag("--nics-per-node", "Network cards per node for GPU traffic (rails)", "count", "NICs", "the GPUs per node", ("fit", "calibrate nccl")),
    Flag("--host-link", "The GPU's link to the host, for --offload", "name", "", "the GPU's PCIe", ("fit",)),
    Flag("--efficiency", "A factor on every kernel's rate", "number", "", "1", ("fit",)),
    Flag("--framework", "Framework profile: megatron, deepspeed, fsdp2, torchtitan, hf (memory: none, the textbook sum)", "name", "", "megatron", ("fit", "scaling", "memory", "calibrate trace")),
    Flag("--dp-overlap", "Overlap the data-parallel reduce and gather with compute", "switch", "", "the framework's", ("fit",), aliases=("--overlap-grad-reduce",)),
    Flag("--tp-comm-overlap", "Overlap TP collectives with the GEMMs", "switch", "", "the framework's", ("fit",)),
    Flag("--ideal-network", "An ideal network: every collective and pipeline send takes 0 s", "switch", "", "off", ("fit", "scaling")),
    Flag("--allow-cross-node-tp", "--search: let tensor parallelism span nodes", "switch", "", "off", ("fit",)),
    # MoE
    Flag("--moe-imbalance", "MoE: the busiest rank's tokens over the balanced share", "number", "", "1", ("comm-volume", "memory", "fit")),
    Flag("--moe-dispatcher", "How MoE tokens reach their experts: alltoall, deepep or hybridep", "choice", "", "alltoall", ("fit",)),
    Flag("--max-nodes-per-token", "Node-limited routing: each token's experts on at most M nodes", "count", "nodes", "no limit", ("fit",)),
    Flag("--ep-overlap", "What hides MoE dispatch and combine: none, shared, 1f1b", "choice", "", "none", ("fit",)),
    Flag("--expert-activation", "MoE experts' activation with the routing probabilities: fused or eager (Primus's Qwen3 configs)", "choice", "", "fused", ("fit",)),
    Flag("--moe-routing", "Which experts a token's top-k are: uniform or round-robin (Primus's 'even')", "choice", "", "uniform", ("fit",)),
    Flag("--moment-dtype", "Adam's moments (every optimizer state) in fp32, bf16 or fp16 beside the fp32 master copy", "choice", "", "fp32", ("memory",)),
    Flag("--recompute-mla-up-proj", "Multi-head latent attention: recompute the up-projections and RoPE in backward, keep the latents (adds mla_up_proj to --recompute-modules)", "switch", "", "off",
         ("memory",)),
    # fit
    Flag("--search", "Evaluate every configuration and rank those that fit", "switch", "", "off", ("fit",)),
    Flag("--top", "--search: layouts shown (tp x pp x dp x cp x ep), each at its fastest configuration", "count", "layouts", "5", ("fit",)),
    Flag("--explain", "--search: the derivation of the best configuration", "switch", "", "off", ("fit",)),
    Flag("--interleaved", "--search: try interleaved schedules (--no-interleaved: not)", "switch", "", "on", ("fit",)),
    Flag("--max-layers", "Strategy table: the most layers each strategy holds (--no-max-layers: skip)", "switch", "", "on", ("fit",)),
    Flag("--rank-by", "--search: rank by time or cost", "choice", "", "time", ("fit",)),
    # a whole run
    Flag("--tokens", "Training tokens of the whole run", "quantity", "tokens", "", ("flops", "fit")),
    Flag("--iterations", "Iterations of the whole run instead of --tokens", "count", "iterations", "", ("flops", "fit")),
    Flag("--gpu-power", "Power per GPU for the energy", "quantity", "W", "the GPU's board power", ("flops", "fit")),
    Flag("--pue", "The datacentre's power usage effectiveness", "number", "", "1", ("flops", "fit")),
    Flag("--price", "Price per GPU-hour (fit --search: one per --gpu)", "quantity", "currency/GPU-h", "", ("flops", "fit")),
    # flops
    Flag("--params", "Parameters N for 6ND (analyze: for the gradient bytes)", "quantity", "parameters", "the model's", ("flops", "analyze")),
    Flag("--step-time", "Measured time of one iteration, for MFU and HFU", "quantity", "s", "", ("flops",)),
    Flag("--tflops-per-gpu", "Achieved hardware TFLOP/s per GPU, for the run's length", "number", "TFLOP/s", "", ("flops",)),
    Flag("--mfu", "Model FLOPs utilization, for the run's length", "number", "fraction", "", ("flops",)),
    # peak-flops
    Flag("--clock", "Clock rate", "quantity", "Hz", "the GPU's boost clock", ("peak-flops",)),
    Flag("--sms", "Streaming multiprocessors (AMD: compute units)", "count", "SMs", "the GPU's", ("peak-flops",)),
    Flag("--fma-per-clock", "Dense FMA per clock per SM for --dtype", "count", "FMA/clock", "the GPU's", ("peak-flops",)),
    Flag("--sparse", "2:4 structured sparsity (x2) where the datasheet gives it", "switch", "", "off", ("peak-flops",)),
    # intensity
    Flag("--m", "GEMM: rows of X (X is m x k)", "count", "elements", "", ("intensity",)),
    Flag("--k", "GEMM: columns of X, rows of W", "count", "elements", "", ("intensity",)),
    Flag("--n", "GEMM: columns of W (W is k x n)", "count", "elements", "", ("intensity",)),
    # comm-volume
    Flag("--collective", "One collective's algorithms (calibrate nccl: the collective the file measured)", "choice", "", "", ("comm-volume", "calibrate nccl")),
    Flag("--strategy", "Every collective of one iteration: dp, zero1-3, fsdp, tp, pp, cp, 3d, ep or all (scaling: how the layout grows with N: dp, zero1-3, tp, pp)",
         "choice", "", "(scaling: dp)", ("comm-volume", "scaling")),
    Flag("--algorithm", "Collective algorithm: ring, tree, ...", "choice", "", "ring (all-reduce)", ("comm-volume",)),
    Flag("--size", "--collective: message size", "quantity", "B", "", ("comm-volume",)),
    Flag("--elements", "--collective: message size in elements of --dtype", "count", "elements", "", ("comm-volume",)),
    Flag("--compare", "--collective: every algorithm side by side", "switch", "", "off", ("comm-volume",)),
    Flag("--bucket-size", "DDP / ZeRO bucket cap", "quantity", "B", "25MiB", ("comm-volume",)),
    Flag("--ddp-first-iteration", "DDP's first iteration (buckets in parameter order)", "switch", "", "off", ("comm-volume",)),
    Flag("--shard-padding", "FSDP2 pads each tensor's dim 0 to the group (--no-shard-padding: not)", "switch", "", "on", ("comm-volume",)),
    Flag("--reshard-root", "FSDP: reshard the root module after forward (--no-reshard-root: keep it)", "switch", "", "on", ("comm-volume",)),
    Flag("--vocab-parallel", "TP: vocabulary-parallel logits (--no-vocab-parallel: gathered)", "switch", "", "on", ("comm-volume",)),
    # bubble
    Flag("--t-forward", "Forward time of one micro-batch on one stage (or layer, with --layers)", "quantity", "s", "1 s (a unit)", ("bubble",)),
    Flag("--t-backward", "Whole backward time, B + W", "quantity", "s", "2 x forward", ("bubble",)),
    Flag("--t-weight", "Weight-gradient part W of the backward", "quantity", "s", "half of it", ("bubble",)),
    Flag("--stage-times", "Forward time of each stage (unbalanced stages)", "list", "s", "", ("bubble",)),
    Flag("--p2p-latency", "Point-to-point latency between stages, in the simulation", "quantity", "s", "0", ("bubble",)),
    Flag("--target", "Bubble target: the fewest micro-batches that reach it", "number", "fraction", "", ("bubble",)),
    Flag("--timeline", "Draw the simulated schedule", "switch", "", "off", ("bubble",)),
    # memory
    Flag("--per-stage", "A table of every pipeline stage", "switch", "", "off", ("memory",)),
    # calibrate
    Flag("--device", "Where to time GEMMs: auto, cpu, cuda, cuda:N", "text", "", "auto", ("calibrate gemm",)),
    Flag("--shapes", "GEMM shapes to time: default, small, tiny", "choice", "", "default", ("calibrate gemm",)),
    Flag("--name", "The preset's display name", "text", "", "", ("calibrate gemm", "calibrate nccl", "calibrate trace")),
    Flag("--force", "Replace --output if it exists", "switch", "", "off", ("calibrate gemm", "calibrate nccl", "calibrate trace")),
    Flag("--ranks", "Ranks of the run, when the file does not print them", "count", "ranks", "the file's", ("calibrate nccl",)),
    Flag("--nodes", "Nodes the ranks ran on, when the file does not say", "count", "nodes", "the file's", ("calibrate nccl",)),
    Flag("--nccl-hardware", "NCCL's class of the link: nvlink, pcie, net", "choice", "", "from the file", ("calibrate nccl",)),
    Flag("--intra-link", "Across nodes: the link preset within each node", "name", "", "", ("calibrate nccl",)),
    # report
    Flag("--template", "Directory of your own report templates", "path", "", "", ("report",)),
    Flag("--list", "List the built-in and user worksheets", "switch", "", "off", ("report",)),
    Flag("--detail", "How much the text shows: brief (the answer, key terms, main table, the assumptions that move it) or full "
         "(every input, derivation with its source, table, assumption); report: of the write-up, brief its answers' derivations",
         "choice", "", "brief (report: full)", _OUT),
    # analyze
    Flag("--time-is", "What the time column measures: step or epoch", "choice", "", "a time_is column", ("analyze",)),
    Flag("--message-size", "Bytes of one all-reduce on every row", "quantity", "B", "", ("analyze",)),
    Flag("--grad-bytes", "Bytes per gradient element with --params or --model", "number", "B", "4", ("analyze",)),
    Flag("--allreduces", "All-reduces inside each measured comm time", "count", "all-reduces", "1", ("analyze",)),
    Flag("--section", "Show only speedup, batch, shares or bandwidth", "choice", "", "all", ("analyze",)),
    # scaling
    Flag("--weak", "Weak scaling: a fixed batch per GPU, B = --batch x N (--strong, the default: a fixed global batch)", "switch", "", "strong", ("scaling",)),
    Flag("--best", "At each N, the fastest configuration of `fit --search`", "switch", "", "off", ("scaling",)),
    Flag("--knee", "Efficiency threshold of the knee verdict: the first N with efficiency under it", "number", "fraction", "0.8", ("scaling",)),
    # sweep
    Flag("--vary", "A flag and the values it takes, KEY=V1,V2,... (repeatable): the grid is every combination", "list", "", "", ("sweep",)),
)

# Megatron-LM switches and value flags that are one parcalc flag with a value (arguments.py:
# --fp16 / --bf16 in _add_mixed_precision_args, --fp8-format in _add_transformer_engine_args,
# --use-distributed-optimizer in _add_distributed_args, --swiglu in _add_network_size_args).
# A value of None: the Megatron flag takes a value of its own, which is dropped.
MEGATRON_VALUES: dict[str, tuple[str, str, bool]] = {
    # flag: (parcalc flag, its value, whether the Megatron flag itself takes a value)
    "--fp16": ("--precision", "mixed-fp16", False),  # Megatron keeps fp32 main params with --fp16: mixed precision
    "--bf16": ("--precision", "mixed-bf16", False),
    "--fp8-format": ("--precision", "fp8", True),  # e4m3 or hybrid: either is Transformer Engine's FP8 recipe
    "--use-distributed-optimizer": ("--zero", "1", False),  # optimizer states sharded over DP: ZeRO-1
    "--swiglu": ("--mlp", "swiglu", False),
}

# Megatron-LM arguments that change nothing parcalc computes (the optimizer's hyperparameters, data,
# tokenizer, checkpoints, logging, initialisation), with whether each takes a value. The arguments
# of Megatron-LM's examples/gpt3/train_gpt3_175b_distributed.sh and the like.
MEGATRON_IGNORED: dict[str, bool] = {
    "--max-position-embeddings": True, "--train-iters": True, "--train-samples": True, "--weight-decay": True,
    "--adam-beta1": True, "--adam-beta2": True, "--adam-eps": True, "--init-method-std": True, "--clip-grad": True,
    "--lr": True, "--min-lr": True, "--lr-decay-style": True, "--lr-warmup-fraction": True, "--lr-warmup-iters": True,
    "--lr-warmup-samples": True, "--lr-decay-iters": True, "--lr-decay-samples": True, "--use-mcore-models": False,
    "--data-path": True, "--vocab-file": True, "--merge-file": True, "--split": True, "--tokenizer-type": True,
    "--tokenizer-model": True, "--log-interval": True, "--save-interval": True, "--eval-interval": True, "--save": True,
    "--load": True, "--eval-iters": True, "--tensorboard-dir": True, "--seed": True, "--group-query-attention": False,
    "--transformer-impl": True, "--make-vocab-size-divisible-by": True,
}  # fmt: skip


def by_name() -> dict[str, Flag]:
    return {flag.name: flag for flag in FLAGS}


def canonical(command: str, name: str, declared: set[str] | frozenset[str]) -> str | None:
    """The declared flag that `name` spells for `command` (an alias, or --no-X of one), or None."""
    for flag in FLAGS:
        if name in flag.aliases and command in flag.commands and flag.name in declared:
            return flag.name
    return None


def translate(command: str, args: list[str], declared: set[str]) -> list[str]:
    """`args` with every hidden spelling replaced by the flag `command` declares; Megatron's
    switches as parcalc's flag and value; the ignored Megatron arguments dropped, named once on
    stderr. A flag none of these knows is left for click to refuse."""
    out: list[str] = []
    ignored: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            out += args[i:]
            break
        name, eq, value = arg.partition("=")
        if not arg.startswith("--") or name in declared:
            out.append(arg)
            i += 1
            continue
        target = canonical(command, name, declared)
        if target is not None:
            out.append(target + eq + value)
        elif name in MEGATRON_VALUES and MEGATRON_VALUES[name][0] in declared:
            flag, given, takes_value = MEGATRON_VALUES[name]
            out += [flag, given]
            if takes_value and not eq:
                i += 1  # its own value (e4m3 / hybrid) says nothing more to parcalc
        elif name in MEGATRON_IGNORED:
            ignored.append(name)
            if MEGATRON_IGNORED[name] and not eq:
                i += 1
        else:
            out.append(arg)
        i += 1
    if ignored:
        from parcalc.streams import say

        say(f"note: ignored Megatron-LM arguments that change nothing parcalc computes: {', '.join(dict.fromkeys(ignored))}")
    return out


# ---------------------------------------------------------------------------------------------
# docs/flags.md

REGENERATE = "python -m parcalc.flags > docs/flags.md"


def reference() -> str:
    """docs/flags.md: the vocabulary table, the types, the aliases."""
    lines = [
        "# Flag vocabulary",
        "",
        f"Generated from `parcalc/flags.py` by `{REGENERATE}`; do not edit by hand (tests/test_flags.py",
        "fails when this page is out of date, and when a command's options differ from the table).",
        "One concept has one name in every command. Units are those of the value as typed; the JSON carries",
        "base units (B, s, FLOP/s).",
        "",
        "| flag | meaning | type | unit | default | commands |",
        "|---|---|---|---|---|---|",
    ]
    for flag in sorted(FLAGS, key=lambda f: f.name):
        name = f"`{flag.name}`" + (f" (`{flag.short}`)" if flag.short else "")
        commands = ", ".join(flag.commands)
        lines.append(f"| {name} | {_cell(flag.meaning)} | {flag.type} | {_cell(flag.unit)} | {_cell(flag.default)} | {commands} |")
    lines += ["", "## Types", "", "| type | what it takes |", "|---|---|"]
    lines += [f"| {name} | {_cell(text)} |" for name, text in TYPES.items()]
    lines += [
        "", "## Hidden spellings", "",
        "Accepted, not shown in `--help`: parcalc's old names and Megatron-LM's argument names "
        f"({MEGATRON}), so the model, batch and parallelism arguments of a Megatron launch line paste in.",
        "", "| spelling | is | commands |", "|---|---|---|",
    ]  # fmt: skip
    for flag in sorted(FLAGS, key=lambda f: f.name):
        lines += [f"| `{alias}` | `{flag.name}` | {', '.join(flag.commands)} |" for alias in flag.aliases]
    lines += [f"| `{name}`{' VALUE' if takes else ''} | `{flag} {value}` | where `{flag}` is taken |"
              for name, (flag, value, takes) in MEGATRON_VALUES.items()]
    lines += ["", "Megatron-LM arguments dropped with a note on stderr (they change nothing parcalc computes): "
              + ", ".join(f"`{name}`" for name in MEGATRON_IGNORED) + ". Any other unknown flag is an error."]  # fmt: skip
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


if __name__ == "__main__":
    sys.stdout.write(reference())
