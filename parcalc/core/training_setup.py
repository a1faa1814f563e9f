"""What decides a training run's memory besides the model and its layout: the micro-batch and its
count, sequence length, precision, optimizer, recomputation, offloading, the reserve for what the
formulas do not see (`TrainingSetup`, `reserve_derivation`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from parcalc.core.activations import ActivationConfig, Recompute
from parcalc.core.choices import Optimizer, Precision
from parcalc.derivation import Derivation, Term

if TYPE_CHECKING:
    from parcalc.core.layout import Layout
    from parcalc.core.model import TransformerModel

# Reserve for what the formulas do not see, 2 GiB by default, in three parts:
# - the CUDA context, 0.5 GiB: PyTorch PR #86509 ("Sets CUDA_MODULE_LOADING to LAZY when not set by
#   the user") measured 287,047,680 bytes with lazy module loading and 666,632,192 without; lazy is
#   the default on Linux since CUDA 12.2 (CUDA C++ Programming Guide, "Lazy Loading");
# - NCCL's buffers, 1 GiB: each connection (channel x peer) of a communicator gets a Simple buffer
#   of 4 MiB (DEFAULT_BUFFSIZE = 1 << 22), an LL buffer of 8 x 512 x 8 x 16 B = 0.5 MiB and an LL128
#   buffer of 120 x 640 x 8 x 8 B = 4.6875 MiB (NVIDIA/nccl src/init.cc, DEFAULT_*BUFFSIZE; the
#   constants in src/include/device.h): about 9.2 MiB per connection, so a 32-channel ring takes
#   about 294 MiB per communicator, and a GPU of a 3D-parallel job has one communicator for each of
#   its TP, DP and PP groups;
# - the caching allocator's fragmentation and communication buckets, 0.5 GiB: parcalc's allowance,
#   not a measurement (PyTorch "CUDA semantics", memory management: memory_reserved exceeds
#   memory_allocated by the cached, partly used blocks).
RESERVE_PARTS: tuple[tuple[str, str, float, str], ...] = (
    ("R_ctx", "CUDA context", 0.5 * 2**30, "287-667 MB measured in PyTorch PR #86509 (lazy / eager module loading)"),
    ("R_nccl", "NCCL communicator buffers", 1.0 * 2**30,
     "about 9.2 MiB per channel and peer: Simple 4 MiB + LL 0.5 MiB + LL128 4.7 MiB (NVIDIA/nccl src/init.cc)"),
    ("R_frag", "allocator fragmentation, buckets", 0.5 * 2**30,
     "parcalc's allowance (PyTorch CUDA semantics: memory_reserved > memory_allocated), kept where no step walk replays the "
     "caching allocator (the megatron and deepspeed profiles, layouts the fsdp2 / torchtitan walks do not follow); where one "
     "does, the replay's fragmentation replaces it (replayed_reserve)"),
)  # fmt: skip
DEFAULT_RESERVE_BYTES = sum(part[2] for part in RESERVE_PARTS)
RESERVE_SOURCE = (
    "2 GiB by default (--reserve): CUDA context 0.5 GiB (287-667 MB measured in PyTorch PR #86509), NCCL buffers 1 GiB "
    "(4 MiB + LL + LL128 per channel and peer, NVIDIA/nccl src/init.cc), allocator fragmentation 0.5 GiB (parcalc's allowance)"
)


@dataclass(frozen=True)
class TrainingSetup:
    """Everything besides the model and the parallelism that decides memory."""

    micro_batch: int
    seq_len: int
    precision: Precision = Precision.MIXED_BF16
    optimizer: Optimizer = Optimizer.ADAMW
    recompute: Recompute = Recompute.NONE
    flash_attention: bool = False
    dropout: bool | None = None  # None: the model's (TransformerModel.dropout; Llama trains without)
    fp32_grads: bool = False
    reserve: float = DEFAULT_RESERVE_BYTES
    capacity: float | None = None
    capacity_source: str = ""
    offload_optimizer: bool = False  # ZeRO-Offload: fp32 master weights, states and fp32 gradients on the host
    offload_activations: bool = False  # saved activations on the host (Megatron-LM --cpu-offloading, save_on_cpu)
    recompute_layers: int | None = None  # with full: layers of each stage chunk recomputed (parcalc.core.recompute; None: all)
    moment_bytes: float | None = None  # optimizer states' element size beside the fp32 master (None: the precision's; state_bytes)
    mla_up_proj: bool = False  # Megatron-LM's --recompute-modules mla_up_proj (parcalc.core.activations.mla_tensors)
    moe_imbalance: float = 1.0  # the busiest EP rank's received tokens over the balanced share (moe_dispatch_working_set)
    # MoE layers' token-exchange buffers and their experts' FP8 weight copies; fit sets False, since its
    # vectorised search (parcalc.core.fit_search) does not count them yet and the two must agree
    moe_memory_detail: bool = True
    grad_copies: bool = False  # 16-bit gradients and a full fp32 copy (DeepSpeed's BF16_Optimizer in bf16 pipelines; state_bytes)
    recompute_modules: tuple[str, ...] | None = None  # Megatron-LM's --recompute-modules with selective (None: ['core_attn'])
    # "textbook": the sum of the states and activations below; "hf-eager": the peak of a walk over the step
    # (parcalc.core.memory_timeline; the framework profile's step_memory)
    step_memory: str = "textbook"
    # Micro-batches per iteration, m = B / (d b): how many the pipeline's warm-up holds at once (_in_flight);
    # a property of the batch, not of the layout
    micro_batches: int = 1
    # --compile: torch.compile (Inductor) on each transformer block, as torchtitan's apply_compile; the torchtitan profile's
    # step walk follows the compiled block (parcalc.core.memory_torchtitan_compile), the textbook sum is unchanged
    compiled: bool = False
    # torchao's enable_fsdp_float8_all_gather under the torchtitan profile's FSDP2 walk (memory_fsdp.FsdpStep.float8_all_gather)
    float8_all_gather: bool = False
    # --compile-loss: the loss compiled too, as torchtitan does from 2025-04-02 (parcalc.core.memory_compiled_loss)
    compiled_loss: bool = False
    # --expandable-segments / --no-expandable-segments: PYTORCH_CUDA_ALLOC_CONF's expandable_segments in the allocator replayed
    # over the FSDP2 step walk (memory_fsdp.FsdpStep.expandable_segments); None: as the framework's launcher sets it
    expandable_segments: bool | None = None
    # False: a walked FSDP2 step's total takes the floor of the allocator's replay (memory_fsdp.StreamWalk.floor) in place of
    # the replay: the screen fit's deepest-model answer steps layer counts by before it replays the one it gives
    allocator_replayed: bool = True

    def activation_config(self, par: Layout) -> ActivationConfig:
        return ActivationConfig(self.micro_batch, self.seq_len, par.tp, par.sequence_parallel, self.recompute,
                                self.flash_attention, self.dropout is not False, self.precision.activation_bytes,
                                gemm_input_bytes=self.precision.gemm_input_bytes, cp=par.cp, mla_up_proj=self.mla_up_proj,
                                recompute_modules=self.recompute_modules)  # fmt: skip

    def for_model(self, model: TransformerModel) -> TrainingSetup:
        """The setup with `dropout` resolved: as given, or the model's own."""
        return self if self.dropout is not None else replace(self, dropout=model.dropout)




