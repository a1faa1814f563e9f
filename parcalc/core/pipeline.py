"""Pipeline-parallel schedules: closed-form bubbles, in-flight micro-batches, and a simulator.

Schedules: GPipe (Huang et al. 2019), 1F1B / PipeDream-Flush (Narayanan et al. 2021, sec. 2.2),
Megatron-LM's interleaved 1F1B (Narayanan et al. 2021, sec. 2.2.2), and the zero-bubble
schedules ZB-H1 / ZB-H2 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism").
"""

from __future__ import annotations

from enum import Enum

from parcalc.errors import InputError


class Schedule(str, Enum):
    GPIPE = "gpipe"
    ONE_F_ONE_B = "1f1b"
    INTERLEAVED = "interleaved"
    ZB_H1 = "zb-h1"
    ZB_H2 = "zb-h2"


def in_flight_micro_batches(schedule: Schedule, stages: int, micro_batches: int, stage: int = 0, chunks: int = 1) -> float:
    """Peak number of micro-batches whose activations a pipeline stage holds at once.

    Counted in units of one micro-batch's activations for all of the stage's layers, so that
    activation memory = this x per-micro-batch activations of the stage. `stage` is 0-based
    (stage 0 holds the most). Sources:
    - GPipe keeps every micro-batch until the backward pass starts: m.
    - 1F1B: stage s runs p - s warm-up forwards before its first backward (PipeDream-Flush,
      Narayanan et al. 2021 sec. 2.2): min(p - s, m). ZB-H1 keeps 1F1B's memory (Qi et al. 2024).
    - Interleaved with v chunks: Megatron-LM's warm-up of (p - s - 1) * 2 + (v - 1) * p chunk
      forwards plus the one in progress, each 1/v of the stage (megatron/core/pipeline_parallel/
      schedules.py, forward_backward_pipelining_with_interleaving); for s = 0 that is
      p (1 + (p - 1) / (p v)), Korthikanti et al. 2022 sec. 4.2.3.
    - ZB-H2 holds about twice 1F1B's: min(2p - 1 - 2s... ) bounded by m (Qi et al. 2024, Table 1
      gives 2p - 1 micro-batches of activations for the first stage).
    """
    if stages < 1 or micro_batches < 1 or chunks < 1:
        raise InputError("stages, micro-batches and chunks must each be at least 1")
    if not 0 <= stage < stages:
        raise InputError(f"stage must be between 0 and {stages - 1}, got {stage}")
    p, m, s, v = stages, micro_batches, stage, chunks
    if schedule is Schedule.GPIPE:
        return float(m)
    if schedule in (Schedule.ONE_F_ONE_B, Schedule.ZB_H1):
        return float(min(p - s, m))
    if schedule is Schedule.INTERLEAVED:
        if v == 1:
            return float(min(p - s, m))
        warm_up = (p - s - 1) * 2 + (v - 1) * p
        return min(warm_up + 1, m * v) / v
    return float(min(2 * (p - s) - 1, m))
