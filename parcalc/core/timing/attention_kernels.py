"""Fused attention as an older software generation ran it: a kernel's measured rate has a date.

A GPU preset's `attention_forward` / `attention_backward` (or `attention_by_head_dim`) are the rates of the fused
attention kernel a run of today would get (FlashAttention-2 on the H100 and A100, cuDNN's on the H200). A published run
took its attention kernel from its own stack: MosaicML's llm-foundry benchmarks of 2023 (the MPT tables of
tests/published_step_runs.py) ran `attn_impl: triton` (scripts/train/benchmarking/submit_benchmarks.py @061f2c7,
`--attn_impl` default 'triton'; the mpt-*.yaml files say the same), which is Tri Dao's Triton FlashAttention
(llmfoundry/models/layers/flash_attn_triton.py, v0.3.0: 'Copied from .../flash_attn/flash_attn_triton.py', compiled by
the pre-MLIR Triton, triton-pre-mlir @triton_pre_mlir_sm90) and not FlashAttention-2. Its docstring: 'Overall Triton
forward + backward is slightly slower than CUDA forward + backward', i.e. than FlashAttention (1), whose H100 rate is
less than half FlashAttention-2's (Dao 2023, arXiv:2307.08691, Fig. 7; the rates are in the GPU presets'
`attention_kernels`, each with its source).

`with_attention_kernel(gpu, name)` gives the GPU whose fused attention runs at that implementation's shares (its one
share for every head dimension: the presets' figures are at the runs' head dimension). A preset without that
implementation is refused: no rate is transferred between GPUs here.
"""

from __future__ import annotations

from dataclasses import replace

from parcalc.core.hardware import Gpu, Sourced


def attention_kernel_shares(gpu: Gpu, name: str) -> tuple[Sourced, Sourced]:
    """(forward, backward) shares of the 16-bit peak of attention implementation `name` on `gpu` (its preset's
    `kernels.attention_kernels`); ValueError where the preset does not give it."""
    rates = gpu.kernels
    table = {row[0]: row[1:] for row in rates.attention_kernels} if rates is not None else {}
    if name not in table:
        known = ", ".join(sorted(table)) or "none"
        raise ValueError(f"the {gpu.key} preset gives no rate for attention kernel {name!r} (it gives: {known})")
    forward, backward = table[name]
    return forward, backward


def with_attention_kernel(gpu: Gpu, name: str) -> Gpu:
    """`gpu` with its fused attention at implementation `name`'s shares (forward, backward), for every head dimension."""
    forward, backward = attention_kernel_shares(gpu, name)
    assert gpu.kernels is not None  # attention_kernel_shares refused a preset without kernels
    kernels = replace(gpu.kernels, attention_forward=forward, attention_backward=backward, attention_by_head_dim=(),
                      attention_tiles=None)
    return replace(gpu, kernels=kernels)
