"""The step walk's bookkeeping and the pieces every walked model is made of.

A `Walk` follows one training step tensor by tensor: `alloc` when an op creates a tensor, `free` when autograd or
Python lets it go, `rename` when one tensor changes role (a gradient stolen as .grad, an output saved for backward).
It keeps the running total and the peak, each storage rounded to the caching allocator's 512-byte blocks
(parcalc.core.allocator), so its peak is what `torch.cuda.max_memory_allocated` reads. The ops here, a linear under
autocast and its backward, RMSNorm and its backward, a weight's gradient, are shared by the walks of transformers'
models (parcalc.core.memory_timeline, its MoE block parcalc.core.memory_moe_block) and torchtitan's
(parcalc.core.memory_torchtitan); their sources are memory_timeline.HF_SOURCES.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TypeVar

from parcalc.core.allocator import block_bytes, reserved_bytes
from parcalc.core.choices import Precision
from parcalc.derivation import Derivation

T = TypeVar("T")
# progress(done, total) after each action of a multi-stage pipeline rank's walk (ZB-V, interleaved: a minute at 512
# micro-batches), for a caller that shows it (parcalc.core.memory.memory_breakdown sets it around a stage's walk). A context
# variable and not an argument: the walks run under lru-cached functions of (model, step) (memory_fsdp.fsdp_walked) that a
# callback must not key; unset (None) everywhere else, fit's search included.
WALK_PROGRESS: ContextVar[Callable[[int, int], None] | None] = ContextVar("walk_progress", default=None)
KINDS = ("weights", "optimizer states", "gradients", "activations", "autocast weight copies", "logits and loss", "temporaries",
         "workspace")  # fmt: skip


def parameter_bytes(precision: Precision) -> float:
    """Bytes of a parameter as the eager PyTorch stacks keep it (the hf walk's weights, FSDP2's shards): bf16 under
    --precision bf16, fp32 otherwise. Mixed precision keeps fp32 parameters and computes in 16 bits around them
    (transformers' Trainer bf16=True: torch.autocast over the fp32 model, HF_SOURCES; FSDP2's MixedPrecisionPolicy casts the
    fp32 shards to param_dtype at each all-gather, memory_fsdp.FSDP_SOURCES; fp8: torchao's Float8Linear over the same fp32
    shards), so the parameters are the optimizer's fp32 copy and there is no separate master. Their gradients and the
    optimizer's states take the same dtype (the .grad of a parameter is in its dtype; torch.optim's states are zeros_like it)."""
    return 2.0 if precision is Precision.BF16 else 4.0


@dataclass(frozen=True)
class LiveTensor:
    what: str
    kind: str
    bytes: float


@dataclass(frozen=True)
class StepPeak:
    """The step's allocation peak: when, how much, and what is live then."""

    allocated: float  # bytes, as torch.cuda.max_memory_allocated counts them (512-byte blocks)
    reserved: float  # what the caching allocator holds then, from its rounding (parcalc.core.allocator)
    phase: str
    live: tuple[LiveTensor, ...]
    parts: tuple[tuple[str, float], ...]  # by kind, in KINDS order
    textbook_sum: float = 0.0  # weights + gradients + states + Korthikanti's activations, for comparison (0: not given)
    # how `reserved` was found: "rounding" (the least the live blocks need, parcalc.core.allocator.reserved_bytes) or
    # "replayed" (the allocator's rules replayed over the steps' allocations: its fragmentation included) or "streams" (each
    # CUDA stream's own pool at its own peak: parcalc.core.memory_fsdp)
    reserved_by: str = "rounding"
    stream_pools: tuple[tuple[str, float], ...] = ()  # reserved_by "streams": (stream, what its pool reserves), summed
    derivations: tuple[Derivation, ...] = field(default=())


