"""The named choices of the core (enums), free of imports so that the command line can offer
them as its flags' choices without loading any of the math.

Each core module re-exports the ones it owns; the CLI uses these very classes, so a choice
added here appears in `--help` and the core at once."""

from __future__ import annotations

from enum import Enum


class Mlp(str, Enum):
    """The feed-forward block: plain (two matrices) or gated (three: gate, up, down)."""

    RELU = "relu"
    GELU = "gelu"
    SWIGLU = "swiglu"
    GEGLU = "geglu"

    @property
    def gated(self) -> bool:
        return self in (Mlp.SWIGLU, Mlp.GEGLU)


class Norm(str, Enum):
    LAYERNORM = "layernorm"
    RMSNORM = "rmsnorm"
    NONE = "none"

    @property
    def params_per_channel(self) -> int:
        return {Norm.LAYERNORM: 2, Norm.RMSNORM: 1, Norm.NONE: 0}[self]


class Position(str, Enum):
    LEARNED = "learned"
    ROPE = "rope"
    ALIBI = "alibi"
    NONE = "none"


class Recompute(str, Enum):
    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"
    OP = "op"  # PyTorch/TorchTitan op-level selective checkpointing (parcalc.core.recompute)


class Precision(str, Enum):
    FP32 = "fp32"
    MIXED_FP16 = "mixed-fp16"
    MIXED_BF16 = "mixed-bf16"
    BF16 = "bf16"
    FP8 = "fp8"  # Transformer Engine's recipe: FP8 GEMM inputs, bf16 weights and activations, fp32 master copy and states
    # Transformer Engine's NVFP4BlockScaling (Megatron-LM --fp4-format e2m1 --fp4-recipe nvfp4): FP4 (E2M1) GEMM inputs with
    # an E4M3 scale per 16 elements, Blackwell only; bf16 weights and activations, fp32 master copy and states as fp8's
    FP4 = "fp4"

    @property
    def quantised(self) -> bool:
        """Whether the linears' GEMM inputs are quantised by Transformer Engine (fp8, fp4): bf16 weights beside an fp32
        master copy, low-precision weight copies and saved inputs."""
        return self in (Precision.FP8, Precision.FP4)

    @property
    def activation_bytes(self) -> float:
        return 4.0 if self is Precision.FP32 else 2.0

    @property
    def gemm_input_bytes(self) -> float:
        """Bytes per element of the saved input of a linear layer: FP8 (1 byte) under Transformer
        Engine's recipe, which saves the casted FP8 tensor for the weight gradient; NVFP4 its column-wise FP4 copy
        (half a byte) and its E4M3 scale per 16 elements (NVFP4_SAVED_INPUT_BYTES); else the activations'."""
        if self is Precision.FP4:
            from parcalc.core.timing.fp8_quantise import NVFP4_SAVED_INPUT_BYTES

            return NVFP4_SAVED_INPUT_BYTES
        return 1.0 if self is Precision.FP8 else self.activation_bytes

    @property
    def gemm_dtype(self) -> str:
        """The peak the GEMMs run at: fp32 training does not compute at the bf16 peak."""
        return {Precision.FP32: "fp32", Precision.MIXED_FP16: "fp16", Precision.FP8: "fp8", Precision.FP4: "fp4"}.get(self, "bf16")


class Optimizer(str, Enum):
    ADAM = "adam"
    ADAMW = "adamw"
    SGD = "sgd"
    SGD_MOMENTUM = "sgd-momentum"
    ADAFACTOR = "adafactor"
    LION = "lion"
    ADAM_8BIT = "adam-8bit"
    MUON = "muon"

    @property
    def states(self) -> int:
        """Tensors of optimizer state per parameter tensor, each the parameter's size (the most any
        parameter keeps: Adafactor's factored statistics and Muon's AdamW share are counted from the
        model's shapes by parcalc.core.optimizers)."""
        return {Optimizer.ADAM: 2, Optimizer.ADAMW: 2, Optimizer.SGD: 0, Optimizer.SGD_MOMENTUM: 1, Optimizer.ADAFACTOR: 1,
                Optimizer.LION: 1, Optimizer.ADAM_8BIT: 2, Optimizer.MUON: 2}[self]  # fmt: skip


