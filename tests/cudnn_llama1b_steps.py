"""Whole training steps of Llama 3.2 1B measured on one B200 and one H200 by NVIDIA's cuDNN team: the one B200 training
step found published with its clock (held-out, reported only: tests/test_cudnn_llama1b_steps.py).

Plain data, no parcalc import and no assertions. Source and how it was read: NVIDIA/cudnn-frontend
benchmark/Llama-3.2-1B-Training, read with git at commit 7606332572705e2e89e025ac7546a8bbffbf5cab (2025-05-22; unchanged at
0b1577c): training_perf.py (Hugging Face `LlamaForCausalLM(config)` of meta-llama/Llama-3.2-1B, random weights,
`torch.set_default_dtype(torch.bfloat16)` so weights, activations and gradients are bf16 (no fp32 master weights, no
autocast), `torch.optim.SGD` without momentum, `inputs_embeds` fed directly (no embedding lookup), CrossEntropyLoss over the
128,256-token vocabulary, eager PyTorch; 5 warm-up iterations, then the wall time of 100 iterations between two
`torch.cuda.synchronize()` over 100), artifacts/b200_training_timing.csv and h200_training_timing.csv (column `time`, seconds
per iteration, rows `CUDNN_ATTENTION` and `FLASH_ATTENTION`), README.md: 'PyTorch 2.7.0', 'cuDNN 9.9.0', 'transformers
4.35.0', NGC container 25.04; 'The benchmark is conducted after the clock is locked at 1665 MHz, namely, the base clock of
B200' ('GPU: NVIDIA B200', one GPU of an HGX B200 node: artifacts/b200_run_plot.b200.txt, 'Max Power Limit : 1000.00 W');
'Below is another run performed on an H200 GPU, with the clock frequency locked at 1500 MHz to match the H200's base clock'.

What the rows test: both GPUs ran the same script, so what the software stack adds or leaves out (transformers 4.35's
Llama code against the 5.x code parcalc's `hf` kernel set follows, pure bf16 against autocast) is common to both, and the
ratio of the two GPUs' steps is a check of parcalc's B200 parts against its H200 parts (the H200's measured on the shared
H200, ../shared/measurements/h200-2026-11-28, and timed here at the locked 1500 MHz).
"""

from __future__ import annotations

from typing import NamedTuple

SOURCE = ("NVIDIA/cudnn-frontend benchmark/Llama-3.2-1B-Training/artifacts/{gpu}_training_timing.csv @7606332 (2025-05-22), "
          "https://github.com/NVIDIA/cudnn-frontend/tree/7606332572705e2e89e025ac7546a8bbffbf5cab/benchmark/Llama-3.2-1B-Training")  # fmt: skip
LOCKED_CLOCK = {"b200": 1665e6, "h200": 1500e6}  # Hz, README.md (above)


class LockedClockStep(NamedTuple):
    """One measured step: batch and sequence, seconds per iteration with cuDNN's and with FlashAttention's SDPA backend."""

    gpu: str  # parcalc GPU preset
    batch: int
    seq_len: int
    cudnn_s: float
    flash_s: float
    quote: str  # the csv's CUDNN_ATTENTION row as printed


STEPS: tuple[LockedClockStep, ...] = (
    LockedClockStep("b200", 24, 768, 0.1999587368965149, 0.2080540633201599, "CUDNN_ATTENTION,24,768,0.1999587368965149,BS=24 SL=768"),
    LockedClockStep("b200", 12, 1024, 0.13925427675247193, 0.14496242761611938, "CUDNN_ATTENTION,12,1024,0.13925427675247193,BS=12 SL=1024"),
    LockedClockStep("b200", 6, 2048, 0.1443575620651245, 0.1538383936882019, "CUDNN_ATTENTION,6,2048,0.1443575620651245,BS=6 SL=2048"),
    LockedClockStep("b200", 3, 4096, 0.15531346797943116, 0.17227792978286743, "CUDNN_ATTENTION,3,4096,0.15531346797943116,BS=3 SL=4096"),
    LockedClockStep("b200", 2, 8192, 0.2312054991722107, 0.2755130219459534, "CUDNN_ATTENTION,2,8192,0.2312054991722107,BS=2 SL=8192"),
    LockedClockStep("b200", 1, 16384, 0.2849757242202759, 0.374487898349762, "CUDNN_ATTENTION,1,16384,0.2849757242202759,BS=1 SL=16384"),
    LockedClockStep("h200", 24, 768, 0.32912482261657716, 0.33675609350204466, "CUDNN_ATTENTION,24,768,0.32912482261657716,BS=24 SL=768"),
    LockedClockStep("h200", 12, 1024, 0.222159903049469, 0.22822560071945192, "CUDNN_ATTENTION,12,1024,0.222159903049469,BS=12 SL=1024"),
    LockedClockStep("h200", 6, 2048, 0.22936189889907838, 0.23996224880218506, "CUDNN_ATTENTION,6,2048,0.22936189889907838,BS=6 SL=2048"),
    LockedClockStep("h200", 3, 4096, 0.24294065952301025, 0.2598997974395752, "CUDNN_ATTENTION,3,4096,0.24294065952301025,BS=3 SL=4096"),
    LockedClockStep("h200", 2, 8192, 0.35719603300094604, 0.39713253974914553, "CUDNN_ATTENTION,2,8192,0.35719603300094604,BS=2 SL=8192"),
    LockedClockStep("h200", 1, 16384, 0.4235471987724304, 0.5001843190193176, "CUDNN_ATTENTION,1,16384,0.4235471987724304,BS=1 SL=16384"),
)  # fmt: skip
