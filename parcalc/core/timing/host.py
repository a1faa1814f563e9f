"""The time the GPU waits for the host: eager PyTorch issues one kernel at a time.

In eager mode every kernel is issued by the CPU: the model's Python code, PyTorch's dispatcher
and cudaLaunchKernel in the forward pass, the autograd engine's C++ loop in the backward, the
optimizer's Python in its step. The GPU runs the kernels in issue order and the host runs ahead
of it until a synchronisation, so host time is hidden wherever the GPU is behind, and exposed
where the host is: a step of short kernels (small batch, short sequences) keeps the GPU waiting.

With the kernels issued in phases (each micro-batch's forward, its backward, the optimizer step)
of host time H_i and GPU time G_i, the GPU cannot start phase j before the host has issued every
kernel before it, and then runs at least the GPU time of the phases left:

    T = max(sum(H), max_j (sum_{i<j} H_i + sum_{i>=j} G_i)),   t_host = T - sum(G)

(a fluid model: within a phase the queue evens out; the first kernel of the step waits for the
host, the last for the GPU). H_i = kernels of the phase x the host's time per kernel there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class HostCosts:
    """Host time per kernel issued: forward (Python model code), backward (autograd engine),
    optimizer (per kernel of its step); source: where they were measured."""

    forward: float
    backward: float
    optimizer: float
    source: str


@dataclass(frozen=True)
class Phase:
    host: float  # seconds the host takes to issue the phase's kernels
    gpu: float  # seconds the GPU takes to run them


def host_exposed(phases: Sequence[Phase]) -> float:
    """t_host: the GPU's wait for the host over the phases, in issue order (see the module docstring)."""
    gpu_left = sum(p.gpu for p in phases)
    issued = 0.0
    finish = sum(p.host for p in phases)
    for phase in phases:
        finish = max(finish, issued + gpu_left)
        issued += phase.host
        gpu_left -= phase.gpu
    return max(finish - sum(p.gpu for p in phases), 0.0)


def host_exposed_repeated(h_f: Any, g_f: Any, h_b: Any, g_b: Any, m: Any, h_o: Any, g_o: Any) -> Any:
    """host_exposed of m micro-batches' (forward, backward) phases then the optimizer's, on numbers or numpy arrays alike
    (fit --search). The candidates of host_exposed's max are linear in the micro-batch k a phase j starts, so only the
    first and last micro-batch's forward and backward, the optimizer's and the issue of everything need be compared:

        forward k:  k (H_f + H_b) + (m - k) (G_f + G_b) + G_o
        backward k: k (H_f + H_b) + H_f + (m - k) (G_f + G_b) - G_f + G_o
        optimizer:  m (H_f + H_b) + G_o,   all issued: m (H_f + H_b) + H_o"""
    import numpy as np  # only the search's arrays need it

    host, gpu = h_f + h_b, g_f + g_b
    last = m - 1
    finish = np.maximum.reduce([m * host + h_o, m * host + g_o, m * gpu + g_o, last * host + (m - last) * gpu + g_o,
                                h_f + m * gpu - g_f + g_o, last * host + h_f + (m - last) * gpu - g_f + g_o])  # fmt: skip
    return np.maximum(finish - (m * gpu + g_o), 0.0)


# PyTorch's multi_tensor_apply (the fused and foreach optimizers): each launch covers at most 320 blocks
# of 65,536 elements, over lists of at most 36 tensors at depth 4 (param, grad, exp_avg, exp_avg_sq: fused
# AdamW without amsgrad) or 110 at depth 1 (the _foreach_add_ of the step counters before it)
# (pytorch aten/src/ATen/native/cuda/MultiTensorApply.cuh, kChunkSize = 65536, depth_to_max_blocks =
# {320, 320, 320, 320, 320}, depth_to_max_tensors = {110, 64, 48, 36, 30}; torch/optim/adam.py _fused_adam:
# torch._foreach_add_(device_state_steps, 1) then torch._fused_adamw_)
CHUNK_ELEMENTS = 65536
BLOCKS_PER_LAUNCH = 320
TENSORS_PER_LAUNCH = 36
STEP_TENSORS_PER_LAUNCH = 110
MULTI_TENSOR_SOURCE = ("PyTorch aten/src/ATen/native/cuda/MultiTensorApply.cuh: chunks of 65,536 elements, at most 320 blocks and 36 "
                       "tensors (depth 4) per launch of the fused AdamW kernel, 110 per launch of the step counters' _foreach_add_")  # fmt: skip


def optimizer_launches(tensor_sizes: Sequence[int]) -> int:
    """Kernels the fused AdamW step launches over parameters of these sizes: the step counters' increments, and
    multi_tensor_apply's loop over the parameters, which
    launches when a launch's block list is full, when its tensor list is full after a tensor's last chunk, or at
    the end (a tensor cut by a full block list stays in the next launch's list)."""
    launches = blocks = tensors = 0
    for t, n in enumerate(tensor_sizes):
        tensors += 1
        chunks = -(-n // CHUNK_ELEMENTS)
        for c in range(chunks):
            blocks += 1
            last_chunk = c == chunks - 1
            tensors_full = tensors == TENSORS_PER_LAUNCH and last_chunk
            if tensors_full or blocks == BLOCKS_PER_LAUNCH or (t == len(tensor_sizes) - 1 and last_chunk):
                launches += 1
                blocks = 0
                tensors = 0 if last_chunk else 1
    return launches + -(-len(tensor_sizes) // STEP_TENSORS_PER_LAUNCH)
