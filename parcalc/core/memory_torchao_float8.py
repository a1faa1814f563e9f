"""torchao's Float8 training (tensorwise scaling) in torchtitan's step walk: what a Float8Linear allocates.

torchtitan's float8 converter (AO_SOURCES['converter']) swaps every nn.Linear but the output projection for torchao's
Float8Linear. Its forward and backward are one autograd.Function, `matmul_with_hp_or_float8_args` (AO_SOURCES['linear']):
- forward: `ctx.save_for_backward(input_hp, weight_hp_t)`: the bf16 input and weight, as nn.Linear saves them (nothing in
  FP8 is kept for backward); then the input cast to e4m3, the weight cast to e4m3, `torch.mm` on the two Float8 tensors
  (torch._scaled_mm, a bf16 output); the casts go when the function returns;
- backward: grad_output cast to e5m2 and the weight cast again, the input gradient's mm; grad_output cast again and the
  input cast, the weight gradient's mm (bf16, the unsharded parameter's .grad as nn.Linear's); the four FP8 copies live
  until backward returns.
Each cast (AO_SOURCES['cast']) is eager ATen ops: `torch.max(torch.abs(x))` (abs: a copy in x's dtype, freed once its max
is taken), the scale (scalars), then `x.to(torch.float32) * scale` (an fp32 copy, the product; the copy goes), `clamp`
(fp32) and `.to(float8)` (1 byte an element); clamp and the product go. So a cast of n bf16 elements holds 9n bytes at
once (product, clamp, FP8) and keeps n.

Under torchtitan's selective op checkpointing `_save_list` holds aten.abs and aten.max (memory_torchtitan TT_SOURCES['ac']),
so the forward caches abs(x) of every cast (the block's inputs and weights, bf16) beside the block's other cached outputs;
the recomputation takes each from the cache (freeing it after its max) and runs the rest of the cast again. A custom
autograd.Function packs what it saves once its forward has returned, so the recomputation's early stop comes after w2's
casts and matmul (nn.Linear's mm packs its inputs before it runs): w2's cached output is taken and freed there too.

Ground truth: FSDPMemTracker over torchtitan's Transformer with torchao 0.18's convert_to_float8_training on fake ranks
(tests/ground_truth/torchao_float8_fsdp.py, its fixture tests/fixtures/torchao/float8_fsdp_tracker.json).

With enable_fsdp_float8_all_gather under TP and inside pipeline stages (AO_SOURCES['tp_all_gather']) the same holds of the
TP-local weight: its dp shard cast and gathered in FP8, no cast of it in the Float8 TP styles' linears (weight_cast returns
none); ground truth FSDPMemTracker on (dp, tp) meshes and MemTracker over Schedule1F1B stages
(tests/ground_truth/torchao_float8_all_gather_tp_pp.py, fixture tests/fixtures/torchao/float8_all_gather_tp_pp_tracker.json).
"""

from __future__ import annotations

from parcalc.core.memory_walk import StepShapes, Walk