class Walk:
    """Allocations and frees in program order; the peak and what was live then."""

    def __init__(self) -> None:
        self.live: dict[str, LiveTensor] = {}
        self.now = 0.0
        self.peak = -1.0
        self.peak_phase = ""
        self._peak_live: tuple[LiveTensor, ...] = ()
        # a new peak is copied out of `live` only when live next loses or changes a tensor (or peak_live is read): until then
        # every allocation only adds to it, so what is live then is what was live at the peak; copying at every new peak
        # made a walk quadratic in its tensors (a forward allocates a new peak almost every time)
        self._peak_due = False
        self.phase = ""
        self.events: list[tuple[str, float]] | None = None  # (key, bytes allocated; 0: freed) in order, when wanted

    def alloc(self, key: str, size: float, kind: str, what: str) -> None:
        if size <= 0:
            return
        if key in self.live:
            raise AssertionError(f"tensor {key} allocated twice")  # a bug in the walk, not user input
        tensor = LiveTensor(what, kind, block_bytes(size))
        self.live[key] = tensor
        if self.events is not None:
            self.events.append((key, size))
        self.now += tensor.bytes
        if self.now > self.peak:
            self.peak, self.peak_phase, self._peak_due = self.now, self.phase, True

    def alloc_all(self, allocs: tuple[tuple[str, float, str, str], ...]) -> None:
        """alloc() of each (key, bytes, kind, what) in turn (a walk may do it at once: search_segment_walk.SegmentWalk)."""
        for key, size, kind, what in allocs:
            self.alloc(key, size, kind, what)

    @property
    def peak_live(self) -> tuple[LiveTensor, ...]:
        self._copy_peak()
        return self._peak_live

    def _copy_peak(self) -> None:
        if self._peak_due:
            self._peak_live, self._peak_due = tuple(self.live.values()), False

    def relabel(self, key: str, what: str, kind: str | None = None) -> None:
        """Another description (and kind) for a live tensor, its bytes kept."""
        self._copy_peak()
        tensor = self.live[key]
        self.live[key] = LiveTensor(what, kind or tensor.kind, tensor.bytes)

    def free(self, *keys: str) -> None:
        self._copy_peak()
        for key in keys:
            tensor = self.live.pop(key, None)
            if tensor is not None:
                self.now -= tensor.bytes
                if self.events is not None:
                    self.events.append((key, 0.0))

    def rename(self, old: str, new: str, what: str | None = None, kind: str | None = None) -> None:
        """The same storage under another key (a gradient handed on, a tensor that another op keeps), relabelled if asked."""
        self._copy_peak()
        tensor = self.live.pop(old)
        self.live[new] = LiveTensor(what or tensor.what, kind or tensor.kind, tensor.bytes)
        if self.events is not None:
            self.events.append((f"{old}\0{new}", -1.0))

    def transient(self, key: str, size: float, kind: str, what: str) -> None:
        """A tensor allocated and freed within one op (its peak counts, nothing stays)."""
        self.alloc(key, size, kind, what)
        self.free(key)

    def keys_under(self, prefix: str, suffix: str) -> list[str]:
        """The live tensors' keys that start with `prefix` and end with `suffix`, in the order they became live."""
        return [key for key in self.live if key.startswith(prefix) and key.endswith(suffix)]

    def replayable(self, fn: Callable[..., T], layer: str, names: tuple[str, ...], *args: Hashable) -> T:
        """fn(self, layer, names, *args): ops (a block's forward, say) whose tensors are all keyed `layer.` + a name or are
        `names` (and `name.` / `name+` + a name), and that depend on nothing else but `args`. Walked here; the search's walk
        replays a recorded call of the same kind instead (parcalc.core.search_segment_walk)."""
        return fn(self, layer, names, *args)


class StepHooks:
    """Where a framework's own allocations enter the walk (FSDP2's all-gathers and reduce-scatters:
    parcalc.core.memory_fsdp); the hf profile's DDP has none there."""

    def before_forward(self, walk: Walk) -> None: ...
    def before_layer(self, walk: Walk, i: int) -> None: ...
    def after_layer(self, walk: Walk, i: int) -> None: ...
    def after_forward(self, walk: Walk) -> None: ...  # the root module returns (the loss computed)
    def before_backward(self, walk: Walk) -> None: ...  # the loss's gradient: hooks on the root's outputs fire
    def before_layer_backward(self, walk: Walk, i: int) -> None: ...  # before its recomputation, if any
    def after_layer_backward(self, walk: Walk, i: int) -> None: ...  # the gradient of its input is complete
    def after_backward(self, walk: Walk) -> None: ...


