"""torchao's FP8 all-gather under FSDP2 (torchtitan's --float8.enable_fsdp_float8_all_gather, parcalc's --fp8-all-gather):
which weights travel in FP8, and the amax all-reduce that scales them. The memory of it is walked in parcalc.core.memory_fsdp
(FsdpStep.float8_all_gather); this module is what the communication and the step time take from it.

- Which weights: torchtitan converts every nn.Linear but the output projection to torchao's Float8Linear (SOURCES['converter']):
  a transformer layer's attention and MLP projections (and an MoE layer's shared experts); from e7c0cae only those whose
  dims are both multiples of 16 (FP8 Tensor Cores' rule). Their weights are WeightWithDynamicFloat8CastTensor; everything
  else (norms, the embedding, the output projection, an MoE router, which torchtitan's MoE configs filter out, and grouped
  routed experts, which are not nn.Linear) is gathered in param_dtype (bf16) as before. Biases stay in param_dtype too.
- How: fsdp_pre_all_gather casts the rank's fp32 shard to e4m3 with a scale and returns its FP8 data, 1 byte an element on
  the wire instead of 2 (SOURCES['all_gather']); FSDP2's foreach_all_gather packs a unit's inputs of several dtypes into
  one byte buffer, so a unit is still one all-gather call, of (Float8 elements x 1 + the rest x 2) bytes. The
  reduce-scatter of the gradients is unchanged (reduce_dtype).
- The scale: with precompute_float8_dynamic_scale_for_fsdp, after the optimizer step, one all-reduce of the stacked amax of
  every Float8 weight of the model part (torch._foreach_norm(weights, inf) stacked: n_w x 4 bytes, fp32 like the shards)
  per step (SOURCES['precompute']); without it each weight's pre-all-gather all-reduces its own amax (reduce_amax=True), a
  4-byte all-reduce per weight per gather. parcalc follows the precompute, as the runs that publish the FP8 all-gather set
  it (torchtitan's llama3_405b.toml at 9dec370; Trainy's H200 command at e7c0cae) and as the memory walk does; torchtitan's
  default leaves it off.
- When: torchtitan enables it only where FSDP shards (parallel_dims.dp_shard_enabled, dp_shard > 1); parcalc applies it to
  every ZeRO-3 gather (with dp_shard = 1 and cp > 1 torchtitan would gather in bf16).
The weight casts themselves (the shard's before each gather, where Float8Linear would otherwise cast the unsharded weight in
forward and backward) are not timed, as no weight quantisation is (parcalc.core.timing.fp8_quantise).
"""

from parcalc.core.comm.tensors import ParamTensor, Split, layer_tensors, moe_layer_tensors
from parcalc.core.model import TransformerModel

AO = "pytorch/ao v0.18.0"
SOURCES = {
    "converter": ("pytorch/torchtitan torchtitan/float8.py at 9dec370: convert_to_float8_training(model, config, module_filter_fn="
                  "lambda mod, fqn: fqn != 'output'); e7c0cae torchtitan/components/quantization/utils.py module_filter_fn: "
                  "nn.Linear only, both weight dims divisible by 16, fqn not in filter_fqns (['output'])"),
    "all_gather": (f"{AO} torchao/float8/fsdp_utils.py WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather: "
                   "hp_tensor_and_scale_to_float8(self._tensor, self._precomputed_scale, e4m3) returns (float8_tensor._data,), "
                   "fsdp_post_all_gather wraps the gathered FP8 data; pytorch/pytorch v2.13.0 torch/distributed/fsdp/_fully_shard/"
                   "_fsdp_collectives.py foreach_all_gather: a unit's inputs of several dtypes gathered as one byte buffer"),
    "precompute": (f"{AO} torchao/float8/fsdp_utils.py precompute_float8_dynamic_scale_for_fsdp: torch._foreach_norm(weights, "
                   "ord=math.inf) stacked, clamp 'will issue a single all-reduce'; pytorch/torchtitan train.py at 9dec370: "
                   "float8_handler.precompute_float8_dynamic_scale_for_fsdp(model_parts) after optimizers.step(); at e7c0cae the "
                   "Float8Converter's post_optimizer_hook (torchtitan/components/quantization/float8.py), registered with "
                   "optimizers.register_step_post_hook (train.py)"),
}


def is_float8_linear(tensor: ParamTensor) -> bool:
    """Whether an unsharded layer tensor is a Float8Linear's weight under torchtitan's converter (SOURCES['converter']): a
    linear weight (split by columns or rows under TP; norms, routers and gates are replicated) with both dims multiples of 16."""
    return (tensor.split in (Split.COLUMN, Split.ROW) and tensor.name.endswith(".weight")
            and tensor.rows % 16 == 0 and tensor.cols % 16 == 0)  # fmt: skip


def float8_names(model: TransformerModel) -> frozenset[str]:
    """The names of layer 0's Float8 weights (dense and MoE layer), as parcalc.core.comm.tensors names every layer's tensors."""
    tensors = layer_tensors(model, 0) + (moe_layer_tensors(model, 0) if model.moe is not None else [])
    return frozenset(t.name for t in tensors if is_float8_linear(t))


def float8_layer_elements(model: TransformerModel, tp: int) -> tuple[float, float]:
    """(Float8 weight elements, weights) of one layer on a TP rank, the mean over the model's layers (dense and MoE layers by
    their counts): each projection split tp ways (column- or row-parallel)."""
    moe = model.moe_layers if model.moe is not None else 0
    dense = [t for t in layer_tensors(model, 0) if is_float8_linear(t)]
    sparse = [t for t in moe_layer_tensors(model, 0) if is_float8_linear(t)] if moe else []

    def sharded(tensors: list[ParamTensor]) -> float:
        return sum(-(-t.rows // tp) * t.cols if t.split is Split.COLUMN else t.rows * -(-t.cols // tp) for t in tensors)

    layers = model.layers
    elements = ((layers - moe) * sharded(dense) + moe * sharded(sparse)) / layers
    return elements, ((layers - moe) * len(dense) + moe * len(sparse)) / layers
