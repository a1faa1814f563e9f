"""How much longer the host takes to issue Hugging Face Llama's step under torch.profiler: the ratio of the
profiled to the unprofiled host time of each phase (forward, backward, optimizer step), with real PyTorch on the CPU.

Why: `calibrate trace` and the hf profile's `host:` read the host's time per kernel launch from a profiled trace
(../shared/measurements/h200-2026-11-28/trace-llama1b-b4-s4096.json.gz, h200_traces.py: record_shapes=True). The
profiler records every ATen op (RecordFunction callbacks, the inputs' shapes) and so slows the host that issues
them; the unprofiled step a user runs does not pay that. The profiler's cost is per recorded op, and so is the host's
own work (the Python model code, the dispatcher), so on one machine their ratio is the machine's and this script can
measure it where no GPU is: the same transformers LlamaForCausalLM code (16 layers, autocast bf16, SDPA, fused AdamW,
as h200_truth.py builds it), at a tiny width so that the CPU's kernels are short beside the host's work.

What it leaves out, and which way: on a GPU the profiler also records each CUDA runtime call through CUPTI, a cost
this CPU-only measurement does not see; the ratio here is a lower bound of the GPU run's, so the unprofiled host time
it gives (traced / ratio) is an upper bound.

    python benchmarks/host_profiler_overhead.py [rounds]

Rounds take turns (one unprofiled step, one profiled step) so that a slow spell of a shared machine falls on both; each
phase's minimum over the rounds is kept (the least-disturbed run of each; other jobs only add time). Measured for
parcalc.core.timing.host.PROFILED_HOST_SLOWDOWN (2026-11-29, PyTorch 2.13 CPU, transformers 5.24, a shared 2-core AMD
EPYC): wall time, forward 11.95 -> 15.56 ms (1.30), backward 13.51 -> 20.83 ms (1.54), the minima of 105 rounds (three
runs of 25 and one of 30; single runs slowed by other jobs gave 0.94-1.38 forward, 1.31-1.68 backward); the thread's CPU
time, forward 13.85 -> 17.10 ms (1.23), backward 16.66 -> 25.95 ms (1.56), the minima of 90 rounds (three runs of 30).
"""

from __future__ import annotations

import sys
import time


def main(rounds: int = 15) -> dict[str, dict[str, float]]:
    import torch
    from torch.profiler import ProfilerActivity, profile
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    torch.set_num_threads(1)
    # h200_truth.py's Llama 3.2 1B layout (16 layers, GQA 4:1 here, tied embeddings) at a width where the CPU's kernels are short
    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=256, num_hidden_layers=16, num_attention_heads=4,
                         num_key_value_heads=1, max_position_embeddings=8192, rope_theta=500000.0, tie_word_embeddings=True,
                         use_cache=False)  # fmt: skip
    config._attn_implementation = "sdpa"
    model = LlamaForCausalLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    ids = torch.randint(0, 256, (1, 16))

    # wall time and the calling thread's CPU time together (on CPU tensors the autograd engine runs the backward on the
    # calling thread, and the profiler's callbacks run on it too): a round slowed by other jobs shows in both, a round
    # descheduled only in the wall time
    def step(times: dict[str, float]) -> None:
        marks = [(time.perf_counter(), time.thread_time())]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        marks.append((time.perf_counter(), time.thread_time()))
        loss.backward()
        marks.append((time.perf_counter(), time.thread_time()))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        marks.append((time.perf_counter(), time.thread_time()))
        for i, phase in enumerate(("forward", "backward", "optimizer")):
            for clock, key in ((0, phase), (1, phase + " (thread CPU time)")):
                value = marks[i + 1][clock] - marks[i][clock]
                times[key] = min(times.get(key, float("inf")), value)

    for _ in range(5):
        step({})
    plain: dict[str, float] = {}
    profiled: dict[str, float] = {}
    events = 0
    for _ in range(rounds):
        step(plain)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            step(profiled)
        events = len(prof.events())
    out = {phase: {"unprofiled_s": plain[phase], "profiled_s": profiled[phase], "ratio": profiled[phase] / plain[phase]} for phase in plain}
    out["step"] = {"events": float(events), "torch": float(torch.__version__.split(".")[1])}
    return out


if __name__ == "__main__":
    result = main(int(sys.argv[1]) if len(sys.argv) > 1 else 15)
    for phase, row in result.items():
        print(phase, {k: round(v, 6) for k, v in row.items()})