@dataclass(frozen=True)
class StepShapes:
    T: float  # tokens b x s
    b: int
    s: int
    h: int
    q: int  # heads x head_dim
    kv: int
    f: int
    V: int
    heads: int
    w: float  # bytes of a weight and of the residual stream (fp32 unless --precision bf16)
    c: float  # bytes of what the linears compute in (bf16 under autocast)
    autocast: bool
    experts: int = 0  # routed experts (0: a dense MLP)
    top_k: int = 0
    fe: int = 0  # an expert's width
    qk_norm: bool = False  # Qwen3's q_norm / k_norm
    routing_bytes: float = 4.0  # the routing weights' bytes: fp32 (Mixtral), or the router logits' dtype (Qwen3-MoE)
    fs: int = 0  # the width of Qwen2-MoE's gated shared expert (0: none)
    renormalised: bool = True  # the top-k weights divided by their sum (MixtureOfExperts.top_k_renormalised)
    float8: bool = False  # torchtitan's blocks' linears are torchao's Float8Linear (parcalc.core.memory_torchao_float8)
    float8_weights: bool = False  # and their unsharded weights are FP8 already (enable_fsdp_float8_all_gather): no weight casts
    cp: int = 1  # torchtitan's context-parallel ranks: T and s are a rank's shard, SDPA the ring (memory_torchtitan_cp)
    cp_rotate: str = "allgather"  # how the ring passes K/V on: torch's set_rotate_method, "allgather" or "alltoall"
    # DeepSeek's latent attention in torchtitan's walk (parcalc.core.memory_torchtitan_mla): (q_lora_rank, kv_lora_rank,
    # qk_nope_head_dim, qk_rope_head_dim, v_head_dim); () for grouped-query attention
    mla: tuple[int, ...] = ()

    @property
    def S(self) -> float:
        """(token, expert) pairs: the rows of the experts' grouped matmuls."""
        return self.T * self.top_k


def peak_of(walk: Walk, kinds: tuple[str, ...] = KINDS) -> StepPeak:
    """The walk's peak: its parts by kind (in `kinds` order), what was live, what the allocator reserves then."""
    parts = tuple((kind, sum(t.bytes for t in walk.peak_live if t.kind == kind)) for kind in kinds)
    reserved = reserved_bytes(t.bytes for t in walk.peak_live)
    return StepPeak(walk.peak, reserved, walk.peak_phase, _grouped(walk.peak_live), parts)


def _grouped(live: tuple[LiveTensor, ...]) -> tuple[LiveTensor, ...]:
    """What is live, summed by description, largest first."""
    sums: dict[tuple[str, str], float] = {}
    for t in live:
        sums[(t.what, t.kind)] = sums.get((t.what, t.kind), 0.0) + t.bytes
    return tuple(sorted((LiveTensor(what, kind, size) for (what, kind), size in sums.items()), key=lambda t: -t.bytes))


@dataclass(frozen=True)
class NormShape:
    """What an RMSNorm runs on: `width` values per token in `rows` rows of `param` (the weight's length), its input in
    `in_bytes` (the residual stream's dtype for the decoder's norms; the projection's for Qwen3's q_norm / k_norm)."""

    width: int
    rows: float
    param: int
    in_bytes: float


def residual_norm(x: StepShapes) -> NormShape:
    return NormShape(x.h, x.T, x.h, x.w)


def norm_forward(walk: Walk, x: StepShapes, key: str, inp: str, saved: bool, shape: NormShape | None = None) -> str:
    """LlamaRMSNorm on `inp` (HF_SOURCES['rmsnorm']); returns the key of its output (the weight's dtype times the
    input's: x.w bytes for the decoder's norms)."""
    n = shape or residual_norm(x)
    size = x.T * n.width
    kind = "activations" if saved else "temporaries"
    up = inp
    if n.in_bytes != 4:  # hidden_states.to(float32): a copy, saved by pow and the multiplication
        up = f"{key}.fp32"
        walk.alloc(up, size * 4, kind, "RMSNorm fp32 input copy")
    walk.transient(f"{key}.pow", size * 4, "temporaries", "RMSNorm pow(2)")
    walk.alloc(f"{key}.var", n.rows * 4, "temporaries", "RMSNorm variance")
    walk.alloc(f"{key}.var_eps", n.rows * 4, "temporaries", "RMSNorm variance + eps")
    walk.alloc(f"{key}.rsqrt", n.rows * 4, kind, "RMSNorm rsqrt (fp32)")
    walk.free(f"{key}.var", f"{key}.var_eps")
    walk.alloc(f"{key}.normed", size * 4, kind, "RMSNorm normalised (fp32)")
    scaled_input = f"{key}.normed"
    if n.in_bytes != 4:  # .to(input_dtype): the copy the weight multiplication saves; the fp32 one goes
        walk.alloc(f"{key}.normed_w", size * n.in_bytes, kind, "RMSNorm normalised (input dtype)")
        walk.free(f"{key}.normed")
        scaled_input = f"{key}.normed_w"
    walk.alloc(f"{key}.out", size * max(x.w, n.in_bytes), "temporaries", "RMSNorm output")
    if not saved:
        walk.free(f"{key}.rsqrt", scaled_input, *((up,) if up != inp else ()))
    return f"{key}.out"


