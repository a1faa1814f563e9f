"""The time offloading adds to an iteration (t_offload in parcalc.core.timing.step.combine).

    t_offload = max(0, T_grad - W_b) + t_cpu + T_weights + max(0, T_act_out - t_fwd) + max(0, T_act_in - t_bwd)

- T_grad: the 16-bit gradients of this GPU's optimizer shard to the host over PCIe. ZeRO-Offload
  overlaps this copy with the backward (Ren et al. 2021 sec. 4.1: "swapping gradients ... with
  the backward propagation"); parcalc hides it behind the backward of the last micro-batch W_b
  (the gradients of the earlier ones accumulate on the GPU) and counts what does not fit.
- t_cpu: CPU-Adam's step over the shard, memory-bound on the host: it reads and writes the fp32
  master weight and states, reads the fp32 gradient and writes the 16-bit weight
  (parcalc.core.timing.compute.optimizer_bytes), at the host memory bandwidth shared by the node's
  GPUs. Default bandwidth: a DGX H100's two Xeon Platinum 8480C with 8 channels of DDR5-4800
  each, 2 x 8 x 4800 MT/s x 8 B = 614.4 GB/s (NVIDIA DGX H100 User Guide, hardware overview;
  Intel ark: 8 memory channels, DDR5-4800). A lower bound on the step: DeepSpeed's CPU-Adam is
  SIMD-vectorised and tiled (ZeRO-Offload sec. 5.1) so as to be memory-bound, and DeepSpeed quotes
  it 5-7x faster than PyTorch's CPU Adam (deepspeed.ai/tutorials/zero-offload); it is not
  overlapped (ZeRO-Offload's one-step delayed update, DPU, is off by default).
- T_weights: the updated 16-bit weights back to the GPU, after the step: not overlapped.
- Activation offload: out during the forward, back during the backward, each hidden under the
  compute of its pass (Megatron-LM / Transformer Engine overlap the copies on their own streams);
  what exceeds it is exposed.
Every PCIe transfer runs at the link preset's bandwidth per direction (PCIe 4.0 x16 31.5 GB/s,
5.0 x16 63 GB/s after encoding, presets/links), one latency per transfer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from parcalc.core.hardware import Gpu, Link
from parcalc.errors import InputError

HOST_MEMORY_BANDWIDTH = 614.4e9  # B/s per node: 2 sockets x 8 channels x DDR5-4800 x 8 B (DGX H100)
HOST_BANDWIDTH_SOURCE = ("NVIDIA's MLPerf Inference v4.1 system description of a DGX-class H200 node "
                         "(mlcommons/inference_results_v4.1 closed/NVIDIA/systems/H200-SXM-141GBx8_TRT_MaxQ.json: 2 x Intel Xeon "
                         "Platinum 8480C, 32 x 64GB MTC40F2046S1RC48BA1, i.e. DDR5-4800 RDIMMs); Sapphire Rapids has 8 DDR5 "
                         "channels per socket: 2 x 8 x 4.8 GT/s x 8 B = 614.4 GB/s per node, the channels' peak (parcalc's "
                         "default host; 2 DIMMs per channel may run them slower)")  # fmt: skip
ZERO_OFFLOAD_OVERLAP = "Ren et al. 2021 (ZeRO-Offload) sec. 4.1: the gradient copy to the CPU overlaps the backward; the step and the weight copy do not"


def default_host_link_name(gpu: Gpu | None) -> str:
    """PCIe 5.0 x16 for Hopper and Blackwell (H100 whitepaper sec. 2.1: PCIe Gen5), else PCIe 4.0 x16 (A100: Gen4)."""
    arch = (gpu.architecture if gpu is not None else "").lower()
    return "pcie5-x16" if "hopper" in arch or "blackwell" in arch else "pcie4-x16"


def host_link_of(training: Any) -> Link:
    """The GPU's link to the host that offloading copies over (Training.host_link). The core reads no preset: the
    caller resolves it, the command line from --host-link or default_host_link_name's preset."""
    if training.host_link is None:
        raise InputError("offloading needs the GPU's link to the host (Training.host_link; the command line's default is "
                         "default_host_link_name's preset: pcie5-x16 on Hopper and Blackwell, else pcie4-x16)")
    return training.host_link


@dataclass(frozen=True)
class OffloadTimes:
    """Seconds per iteration: each transfer and step, and what stays exposed (t_offload)."""

    grad_to_host: Any
    cpu_step: Any
    weights_to_gpu: Any
    activations_out: Any
    activations_in: Any
    exposed: Any


def transfer_time(bytes_: Any, link: Link) -> Any:
    """One PCIe copy: latency + bytes / bandwidth per direction (0 for nothing); floats or arrays."""
    return np.where(np.asarray(bytes_) > 0, link.latency.value + np.asarray(bytes_) / link.bandwidth_per_direction.value, 0.0)


def offload_times(*, grad_bytes: Any, weight_bytes: Any, shard_params: Any, cpu_bytes_per_param: float, activation_bytes: Any,
                  link: Link, gpus_per_node: int, backward_window: Any, forward_total: Any, backward_total: Any,
                  host_bandwidth: float = HOST_MEMORY_BANDWIDTH) -> OffloadTimes:  # fmt: skip
    """t_offload from the bytes one GPU moves (see the module docstring for the overlaps); floats or arrays."""
    t_grad = transfer_time(grad_bytes, link)
    t_cpu = np.asarray(shard_params) * cpu_bytes_per_param / (host_bandwidth / gpus_per_node)
    t_weights = transfer_time(weight_bytes, link)
    t_out = transfer_time(activation_bytes, link)
    t_in = t_out
    exposed = (np.maximum(0.0, t_grad - backward_window) + t_cpu + t_weights + np.maximum(0.0, t_out - forward_total)
               + np.maximum(0.0, t_in - backward_total))  # fmt: skip
    return OffloadTimes(t_grad, t_cpu, t_weights, t_out, t_in, exposed)
