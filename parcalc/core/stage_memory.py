"""One GPU of one pipeline stage: every component of its memory as a derivation, and their sum (parcalc.core.memory builds
it; parcalc.core.memory_step_peak puts the step's peak in place of the textbook sum)."""

from __future__ import annotations

from dataclasses import dataclass

from parcalc.core.model_states import ModelStates
from parcalc.derivation import Derivation


@dataclass(frozen=True)
class StageMemory:
    """One GPU of one pipeline stage: every component as a derivation, and their sum."""

    stage: int
    parameters: Derivation
    states: ModelStates
    gathered: Derivation | None
    layers: Derivation
    in_flight: Derivation
    activations: Derivation
    embedding: Derivation | None
    output: Derivation | None
    recompute: Derivation | None
    reserve: Derivation
    states_total: Derivation
    activations_total: Derivation
    total: Derivation
    fp8_weights: Derivation | None = None  # Transformer Engine's cached FP8 weights and transposes
    host: Derivation | None = None  # what --offload keeps in host memory for this GPU
    offloaded: tuple[str, ...] = ()  # keys of the model states held on the host instead ("optimizer_states", "gradients")
    context: Derivation | None = None  # context-parallel buffers during one layer's attention (parcalc.core.context)
    dispatch: Derivation | None = None  # MoE token-exchange buffers during one MoE layer (parcalc.core.expert_parallel)
    mtp: Derivation | None = None  # the multi-token-prediction modules' activations (last stage)
    # With a step-memory walk (TrainingSetup.step_memory): its peak, what the allocator reserves then, the
    # textbook sum it replaces, and the peak's parts (parcalc.core.memory_timeline)
    peak: Derivation | None = None
    peak_reserved: Derivation | None = None
    # the FSDP2 walks: what the allocator reserves over a run, replayed per stream (parcalc.core.memory_fsdp.fsdp_replayed), or
    # the floor of that replay (TrainingSetup.allocator_replayed); in the total where present, peak_reserved beside it
    peak_replayed: Derivation | None = None
    textbook: Derivation | None = None
    peak_parts: tuple[tuple[str, float], ...] = ()
    peak_live: tuple[tuple[str, str, float], ...] = ()  # (what, kind, bytes) live at the peak, largest first

    def memory_derivations(self) -> tuple[Derivation, ...]:
        """The derivations that make up the total: the states, activations and reserve, or the step's peak."""
        if self.peak is not None and self.peak_reserved is not None:
            return (self.peak, self.peak_reserved, *((self.peak_replayed,) if self.peak_replayed is not None else ()), self.reserve)
        return (self.states_total, self.activations_total, self.reserve)

    def components(self) -> tuple[tuple[str, float], ...]:
        if self.peak is not None and self.peak_reserved is not None:
            held = self.peak_replayed if self.peak_replayed is not None else self.peak_reserved  # what the total takes
            return (*self.peak_parts, ("allocator: reserved beyond the live blocks", held.value - self.peak.value),
                    ("reserve", self.reserve.value))  # fmt: skip
        on_gpu = {key: 0.0 if key in self.offloaded else d.value
                  for key, d in (("gradients", self.states.gradients), ("optimizer_states", self.states.optimizer))}  # fmt: skip
        parts = [
            ("weights", self.states.weights.value),
            (f"{'NVFP4' if self.fp8_weights and self.fp8_weights.label.startswith('NVFP4') else 'FP8'} weight copies",
             self.fp8_weights.value if self.fp8_weights else 0.0),
            ("gradients", on_gpu["gradients"]),
            ("optimizer states", on_gpu["optimizer_states"]),
            ("ZeRO-3 gathered buffers", self.gathered.value if self.gathered else 0.0),
            ("activations (layers)", self.activations.value),
            ("activations (embeddings)", self.embedding.value if self.embedding else 0.0),
            ("logits / cross-entropy", self.output.value if self.output else 0.0),
            ("multi-token prediction", self.mtp.value if self.mtp else 0.0),
            ("recomputation working set", self.recompute.value if self.recompute else 0.0),
            ("context-parallel buffers", self.context.value if self.context else 0.0),
            ("MoE exchange buffers", self.dispatch.value if self.dispatch else 0.0),
            ("reserve", self.reserve.value),
        ]
        return tuple(parts)
