"""SMs held by overlapped NCCL collectives (parcalc.core.timing.sm_contention): the compute beside a hidden collective
runs on S - c SMs for its duration, t_dp = exposed + H x lambda, lambda = 1 - t / t_stretched of a layer's kernels.

c is NCCL's channel count on an 8 x H100 / H200 NVSwitch node, 24 ('24 coll channels' in NCCL's init line; the H200
preset's `nccl_channels` names the log and NVIDIA/nccl issues #1429 and #892); S = 132 SMs (measured on the shared
H200, ../shared/measurements/h200-2026-11-28/README.md). The one measurement of the piece: a GEMM beside an all-gather
on an H100 (NVIDIA developer forum, 'Compute-Communication Overlap Causes Severe GEMM Performance Degradation because of
Tail Effect'): 24 NCCL blocks, the 132-block GEMM from ~80 % MFU alone to ~47 % beside it. The term applies only on GPUs
whose preset gives the channels (the H200, whose GEMMs are measured alone on the GPU; the fitted shares of the others
carry it), and the search and `fit` agree on it.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

import numpy as np
import pytest

from parcalc.core.choices import Optimizer, Precision, Recompute
from parcalc.core.fit import Cluster, Config, Training, estimate
from parcalc.core.fit_search import search
from parcalc.core.timing.kernels import gemm
from parcalc.core.timing.sm_contention import linear_stretch, loss_share, persistent_stretch
from parcalc.presets import load_framework, load_gpu, load_link, load_model

H200 = load_gpu("h200", ())
H100 = load_gpu("h100-sxm5", ())
NVLINK, IB = load_link("nvlink4", ()), load_link("ib-ndr", ())
LLAMA_8B = load_model("llama3-8b", ())
TRAINING = Training(64, 4096, Precision.MIXED_BF16, Optimizer.ADAM, flash_attention=True)
CLOCK = 1.5e9  # a fixed SM clock, so that `fit` and the search time the same step (parcalc.core.timing.step_clock)


def cluster(gpu: object, gpus: int = 16, **changes: object) -> Cluster:
    base = dict(gpus=gpus, gpus_per_node=8, peak=989.5e12, capacity=gpu.memory_capacity.value, intra=NVLINK, inter=IB,  # type: ignore[attr-defined]
                gpu=gpu, framework=load_framework("fsdp2"), sm_clock=CLOCK)  # fmt: skip
    return Cluster(**{**base, **changes})  # type: ignore[arg-type]


def fsdp(dp: int = 16, micro_batch: int = 1) -> Config:
    return Config.of(tp=1, pp=1, dp=dp, micro_batch=micro_batch, recompute=Recompute.FULL, zero=3)


def test_the_forum_gemm_beside_an_all_gather() -> None:
    """[2560 x 5120] . [5120 x 27648] (the forum's FSDP-like GEMM, bf16) on the GH100 die's tiles: 132 persistent CTAs, 24
    held by the ncclAllGather, so 24 CTAs run as a second round: 2x the time; measured 80 / 47 = 1.70x (within 18 %)."""
    spec = replace(cluster(H200).spec, tiled=H200.kernels.tiled("bf16"))  # type: ignore[union-attr]
    assert spec.nccl_ctas == 24 and spec.sms == 132
    kernel = gemm("forum", 2560, 5120, 27648, 2.0, spec)
    measured = 0.80 / 0.47
    assert kernel.stretch == 2.0
    assert kernel.stretch / measured == pytest.approx(1.0, abs=0.18)
    # a GEMM of at most S - c = 108 CTAs fits beside the collective; the CTAs of a split-K GEMM count
    assert persistent_stretch(108, 132, 24) == 1.0 and persistent_stretch(109, 132, 24) == 2.0
    assert persistent_stretch(5000, 132, 24) == 2.0  # persistent: one CTA per SM at most
    assert linear_stretch(132, 24) == pytest.approx(132 / 108)
    assert gemm("small", 256, 4096, 1024, 2.0, spec).stretch == 1.0  # 2 x 8 tiles of 128 x 128, or their split-K CTAs


def test_the_channels_come_from_the_preset() -> None:
    assert H200.nccl_channels is not None and H200.nccl_channels.value == 24
    assert "coll channels" in H200.nccl_channels.source
    assert cluster(H200).spec.nccl_ctas == 24
    assert cluster(H100).spec.nccl_ctas == 0  # its fitted GEMM share (mpt_7b_h100) was calibrated with the contention in it
    assert gemm("h100", 2560, 5120, 27648, 2.0, cluster(H100).spec).stretch == 1.0


def test_t_dp_adds_the_hidden_collectives_times_the_loss() -> None:
    est = estimate(LLAMA_8B, fsdp(), TRAINING, cluster(H200))
    terms = {t.key: t.value for t in est.dp_comm.inputs}
    hidden, loss = terms["H"], terms["lambda"]
    assert hidden > 0
    # Llama 3 8B at b 1, s 4096 on 16 H200: every linear fills the GPU (2x beside a collective), attention 132/108 x,
    # the memory-bound kernels not slowed: lambda = 1 - t / t_stretched of the layer, between attention's 24/132 and 1/2
    assert 24 / 132 < loss < 0.5
    assert loss_share([]) == 0.0
    assert "$H × $lambda" in est.dp_comm.formula
    # the same configuration with the channels removed: only the exposed part, the hidden time unchanged
    bare = estimate(LLAMA_8B, fsdp(), TRAINING, cluster(replace(H200, nccl_channels=None)))
    assert est.dp_comm.value == pytest.approx(bare.dp_comm.value + hidden * loss, rel=1e-12)
    assert est.step.value == pytest.approx(bare.step.value + hidden * loss, rel=1e-12)
    assert all(t.key != "H" for t in bare.dp_comm.inputs)
    assert est.compute.value == pytest.approx(bare.compute.value, rel=1e-12)


def test_nothing_hidden_nothing_slowed() -> None:
    # without overlap every collective is exposed: the compute runs alone, no contention
    est = estimate(LLAMA_8B, fsdp(), TRAINING, cluster(H200, dp_overlap=False))
    assert all(t.key != "H" for t in est.dp_comm.inputs)
    # one GPU: no collective at all
    single = estimate(LLAMA_8B, Config.of(tp=1, pp=1, dp=1, micro_batch=1, recompute=Recompute.FULL), Training(8, 4096, flash_attention=True),
                      cluster(H200, gpus=1))  # fmt: skip
    assert single.dp_comm.value == 0.0


def test_the_search_times_the_contention_as_fit_does() -> None:
    c = cluster(H200)
    found = search(LLAMA_8B, TRAINING, c)
    evaluated = found.evaluated
    fitting = np.flatnonzero(evaluated.columns["fits"]).tolist()
    assert len(fitting) > 20
    zero3 = [i for i in fitting if evaluated.config(i).layout.zero == 3 and evaluated.config(i).layout.dp > 1]
    assert zero3
    for i in random.Random(32).sample(zero3, min(15, len(zero3))):
        scalar = estimate(LLAMA_8B, evaluated.config(i), TRAINING, c)
        assert any(t.key == "H" for t in scalar.dp_comm.inputs) or scalar.dp_comm.value == 0.0
        for key, value in (("t_dp", scalar.dp_comm.value), ("t_step", scalar.step.value)):
            assert evaluated.columns[key][i] == pytest.approx(value, rel=1e-9, abs=1e-15), (evaluated.config(i).label(), key)
    assert not any(math.isnan(evaluated.columns["t_step"][i]) for i in fitting)
