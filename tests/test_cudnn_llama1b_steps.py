"""parcalc's fit on the B200 and H200 Llama 3.2 1B steps of NVIDIA's cuDNN benchmark (tests/cudnn_llama1b_steps.py):
held-out, reported only (`python tests/test_cudnn_llama1b_steps.py` prints the table).

Each step is entered as the script ran it (`--framework hf`, one GPU, `--precision bf16` (pure bf16: default dtype
bfloat16, no autocast), `--optimizer sgd`, the batch as one micro-batch, no recomputation, cuDNN's SDPA). The H200 is timed at
the clock the run locked (1500 MHz, the Cluster's sm_clock: its GEMMs by tiles at that clock, parcalc.core.timing.gemm_tiles);
the B200 preset has no clock model (its GEMM and attention shares are isolated measurements whose clock was not recorded:
presets/gpus/b200.yaml), so it is timed at the preset as it stands while the run held 1665 MHz, the base clock.

The column to read is `B200 / H200`: the same script on both GPUs, so what the 2025 software stack does differently from
parcalc's `hf` kernel set cancels in the ratio, and `pred / meas` of that ratio above 1 says parcalc's B200 parts run
faster against its H200 parts than the two GPUs did. No constant is set from these rows.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))  # this checkout's parcalc, run as a script from anywhere

from cudnn_llama1b_steps import LOCKED_CLOCK, STEPS, LockedClockStep

from parcalc.core.choices import Optimizer, Precision, Recompute
from parcalc.core.fit import estimate
from parcalc.results.fit_request import request


def predicted(step: LockedClockStep) -> dict[str, float]:
    """fit's step (seconds) and its parts by kind of work for one measured step."""
    req = request(model="llama3.2-1b", gpus="1", gpu=[step.gpu], batch=str(step.batch), micro_batch=[str(step.batch)],
                  seq_len=str(step.seq_len), framework="hf", tp="1", pp="1", dp="1", precision=Precision.BF16,
                  optimizer=Optimizer.SGD, recompute=[Recompute.NONE])  # fmt: skip
    cluster = req.cluster
    if cluster.spec.tiled is not None:  # a GPU whose GEMMs are timed at a clock: the run's locked one
        cluster = replace(cluster, sm_clock=LOCKED_CLOCK[step.gpu])
    assert req.config is not None
    est = estimate(req.model, req.config, req.training, cluster)
    return {"t_step": est.step.value} | {d.key: d.value for d in est.kinds}


def table() -> str:
    by_shape: dict[tuple[int, int], dict[str, tuple[LockedClockStep, dict[str, float]]]] = {}
    for step in STEPS:
        by_shape.setdefault((step.batch, step.seq_len), {})[step.gpu] = (step, predicted(step))
    lines = [f"{'b x s':<10} {'B200 pred/meas':>14} {'H200 pred/meas':>14} {'B200/H200 meas':>14} {'pred':>6} {'pred/meas':>9}"
             f"  B200 parts (ms): gemm / attention / memory-bound"]  # fmt: skip
    for (b, s), pair in by_shape.items():
        (b200, pb), (h200, ph) = pair["b200"], pair["h200"]
        measured, modelled = h200.cudnn_s / b200.cudnn_s, ph["t_step"] / pb["t_step"]
        lines.append(f"{f'{b} x {s}':<10} {pb['t_step'] / b200.cudnn_s:14.3f} {ph['t_step'] / h200.cudnn_s:14.3f} {measured:14.3f} "
                     f"{modelled:6.3f} {modelled / measured:9.3f}  {pb['t_gemm'] * 1e3:.1f} / {pb['t_attention'] * 1e3:.1f} / "
                     f"{pb['t_memory_bound'] * 1e3:.1f}")  # fmt: skip
    return "\n".join(lines)


def test_every_step_is_timed_and_the_table_is_reported() -> None:
    text = table()
    print("\n" + text)
    assert len(text.splitlines()) == 1 + len(STEPS) // 2


def test_each_step_is_what_its_source_printed() -> None:
    """Both GPUs at the same six shapes, each row's quoted csv line carrying its time; cuDNN's backend the faster one in every
    row (README: 'cuDNN attention is the fastest SDPA backend ... in the six setups we tested')."""
    shapes = {gpu: [(s.batch, s.seq_len) for s in STEPS if s.gpu == gpu] for gpu in LOCKED_CLOCK}
    assert shapes["b200"] == shapes["h200"] and len(shapes["b200"]) == 6
    for step in STEPS:
        assert step.quote == f"CUDNN_ATTENTION,{step.batch},{step.seq_len},{step.cudnn_s!r},BS={step.batch} SL={step.seq_len}"
        assert step.cudnn_s < step.flash_s


if __name__ == "__main__":
    print(table())
