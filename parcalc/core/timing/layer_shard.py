"""What one GPU computes of one layer for one micro-batch: the shard every kernel list (parcalc.core.timing.compute, hf_kernels,
mamba_kernels) is built for."""

from __future__ import annotations

from parcalc.frozen import frozen


@frozen
class LayerShard:
    """What one GPU computes of one layer for one micro-batch."""

    micro_batch: int
    seq_len: int
    tp: int
    sequence_parallel: bool
    flash_attention: bool
    dropout: bool
    causal: bool
    bytes_per_element: float  # activations (2 for 16-bit, 4 for fp32)
    cp: int = 1  # context parallelism: seq_len is this rank's shard s/cp; its queries attend over all s keys
    fp8: str = ""  # FP8 training: the scaling recipe of the GEMM inputs (FP8_RECIPES); "": none
    compiled: bool = False  # torch.compile (Inductor): memory-bound neighbours fused (COMPILE_GROUPS)
    eager: bool = False  # eager PyTorch: one kernel per ATen op of the model code (EAGER_SOURCE); compiled wins
    hf: bool = False  # Hugging Face's Llama code under autocast over fp32 weights (parcalc.core.timing.hf_kernels); eager too
    expert_activation: str = "fused"  # the routed experts' activation with the routing probabilities (compute.EXPERT_ACTIVATIONS)