class Offload(str, Enum):
    """What moves to host memory: the optimizer (fp32 master weights, states and, from ZeRO-2, the
    gradient partition: ZeRO-Offload) or the saved activations (Megatron-LM / save_on_cpu)."""

    OPTIMIZER = "optimizer"
    ACTIVATIONS = "activations"


class ZeroStage(str, Enum):
    """ZeRO stage over the data-parallel ranks (Rajbhandari et al. 2020): what each rank shards."""

    ZERO0 = "0"
    ZERO1 = "1"
    ZERO2 = "2"
    ZERO3 = "3"


class Schedule(str, Enum):
    GPIPE = "gpipe"
    ONE_F_ONE_B = "1f1b"
    INTERLEAVED = "interleaved"
    ZB_H1 = "zb-h1"
    ZB_H2 = "zb-h2"
    DUALPIPEV = "dualpipev"
    ZB_V = "zb-v"
    DUALPIPE = "dualpipe"

    @property
    def label(self) -> str:
        return _SCHEDULE_LABELS[self]

    @property
    def splits_backward(self) -> bool:
        """Whether the backward runs as two passes, B (input gradient) and W (weight gradient)."""
        return self in (Schedule.ZB_H1, Schedule.ZB_H2, Schedule.DUALPIPEV, Schedule.ZB_V, Schedule.DUALPIPE)

    @property
    def v_shape(self) -> bool:
        """Whether each device holds two stages in a V (stage d and 2p - 1 - d): DualPipeV and ZB-V."""
        return self in (Schedule.DUALPIPEV, Schedule.ZB_V)

    @property
    def pairs_forward_backward(self) -> bool:
        """Whether the schedule runs one chunk's forward and another's backward as one overlapped unit: DualPipe(V)."""
        return self in (Schedule.DUALPIPEV, Schedule.DUALPIPE)


_SCHEDULE_LABELS = {
    Schedule.GPIPE: "GPipe",
    Schedule.ONE_F_ONE_B: "1F1B",
    Schedule.INTERLEAVED: "interleaved 1F1B",
    Schedule.ZB_H1: "ZB-H1",
    Schedule.ZB_H2: "ZB-H2",
    Schedule.DUALPIPEV: "DualPipeV",
    Schedule.ZB_V: "ZB-V",
    Schedule.DUALPIPE: "DualPipe",
}


class Collective(str, Enum):
    ALL_REDUCE = "all-reduce"
    REDUCE_SCATTER = "reduce-scatter"
    ALL_GATHER = "all-gather"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    ALL_TO_ALL = "all-to-all"
    POINT_TO_POINT = "point-to-point"


class Algorithm(str, Enum):
    PARAMETER_SERVER = "parameter-server"
    NAIVE = "naive"
    RING = "ring"
    TREE = "tree"
    DOUBLE_BINARY_TREE = "double-binary-tree"
    BUTTERFLY = "butterfly"
    HALVING_DOUBLING = "halving-doubling"
    PAIRWISE = "pairwise"
    DIRECT = "direct"


class Strategy(str, Enum):
    """`comm-volume --strategy`: one parallel strategy's iteration, or all of them compared."""

    DP = "dp"
    ZERO1 = "zero1"
    ZERO2 = "zero2"
    ZERO3 = "zero3"
    FSDP = "fsdp"
    TP = "tp"
    PP = "pp"
    THREE_D = "3d"
    ALL = "all"
    CP = "cp"  # context parallelism (parcalc.core.comm.context)
    EP = "ep"  # expert parallelism of an MoE model: the all-to-alls, expert TP and expert-DP (with the 3d degrees)
