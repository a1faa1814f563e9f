"""Offloading to host memory: what stays on the GPU, what the host holds, what crosses PCIe.

Optimizer offload (ZeRO-Offload, Ren et al. 2021, "ZeRO-Offload: Democratizing Billion-Scale
Model Training", USENIX ATC, sec. 4.1 and Figure 2): the GPU keeps the 16-bit weights and runs
forward and backward; the fp32 master weights, the optimizer states and an fp32 gradient
partition live on the host, where CPU-Adam updates them. Per iteration each GPU sends its
16-bit gradients (its ZeRO partition) to the host and receives the updated 16-bit weights: 2 Psi
each way for one GPU ("the total communication volume is 4M"), Psi / N_d each with ZeRO-2
partitions. DeepSpeed's estimator counts 2 Psi on the GPU and 16 Psi on the host (per node, with
a 1.5 buffer factor) for ZeRO-2 with cpu_offload (deepspeed/runtime/zero/stage_1_and_2.py,
estimate_zero2_model_states_mem_needs: gpu_mem = 2 * total_params): with ZeRO-2 the gradients
leave the GPU bucket by bucket, and parcalc counts none on it; with ZeRO-0/1 the 16-bit gradients
stay on the GPU until the step. PyTorch FSDP's CPUOffload(offload_params=True) also keeps the
sharded parameters on the host; parcalc models ZeRO-Offload.

Activation offload (Megatron-LM --cpu-offloading, Transformer Engine's CPU offload handler;
torch.autograd.graph.save_on_cpu): every saved tensor of a layer is copied to the host in the
forward and back before that layer's backward; the GPU holds two layers of one micro-batch at a
time (the one being computed and the one in transit: double buffering, parcalc's assumption).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from parcalc.derivation import Derivation, Term

if TYPE_CHECKING:
    from parcalc.core.activations import LayerActivations
    from parcalc.core.layout import Layout
    from parcalc.core.model_states import StateBytes
    from parcalc.core.training_setup import TrainingSetup

ZERO_OFFLOAD = "Ren et al. 2021, 'ZeRO-Offload' (USENIX ATC), sec. 4.1: fp16 gradients to the CPU, fp16 parameters back, 2M each way"
DS_ESTIMATE = ("DeepSpeed deepspeed/runtime/zero/stage_1_and_2.py, estimate_zero2_model_states_mem_needs (cpu_offload: "
               "gpu_mem = 2 * total_params, cpu_mem = total_params * max(4 * total_gpus, 16) * 1.5)")  # fmt: skip
ACT_OFFLOAD = ("Megatron-LM --cpu-offloading / Transformer Engine transformer_engine/pytorch/cpu_offload.py; "
               "torch.autograd.graph.save_on_cpu: saved tensors to the host in forward, back before backward")  # fmt: skip
FP32_GRAD = 4.0  # CPU-Adam updates from an fp32 gradient partition on the host


def optimizer_shard(params: float, par: Layout) -> tuple[float, int]:
    """(parameters whose optimizer this GPU updates, ranks they are sharded over): Psi / N_d from ZeRO-1 on,
    N_d = dp x cp as for the states kept on the GPU (parcalc.core.model_states.model_states: Megatron-LM's
    distributed optimizer shards over the dp-cp group), or the shard group S with hybrid sharding."""
    ranks = par.dp * par.cp if par.shard_group is None else par.shard_group
    shards = ranks if par.zero >= 1 else 1
    return params / shards, shards


def offloaded_activations(layer: LayerActivations, layers: Derivation, in_flight: Derivation) -> Derivation:
    """The layers' activations left on the GPU with activation offload: two layers of one micro-batch."""
    n_layers = int(layers.value)
    kept = min(2, n_layers)
    inputs = (layer.per_layer.as_term("A_layer"), Term("L_gpu", "L_gpu", r"L_{\mathrm{GPU}}", kept, "", "layers of one micro-batch on the GPU at once "
              "(computed + in transit)", "double buffering: parcalc's assumption"))  # fmt: skip
    return Derivation("stage_activations", "Activations of the layers on the GPU (the rest offloaded to the host)", "A_stage",
                      r"A_{\mathrm{stage}}", "$A_layer × $L_gpu", r"$A_layer \times $L_gpu", inputs, layer.per_layer.value * kept, "B",
                      ACT_OFFLOAD, (f"the other {int(layers.value * in_flight.value) - kept:,} layer-micro-batches' activations are on the host",))  # fmt: skip