def linear(walk: Walk, x: StepShapes, key: str, inp: str, inp_bytes: float, d_in: int, d_out: int, saved: bool, what: str) -> str:
    """nn.Linear under autocast: the input cast to x.c (a copy per call unless already x.c), the weight
    cast once per autocast region (HF_SOURCES['autocast_cache']); returns the output's key."""
    kind = "activations" if saved else "temporaries"
    if x.autocast:
        walk.alloc(f"{key}.wcopy", d_in * d_out * x.c, "autocast weight copies", "autocast bf16 weight copies")
        if inp_bytes != x.c:
            walk.alloc(f"{key}.in", x.T * d_in * x.c, kind, f"{what} input cast to bf16")
    walk.alloc(f"{key}.out", x.T * d_out * x.c, "temporaries", f"{what} output")
    return f"{key}.out"


def keep_if_saved(walk: Walk, x: StepShapes, key: str, kind: str, what: str) -> None:
    """A norm output after the projections that read it: gone under autocast (each kept its own
    bf16 cast), else saved by them as it is."""
    if x.autocast:
        walk.free(key)
    else:
        walk.relabel(key, what, kind)


def grad_of_weight(walk: Walk, x: StepShapes, key: str, d_in: int, d_out: int) -> None:
    """A linear's weight gradient: computed in x.c, cast to the weight's dtype, kept as .grad (HF_SOURCES['grads']), or
    added into the .grad already there (ACCUMULATE_GRAD: parcalc.core.memory_pipeline_dualpipe's full backward after a W)."""
    walk.alloc(f"{key}.gw_c", d_in * d_out * x.c, "temporaries", "weight gradient (compute dtype)")
    if f"{key}.grad" in walk.live:
        if x.c != x.w:
            walk.transient(f"{key}.gw", d_in * d_out * x.w, "temporaries", "weight gradient (cast to the weight's dtype)")
        walk.free(f"{key}.gw_c")  # added into .grad in place, then released
        return
    if x.c != x.w:
        walk.alloc(f"{key}.grad", d_in * d_out * x.w, "gradients", "weight gradients")
        walk.free(f"{key}.gw_c")
    else:
        walk.rename(f"{key}.gw_c", f"{key}.grad", "weight gradients", "gradients")


ACCUMULATE_GRAD = ("pytorch/pytorch v2.13.0 torch/csrc/autograd/functions/accumulate_grad.h AccumulateGrad::accumulateGrad: "
                   "where the parameter's .grad is defined and grad mode is off (a backward pass), case 2.3 'variable_grad += "
                   "new_grad', in place; the new gradient is released when the node returns")


def accumulated_grad(walk: Walk, key: str, size: float, what: str = "weight gradients") -> None:
    """A parameter's gradient `key` (its .grad) from its backward node: kept, or, where a .grad is already there (a split
    backward's W left it unfolded, parcalc.core.memory_pipeline_dualpipe), added into it in place and let go
    (ACCUMULATE_GRAD)."""
    if key in walk.live:
        walk.transient(f"{key}.new", size, "temporaries", "weight gradient (added into .grad in place)")
    else:
        walk.alloc(key, size, "gradients", what)


def linear_backward(walk: Walk, x: StepShapes, key: str, grad_out: str, d_in: int, d_out: int, saved_input: str, into: str) -> None:
    """MmBackward of one linear: the input gradient (then cast back to the input's dtype and added into
    `into`), the weight gradient; frees its saved input and weight copy."""
    T = x.T
    walk.alloc(f"{key}.gin", T * d_in * x.c, "temporaries", "input gradient")
    grad_of_weight(walk, x, key, d_in, d_out)
    walk.free(grad_out, saved_input, f"{key}.wcopy", f"{key}.in")
    add_into(walk, f"{key}.gin", into)


def add_into(walk: Walk, grad: str, into: str) -> None:
    """A gradient reaches a tensor that already has one: the autograd engine's InputBuffer adds it in place."""
    if into in walk.live:
        walk.free(grad)
    else:
        walk.rename(grad, into)