AO = "pytorch/ao v0.18.0"
AO_SOURCES = {
    "converter": ("pytorch/torchtitan torchtitan/float8.py (Float8Converter at 0f892e8): Float8LinearConfig("
                  "enable_fsdp_float8_all_gather=dp_shard_enabled and job_config.float8.enable_fsdp_float8_all_gather, "
                  "force_recompute_fp8_weight_in_bwd=...); convert_to_float8_training(model, config, module_filter_fn=lambda mod, "
                  "fqn: fqn != 'output'): every linear but the output projection (later torchtitan, "
                  "components/quantization/float8.py, also skips linears whose dims are not multiples of 16); "
                  "precompute_float8_dynamic_scale_for_fsdp after the optimizer step"),
    "linear": (f"{AO} torchao/float8/float8_linear.py matmul_with_hp_or_float8_args: forward ctx.save_for_backward(input_hp, "
               "weight_hp_t), hp_tensor_to_float8_dynamic of the input (e4m3) and of the weight (e4m3), torch.mm; backward: "
               "grad_output (e5m2) and weight casts, grad_input = mm; grad_output and input casts again, grad_weight = mm"),
    "all_gather": (f"{AO} torchao/float8/fsdp_utils.py WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather: "
                   "hp_tensor_and_scale_to_float8(self._tensor, precomputed_scale) of the fp32 shard (or a dynamic cast with "
                   "reduce_amax), returns its FP8 data; fsdp_post_all_gather: the unsharded weight a Float8TrainingTensor over the "
                   "gathered FP8 data; float8_linear.py: a weight already in FP8 (tensor_already_casted_to_fp8) is not cast again "
                   "in forward or backward; pytorch/pytorch v2.13.0 torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py "
                   "foreach_all_gather: inputs of several dtypes gathered as bytes"),
    "tp_all_gather": (f"{AO} torchao/float8/float8_linear.py Float8Linear.from_float: the weight a WeightWithDynamicFloat8CastTensor, "
                      "which apply_tp's distribute_tensor makes the local tensor of a tp DTensor and fully_shard shards over dp; "
                      "fsdp_utils.py:228-251 fsdp_pre_all_gather casts that dp shard of the TP-local weight (the scale dynamic, its "
                      "amax all-reduced over the mesh, or precomputed), fsdp_post_all_gather a Float8TrainingTensor inside the tp "
                      "DTensor; distributed_utils.py:14-27 tensor_already_casted_to_fp8 looks through the DTensor, so "
                      "matmul_with_hp_or_float8_args casts no weight; torchtitan 9dec370 torchtitan/float8.py:51-53 turns it on only "
                      "where parallel_dims.dp_shard_enabled"),
    "cast": (f"{AO} torchao/float8/float8_utils.py tensor_to_amax (torch.max(torch.abs(x))), amax_to_scale (float64 "
             "scalars); float8_training_tensor.py _ToFloat8ConstrFunc.forward: tensor.to(torch.float32) * scale, "
             "to_fp8_saturated: x.clamp(min=-max, max=max).to(float8_dtype); float8_ops.py float8_mm: torch._scaled_mm"),
}


def cast(walk: Walk, key: str, elements: float, in_bytes: float, cache_abs: bool = False, amax: bool = True) -> str:
    """hp_tensor_to_float8_dynamic of `elements` values of `in_bytes` each (AO_SOURCES['cast']); returns the FP8 copy's key.
    `cache_abs`: selective op checkpointing keeps abs(x) (module docstring); `amax` False: hp_tensor_and_scale_to_float8 with
    a scale already known (precompute_float8_dynamic_scale_for_fsdp's), no abs."""
    if amax and cache_abs:
        walk.alloc(f"{key}.abs", elements * in_bytes, "activations", "Float8 cast abs(x) (cached by selective op checkpointing)")
    elif amax:
        walk.transient(f"{key}.abs", elements * in_bytes, "temporaries", "Float8 cast: abs(x) for its amax")
    if in_bytes != 4:  # .to(torch.float32) of an fp32 tensor is the tensor itself
        walk.alloc(f"{key}.f32", elements * 4, "temporaries", "Float8 cast: x.to(float32)")
    walk.alloc(f"{key}.scaled", elements * 4, "temporaries", "Float8 cast: x * scale (fp32)")
    walk.free(f"{key}.f32")
    walk.alloc(f"{key}.clamp", elements * 4, "temporaries", "Float8 cast: clamp (fp32)")
    walk.alloc(f"{key}.fp8", elements, "temporaries", "Float8 copies of GEMM inputs")
    walk.free(f"{key}.clamp", f"{key}.scaled")
    return f"{key}.fp8"


def uncache_abs(walk: Walk, key: str) -> None:
    """The recomputation takes a cached abs(x) from selective op checkpointing's storage; its max is taken, and it goes."""
    walk.free(f"{key}.abs")