def host_memory(params: float, per: StateBytes, par: Layout, layer: LayerActivations, layers: Derivation, in_flight: Derivation,
                setup: TrainingSetup) -> Derivation:  # fmt: skip
    """Host memory this GPU's offload takes: master weights, states and fp32 gradients of its
    optimizer shard, and / or its stage's saved activations."""
    terms: list[Term] = []
    parts: list[str] = []
    value = 0.0
    if setup.offload_optimizer:
        shard, shards = optimizer_shard(params, par)
        terms += [Term("psi_z", "Ψ_z", r"\Psi_z", shard, "", f"parameters of this GPU's optimizer shard (Ψ / {shards})"),
                  Term("K", "K", "K", per.optimizer, "B", "master copy and optimizer states per parameter", per.state_source),
                  Term("g_32", "g_32", r"g_{32}", FP32_GRAD, "B", "fp32 gradient per parameter (CPU-Adam's input)", ZERO_OFFLOAD)]  # fmt: skip
        parts.append("($K + $g_32) × $psi_z")
        value += (per.optimizer + FP32_GRAD) * shard
    if setup.offload_activations:
        terms += [layer.per_layer.as_term("A_layer"), layers.as_term("L_stage"), in_flight.as_term("n")]
        parts.append("$A_layer × $L_stage × $n")
        value += layer.per_layer.value * layers.value * in_flight.value
    formula = " + ".join(parts)
    return Derivation("host_memory", "Host memory for this GPU (offloaded)", "M_host", r"M_{\mathrm{host}}", formula,
                      formula.replace("×", r"\times"), tuple(terms), value, "B", f"{ZERO_OFFLOAD}; {DS_ESTIMATE}; {ACT_OFFLOAD}",
                      ("host memory per GPU; a node's host holds its GPUs' sum (DeepSpeed adds a 1.5 buffer factor, not counted)",))  # fmt: skip


def pcie_traffic(params: float, per: StateBytes, par: Layout, activation_layer: float, layers: int, micro_batches: int,
                 offload_optimizer: bool, offload_activations: bool) -> tuple[Derivation, Derivation]:  # fmt: skip
    """Bytes one GPU moves over PCIe per iteration: (to the host, to the GPU)."""
    shard, shards = optimizer_shard(params, par)
    down: list[Term] = []
    up: list[Term] = []
    f_down: list[str] = []
    f_up: list[str] = []
    v_down = v_up = 0.0
    if offload_optimizer:
        psi = Term("psi_z", "Ψ_z", r"\Psi_z", shard, "", f"parameters of this GPU's optimizer shard (Ψ / {shards})")
        down += [psi, Term("g", "g", "g", per.weight, "B", "bytes per 16-bit gradient sent", ZERO_OFFLOAD)]
        up += [psi, Term("w", "w", "w", per.weight, "B", "bytes per updated 16-bit weight returned", ZERO_OFFLOAD)]
        f_down.append("$g × $psi_z")
        f_up.append("$w × $psi_z")
        v_down += per.weight * shard
        v_up += per.weight * shard
    if offload_activations:
        act = [Term("A_layer", "A_layer", r"A_{\mathrm{layer}}", activation_layer, "B", "one layer's saved activations, one micro-batch"),
               Term("L_s", "L_stage", r"L_{\mathrm{stage}}", layers, "", "layers on this stage"),
               Term("m", "m", "m", micro_batches, "", "micro-batches per iteration")]  # fmt: skip
        down += act
        up += act
        f_down.append("$A_layer × $L_s × $m")
        f_up.append("$A_layer × $L_s × $m")
        v_down += activation_layer * layers * micro_batches
        v_up += activation_layer * layers * micro_batches

    def d(key: str, label: str, terms: list[Term], parts: list[str], value: float) -> Derivation:
        formula = " + ".join(parts) or "0"
        return Derivation(key, label, key, rf"Q_{{\mathrm{{{key[-4:]}}}}}", formula, formula.replace("×", r"\times"),
                          tuple(dict.fromkeys(terms)), value, "B", f"{ZERO_OFFLOAD}; {ACT_OFFLOAD}")  # fmt: skip

    return (d("pcie_to_host", "PCIe bytes to the host per iteration (gradients, activations)", down, f_down, v_down),
            d("pcie_to_gpu", "PCIe bytes to the GPU per iteration (updated weights, activations)", up, f_up, v_up))