def norm_backward(walk: Walk, x: StepShapes, key: str, g_out: str, inp: str, into: str, shape: NormShape | None = None) -> None:
    """LlamaRMSNorm backward: weight * normed, normed = x * rsqrt, rsqrt, mean, pow (the fp32 temporaries each makes).
    PowBackward0 computes grad * (2 * x.pow(1)): x.pow(1) and 2 * x.pow(1) live beside the mean's gradient until the
    expression ends (HF_SOURCES['rmsnorm_backward']). On an fp32 input (no .to(float32) copy) the input is the residual
    stream itself, whose gradient the residual branch already holds: both x's gradients are added into it out of place
    (MemTracker's trace of LlamaForCausalLM: add.Tensor, both addends freed)."""
    n = shape or residual_norm(x)
    size = x.T * n.width
    walk.alloc(f"{key}.g_normed", size * 4, "temporaries", "RMSNorm backward")
    walk.transient(f"{key}.g_w", size * 4, "temporaries", "RMSNorm weight-gradient product")
    walk.alloc(f"{key}.grad", n.param * x.w, "gradients", "weight gradients")  # that product summed over the tokens
    walk.free(g_out, f"{key}.normed", f"{key}.normed_w")
    walk.alloc(f"{key}.g_x_a", size * 4, "temporaries", "RMSNorm backward")
    walk.transient(f"{key}.g_rs", size * 4, "temporaries", "RMSNorm rsqrt-gradient product")
    walk.free(f"{key}.g_normed", f"{key}.rsqrt")
    direct = n.in_bytes == 4  # the gradient goes straight into the input's (the residual stream's)
    if direct:
        _add_out_of_place(walk, f"{key}.g_x_a", into)
    walk.alloc(f"{key}.g_mean", size * 4, "temporaries", "RMSNorm mean backward (expand / h)")
    walk.alloc(f"{key}.pow1", size * 4, "temporaries", "RMSNorm pow backward: x.pow(1)")
    walk.alloc(f"{key}.pow2", size * 4, "temporaries", "RMSNorm pow backward: 2 * x.pow(1)")
    walk.alloc(f"{key}.g_pow", size * 4, "temporaries", "RMSNorm pow backward")
    walk.free(f"{key}.pow1", f"{key}.pow2", f"{key}.g_mean")
    walk.free(f"{key}.fp32")
    if direct:
        _add_out_of_place(walk, f"{key}.g_pow", into)
        return
    add_into(walk, f"{key}.g_pow", f"{key}.g_in")
    add_into(walk, f"{key}.g_x_a", f"{key}.g_in")
    walk.alloc(f"{key}.g_in_w", size * n.in_bytes, "temporaries", "RMSNorm input gradient (input dtype)")
    walk.free(f"{key}.g_in")
    add_into(walk, f"{key}.g_in_w", into)


def _add_out_of_place(walk: Walk, grad: str, into: str) -> None:
    """The sum as a new tensor, both addends freed (the first gradient to arrive is kept as it is)."""
    if into not in walk.live:
        walk.rename(grad, into)
        return
    tensor = walk.live[into]
    walk.alloc(f"{into}+", tensor.bytes, tensor.kind, tensor.what)
    walk.free(grad, into)
    walk.rename(f"{into}+", into)


def cast_back(walk: Walk, x: StepShapes, grad_c: str, into: str, width: int) -> None:
    """ToCopyBackward of autocast's input cast: the bf16 input gradient back to the residual stream's dtype."""
    if grad_c not in walk.live:
        return
    if x.c != x.w:
        walk.alloc(f"{grad_c}.w", x.T * width * x.w, "temporaries", "input gradient (fp32)")
        walk.free(grad_c)
        add_into(walk, f"{grad_c}.w", into)
    else:
        add_into(walk, grad_c, into)


def cross_entropy_forward(walk: Walk, x: StepShapes) -> None:
    """cross_entropy over the fp32 logits (b s x V): its log-softmax, saved in fp32, and the scalar loss. The same in
    transformers' ForCausalLMLoss and torchtitan's train.py loss (their sources: memory_timeline.HF_SOURCES['loss'],
    memory_torchtitan.TT_SOURCES['loss'])."""
    walk.alloc("logsoftmax", x.T * x.V * 4, "logits and loss", "cross_entropy's log_softmax (fp32, saved)")
    walk.transient("loss", 4, "logits and loss", "loss")


def cross_entropy_backward(walk: Walk, x: StepShapes) -> str:
    """nll_loss's gradient, then log_softmax's while the saved log-softmax is still held (three fp32 b s x V tensors at
    once); returns the fp32 logits gradient's key."""
    walk.alloc("g_logsoftmax", x.T * x.V * 4, "logits and loss", "nll_loss gradient (fp32, b x s x V)")
    walk.alloc("g_logits32", x.T * x.V * 4, "logits and loss", "log_softmax gradient (fp32, b x s x V)")
    walk.free("g_logsoftmax", "logsoftmax")
    return "g_logits32"