def forward_casts(walk: Walk, x: StepShapes, key: str, tokens: float, d_in: int, d_out: int, caching: bool, recomputing: bool) -> tuple[str, ...]:
    """A Float8Linear's forward casts before its mm (input, then weight); returns the FP8 copies, freed after the mm.
    `caching`: the forward of a block under selective op checkpointing (abs cached); `recomputing` under that policy: the
    cached abs taken back."""
    keys = []
    weight = () if x.float8_weights else (("w", d_in * d_out),)  # an FP8-gathered weight is cast already
    for name, elements in (("in", tokens * d_in), *weight):
        k = f"{key}.f8{name}"
        if recomputing:
            uncache_abs(walk, k)
        keys.append(cast(walk, k, elements, x.c, cache_abs=caching))
    return tuple(keys)


def backward_for_input(walk: Walk, x: StepShapes, key: str, tokens: float, d_in: int, d_out: int) -> tuple[str, ...]:
    """Before the input gradient's mm: grad_output to e5m2, the weight to e4m3 (AO_SOURCES['linear'])."""
    grad_output = cast(walk, f"{key}.b8go", tokens * d_out, x.c)
    if x.float8_weights:  # an FP8-gathered weight is cast already
        return (grad_output,)
    return (grad_output, cast(walk, f"{key}.b8w", d_in * d_out, x.c))


def backward_for_weight(walk: Walk, x: StepShapes, key: str, tokens: float, d_in: int, d_out: int) -> tuple[str, ...]:
    """After the input gradient's mm, before the weight gradient's: grad_output cast again (its other layout), the input."""
    return (cast(walk, f"{key}.b8go2", tokens * d_out, x.c), cast(walk, f"{key}.b8in", tokens * d_in, x.c))


# torchao's Float8 tensor-parallel styles, as torchtitan's apply_tp picks them with Float8 linears (memory_torchtitan_tp)
AO_TP_SOURCES = {
    "apply_tp": ("pytorch/torchtitan torchtitan/parallelisms/parallelize_llama.py at 9dec370, apply_tp(..., enable_float8="
                 "job_config.float8.enable_float8_linear): each block's plan takes Float8RowwiseParallel, Float8ColwiseParallel, "
                 "PrepareFloat8ModuleInput in place of RowwiseParallel, ColwiseParallel, PrepareModuleInput; the embedding, the "
                 "final norm and the output projection keep the plain styles; train.py converts the linears before parallelising"),
    "prepare_input": (f"{AO} torchao/float8/float8_tensor_parallel.py PrepareFloat8ModuleInput._prepare_input_arg: "
                      "hp_tensor_to_float8_dynamic of the sequence-sharded input (e4m3), then redistribute(Replicate): the norm's "
                      "output cast on its T / tp tokens and all-gathered in FP8, one copy for wq, wk and wv (w1 and w3), which "
                      "matmul_with_hp_or_float8_args takes as already cast (tensor_already_casted_to_fp8) and saves: 1 byte an "
                      "element where the bf16 plan saves 2"),
    "rowwise": (f"{AO} torchao/float8/float8_tensor_parallel.py Float8RowwiseParallel._prepare_input_fn: wo's and w2's input "
                "cast to e4m3 before the linear, which saves the FP8 copy (w2's bf16 input is saved by nothing else); "
                "_prepare_output_fn: the reduce-scatter, then NoopFwToFloat8BwDynamic"),
    "grad_output": (f"{AO} torchao/float8/float8_scaling_utils.py NoopFwToFloat8BwDynamic.backward: each linear's output "
                    "gradient cast to e5m2 before its backward (for wo and w2 on the sequence shard, before the redistribute's "
                    "backward all-gathers it in FP8); float8_linear.py: an FP8 grad_output is not cast again, so each backward "
                    "casts only the weight (e4m3), then the input gradient's mm and the weight gradient's"),
}


def weight_cast(walk: Walk, x: StepShapes, key: str, d_in: int, d_out: int) -> tuple[str, ...]:
    """matmul_with_hp_or_float8_args's cast of a (TP-local) weight before its mm, forward or backward; none where the weight
    was all-gathered in FP8 (AO_SOURCES['all_gather'], under TP AO_SOURCES['tp_all_gather'])."""
    return () if x.float8_weights else (cast(walk, f"{key}.f8w", d_in * d_out, x.c),)
