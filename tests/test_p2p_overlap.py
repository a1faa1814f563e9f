"""Megatron-Core's overlap_p2p_comm: the interleaved schedule's steady-state pipeline sends hidden behind the next chunk.

Source: NVIDIA/Megatron-LM @d98e8a64 megatron/training/arguments.py ('--no-overlap-p2p-communication', store_false: on by
default since 4eeff55d1f, 2023-10-12; forced off without interleaving) and megatron/core/pipeline_parallel/schedules.py
(forward_backward_pipelining_with_interleaving: asynchronous sends in the 1F1B phase, blocking ones in the warm-up and
cool-down unless overlap_p2p_comm_warmup_flush; num_warmup_microbatches = (pp - rank - 1) x 2 + (v - 1) x pp, capped at
m v). presets/frameworks/megatron.yaml states it (p2poverlap); the other profiles keep every send on the critical path.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from parcalc.core.choices import Precision, Recompute, Schedule
from parcalc.core.fit import Cluster, Config, Training, estimate
from parcalc.core.fit_search import SearchSpace, search
from parcalc.core.timing.step import blocking_sends
from parcalc.presets import load_framework, load_gpu, load_link, load_model


def test_blocking_sends_are_rank_0s_warm_up_as_megatron_counts_it() -> None:
    # p 8, v 5 (Megatron-Bridge's Llama 3 70B H100 recipe): (8 - 0 - 1) x 2 + (5 - 1) x 8 = 46 of 64 x 5 = 320 chunks
    assert blocking_sends(64, 5, 8, True) == 46
    # fewer chunks than the warm-up: all of them in the warm-up, every send blocking (are_all_microbatches_in_warmup)
    assert blocking_sends(4, 5, 8, True) == 20
    # 1F1B (v = 1): Megatron sets overlap_p2p_comm False without interleaving
    assert blocking_sends(64, 1, 8, True) == 64
    assert blocking_sends(64, 5, 8, False) == 320
    assert np.array_equal(blocking_sends(np.array([4.0, 64.0]), np.array([5, 5]), 8, True), [20.0, 46.0])


def _h100(framework: object, gpus: int) -> Cluster:
    gpu = load_gpu("h100-sxm5", ())
    assert gpu.node is not None
    peak = gpu.dtypes["bf16"].dense_peak
    assert peak is not None
    return Cluster(gpus=gpus, gpus_per_node=8, peak=peak.value, capacity=gpu.memory_capacity.value, intra=load_link("nvlink4", ()),
                   inter=load_link("ib-ndr", ()), gpu=gpu, framework=framework)  # type: ignore[arg-type]  # fmt: skip


def test_fit_hides_the_steady_state_sends_under_megatron_only() -> None:
    """Llama 3 70B, TP 4 x PP 8 x DP 2, v 5, 64 micro-batches of 1 x 8192: t_pp = 2 W T_p2p under Megatron's profile
    (each send, ~0.7 ms over InfiniBand, shorter than a chunk's forward), 2 m v T_p2p with the overlap off."""
    model = load_model("llama3-70b", ())
    megatron = load_framework("megatron", ())
    assert megatron.overlap_p2p_comm
    config = Config.of(4, 8, 2, 1, Recompute.NONE, 1, True, Schedule.INTERLEAVED, 5)
    training = Training(128, 8192, Precision.MIXED_BF16, flash_attention=True)
    overlapped = estimate(model, config, training, _h100(megatron, 64))
    blocking = estimate(model, config, training, _h100(replace(megatron, overlap_p2p_comm=False), 64))
    t_p2p = next(term.value for term in blocking.pp_comm.inputs if term.symbol == "T_p2p")
    assert blocking.pp_comm.value == pytest.approx(2 * 64 * 5 * t_p2p)
    assert overlapped.pp_comm.value == pytest.approx(2 * 46 * t_p2p)
    assert overlapped.step.value == pytest.approx(blocking.step.value - 2 * (320 - 46) * t_p2p)
    # 1F1B: nothing changes
    one_f_one_b = Config.of(4, 8, 2, 1, Recompute.NONE, 1, True, Schedule.ONE_F_ONE_B, 1)
    assert estimate(model, one_f_one_b, training, _h100(megatron, 64)).pp_comm.value == pytest.approx(
        estimate(model, one_f_one_b, training, _h100(replace(megatron, overlap_p2p_comm=False), 64)).pp_comm.value)


def test_the_search_times_the_sends_as_fit_does() -> None:
    model = load_model("llama3-8b", ())
    training = Training(64, 4096, Precision.MIXED_BF16, flash_attention=True)
    cluster = _h100(load_framework("megatron", ()), 32)
    found = search(model, training, cluster, SearchSpace(recomputes=(Recompute.NONE,), zero_stages=(1,)))
    columns = found.evaluated.columns
    interleaved = [i for i in np.flatnonzero(columns["fits"]) if found.evaluated.config(int(i)).layout.chunks > 1]
    assert len(interleaved) >= 3
    for i in interleaved:
        scalar = estimate(model, found.evaluated.config(int(i)), training, cluster)
        assert columns["t_pp"][i] == pytest.approx(scalar.pp_comm.value, rel=1e-9)
        assert columns["t_step"][i] == pytest.approx(scalar.step.value, rel=1e-9)