def reserve_derivation(reserve: float) -> Derivation:
    """The reserve: the default's three parts, or the value given with --reserve."""
    if reserve == DEFAULT_RESERVE_BYTES:
        inputs = tuple(Term(key, key, rf"R_{{\mathrm{{{key[2:]}}}}}", value, "B", what, source) for key, what, value, source in RESERVE_PARTS)
        formula = " + ".join(f"${t.key}" for t in inputs)
        return Derivation("reserve", "Reserve: CUDA context, NCCL buffers, fragmentation", "R", "R", formula, formula, inputs,
                          reserve, "B", RESERVE_SOURCE)  # fmt: skip
    given = Term("R_given", "R", "R", reserve, "B", "reserve given with --reserve", "given on the command line")
    return Derivation("reserve", "Reserve: CUDA context, NCCL buffers, fragmentation (given)", "R", "R", "$R_given", "$R_given",
                      (given,), reserve, "B", "given on the command line")  # fmt: skip


def replayed_reserve(reserve: float) -> Derivation:
    """The reserve beside a step whose allocations the caching allocator's rules were replayed over (the hf profile:
    parcalc.core.allocator, its fragmentation and the walk's DDP buckets counted there): the default's CUDA context and
    NCCL parts without its fragmentation-and-buckets allowance, which would count them twice; a given --reserve as given."""
    if reserve != DEFAULT_RESERVE_BYTES:
        return reserve_derivation(reserve)
    kept = tuple(part for part in RESERVE_PARTS if part[0] != "R_frag")
    inputs = tuple(Term(key, key, rf"R_{{\mathrm{{{key[2:]}}}}}", value, "B", what, source) for key, what, value, source in kept)
    formula = " + ".join(f"${t.key}" for t in inputs)
    return Derivation("reserve", "Reserve: CUDA context, NCCL buffers (fragmentation and buckets: the allocator's replay)", "R", "R",
                      formula, formula, inputs, sum(t.value for t in inputs), "B",
                      f"{RESERVE_SOURCE}; its fragmentation allowance left out: parcalc.core.allocator replays the caching allocator")
