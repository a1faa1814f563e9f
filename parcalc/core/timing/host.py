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

Where the loop synchronises inside the step (the host waits until the GPU has run everything issued: a
`torch.cuda.synchronize()`, a `.item()`, a Python `if` on a CUDA tensor), the host cannot run ahead across it:
the GPU's queue is empty there, so the step is the sum of its sync-separated segments, each a fluid model of
its own (host_exposed_segments). Hugging Face's Trainer tests every micro-batch's loss for NaN in Python after
its backward, so the optimizer step's own host work (its Python before the first launch) is exposed there; a
plain loop that synchronises only around the step hides it under the backward's backlog.

The optimizer step is two phases: its Python before the first launch (torch.optim.adamw's _init_group over the
parameters, _group_tensors_by_device_and_dtype: host only, no kernel) and its multi-tensor launches.

Compiled code (--compile: torch.compile's Inductor) issues its kernels another way, so its host time per kernel is another
mechanism with its own sources (CompiledHostCosts): the generated Python wrapper's `call(args)` runs one line a kernel, no
model code and no autograd node per op (the compiled backward is one autograd node, CompiledFunctionBackward, whose body is
the backward graph's wrapper). A generated (Triton) kernel is CachingAutotuner.run -> the launcher -> cuLaunchKernel; an
extern kernel (a GEMM: extern_kernels.mm; attention: the SDPA ATen op) is the ATen op called from the wrapper, as much host
work as the same op called from eager code (cuBLASLt's or cuDNN's own host work dominates it), less the Python around it.
The optimizer is not compiled: its costs stay the eager ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from parcalc.frozen import frozen


@frozen
class HostCosts:
    """Host time per kernel issued: forward (Python model code), backward (autograd engine),
    optimizer (per kernel of its step); source: where they were measured."""

    forward: float
    backward: float
    optimizer: float
    source: str
    # s of the optimizer step's Python per parameter tensor before its first launch (torch/optim/adamw.py _init_group: state
    # look-ups and list appends per parameter); 0: not measured
    prelude: float = 0.0


@frozen
class CompiledHostCosts:
    """Host time per kernel of compiled code (Inductor's wrapper; the module docstring): the launch of a generated (Triton)
    kernel, an extern GEMM's ATen op, an attention op's forward and backward (the SDPA ATen op, whatever kernels it
    launches), and the wrapper's own lines around every kernel (its output's allocation, views, checks); source."""

    generated: float
    gemm: float
    attention_forward: float
    attention_backward: float
    wrapper: float
    source: str

    def phase(self, generated: int, gemm: int, attention: int, backward: bool) -> float:
        """Seconds the host takes to issue a phase of these kernels (attention: ops, one kernel each in parcalc's lists)."""
        per_attention = self.attention_backward if backward else self.attention_forward
        return generated * self.generated + gemm * self.gemm + attention * per_attention + (generated + gemm + attention) * self.wrapper


# The profiler's factor on the host's time to issue each phase of Hugging Face Llama's step: profiled (record_shapes=True,
# as the shared traces were taken) over unprofiled, measured with real PyTorch on the CPU (benchmarks/host_profiler_overhead.py:
# the same transformers LlamaForCausalLM code, 16 layers, autocast bf16, SDPA, fused AdamW, at a tiny width so that the host's
# work dominates; each phase's minimum wall time over 105 interleaved rounds on a shared 2-core machine, 11.95 -> 15.56 ms
# forward, 13.51 -> 20.83 ms backward; single runs slowed by other jobs gave 0.94-1.38 / 1.31-1.68; the thread's CPU time,
# which a descheduled round does not inflate, gives 1.23 / 1.56 over 90 rounds, 13.85 -> 17.10 and 16.66 -> 25.95 ms).
# The profiler's cost is per recorded ATen op, as is the
# host's own work, so the factor is the code's rather than the machine's. On a GPU the profiler also records each CUDA runtime
# call (CUPTI), which this CPU measurement does not see: the unprofiled host it gives is an upper bound. The optimizer's
# launches come from one ATen op (_fused_adamw_) and its Python before them records none: 1.
PROFILED_HOST_SLOWDOWN = {"forward": 1.30, "backward": 1.54, "optimizer": 1.0}
PROFILED_HOST_SOURCE = ("benchmarks/host_profiler_overhead.py: torch.profiler(record_shapes=True) over the unprofiled host time of "
                        "transformers' LlamaForCausalLM step with real PyTorch 2.13 on the CPU (AMD EPYC, 2026-11-29, minimum wall time of "
                        "105 rounds): forward 1.30, backward 1.54 (the thread's CPU time: 1.23, 1.56)")  # fmt: skip


@frozen
class Phase:
    """One phase of a step (forward, backward, optimizer): its host time and its GPU time."""

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


def host_exposed_segments(segments: Sequence[Sequence[Phase]]) -> float:
    """t_host of a step whose loop synchronises between segments: the GPU's queue is empty at each synchronisation, so
    each segment is a fluid model of its own and their exposures add up (see the module docstring)."""
    return sum(host_exposed(segment) for segment in segments)


def step_segments(h_f: float, g_f: float, h_b: float, g_b: float, m: int, h_pre: float, h_o: float, g_o: float,
                  sync_after_backward: bool) -> list[list[Phase]]:  # fmt: skip
    """The step's phases in issue order, cut where the loop synchronises: m micro-batches' forward and backward, then
    the optimizer's Python before its first launch (host only) and its launches; with `sync_after_backward` every
    backward ends a segment (the Trainer's NaN test of the micro-batch's loss)."""
    optimizer = [Phase(h_pre, 0.0), Phase(h_o, g_o)]
    if sync_after_backward:
        return [[Phase(h_f, g_f), Phase(h_b, g_b)] for _ in range(m)] + [optimizer]
    return [[Phase(h_f, g_f), Phase(h_b, g_b)] * m + optimizer]


def host_exposed_repeated(h_f: Any, g_f: Any, h_b: Any, g_b: Any, m: Any, h_o: Any, g_o: Any, h_pre: Any = 0.0,
                          sync_after_backward: bool = False) -> Any:  # fmt: skip
    """host_exposed_segments(step_segments(...)) on numbers or numpy arrays alike (fit --search). The candidates of
    host_exposed's max are linear in the micro-batch k a phase j starts, so only the first and last micro-batch's
    forward and backward, the optimizer's two phases and the issue of everything need be compared:

        forward k:  k (H_f + H_b) + (m - k) (G_f + G_b) + G_o
        backward k: k (H_f + H_b) + H_f + (m - k) (G_f + G_b) - G_f + G_o
        optimizer:  m (H_f + H_b) + G_o,  m (H_f + H_b) + H_pre + G_o,   all issued: m (H_f + H_b) + H_pre + H_o

    Synchronised after every backward, each micro-batch is its own segment, max(G_f + G_b, H_f + G_b, H_f + H_b) -
    (G_f + G_b), and the optimizer's H_pre + max(0, H_o - G_o)."""
    import numpy as np  # only the search's arrays need it

    host, gpu = h_f + h_b, g_f + g_b
    if sync_after_backward:
        micro = np.maximum.reduce([gpu, h_f + g_b, host]) - gpu
        return np.maximum(m * micro + h_pre + np.maximum(h_o - g_o, 0.0), 0.0)
    last = m - 1
    finish = np.maximum.reduce([m * host + h_pre + h_o, m * host + h_pre + g_o, m * gpu + g_o, last * host + (m - last) * gpu + g_o,
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
