"""The host's time per kernel line of Inductor's generated wrapper, less the kernels: what `call(args)` itself costs (its
buffer allocations, tensor views, size and stride checks, `del`s, and the call lines' Python), measured with real PyTorch on
the CPU for the hf profile's compiled_host (parcalc.core.timing.host.CompiledHostCosts.wrapper).

Why: under --compile the model's kernels are issued from Inductor's generated Python wrapper, one line a kernel: a generated
(Triton) kernel's `.run(...)` or an extern kernel's call (`extern_kernels.mm(..., out=buf)`, an ATen fallback such as SDPA),
between lines that allocate its output (`empty_strided_cuda`, here `empty_strided_cpu`), view buffers (`reinterpret_tensor`),
check inputs (`assert_size_stride`) and free buffers. The kernels' own launch costs have other sources (the hf profile's
compiled_host source); this script measures the rest, which is the same Python and the same C++ helpers on a GPU but the
allocator (the CUDA caching allocator there, the CPU's here).

How: the same transformers LlamaForCausalLM as benchmarks/host_profiler_overhead.py (16 layers, GQA, tied embeddings, SDPA,
autocast bf16, fp32 weights) at a tiny width, compiled whole with its loss (torch.compile, default mode, the CPU's C++
backend: its kernels are `cpp_fused_*` calls, a launcher of their own, not measured here); its forward and backward wrappers
(torch._inductor.utils.run_and_get_code) imported and run on their own random inputs (the module's get_args) with every
C++ kernel and extern GEMM replaced by a Python no-op (~0.06 us a call) and the ATen fallbacks (SDPA forward and backward,
cumsum) answered from a cache of their outputs; the minimum over rounds, per kernel line.

    python benchmarks/compiled_wrapper_host.py [rounds]          # the wrapper's lines per kernel
    python benchmarks/compiled_wrapper_host.py [rounds] --call   # and the compiled call's fixed host work (not landed)

Measured for the hf profile (2026-11-30, PyTorch 2.13 CPU, transformers 5.24, a shared 2-core AMD EPYC under a load of
~7, the thread's CPU time, 15 rounds of 50 calls, three runs): forward 500-531 us over 261 kernel lines (1.92-2.03 us a
line), backward 564-572 us over 324 (1.74-1.76 us); both 1,072-1,095 us over 585 lines, 1.83-1.87 us a line (1.832 us the
least). Wall time under that load gave 5-6 us a line; at a lighter load earlier, 2.24 and 1.85 us. For scale, alone:
empty_strided 1.39 us, reinterpret_tensor 0.51 us, assert_size_stride 0.32 us.

--call: the compiled model called as the Trainer calls it (Dynamo's guards, AOTAutograd's runtime wrappers, autocast, the
output object) with the same no-op kernels in the wrappers it runs (torch._inductor.codecache.PyCodeCache's modules), less
the wrappers alone: the fixed host work of a compiled forward and of its backward (the autograd engine, the one
CompiledFunctionBackward node, 146 AccumulateGrad nodes). Measured (same machine, 15 rounds of 20 steps, the thread's CPU
time, two runs): forward 0.92-0.97 ms called against 0.50-0.53 ms of wrapper alone, ~0.4-0.45 ms fixed; forward + backward
+ zero_grad 2.51-2.73 ms, so backward + zero_grad 1.54-1.81 ms against 0.56 ms of wrapper. Not landed in parcalc
(docs/step-time.md, 'Compiled code's host').
"""

from __future__ import annotations

import importlib.util
import re
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

KERNEL_LINE = re.compile(r"^\s+(?:cpp_fused_\w+\(|(?:buf\d+ = )?extern_kernels\.\w+\(|buf\d+ = torch\.ops\.aten\.\w+\.\w+\()", re.M)


def best(fn: Any, calls: int, rounds: int) -> float:
    """The minimum over rounds of the mean time of `calls` calls, in the thread's CPU time (a round descheduled by other jobs
    on a shared machine does not count the time it waited; other jobs only add time, hence the minimum)."""
    times = []
    for _ in range(rounds):
        start = time.thread_time()
        for _ in range(calls):
            fn()
        times.append((time.thread_time() - start) / calls)
    return min(times)


def compiled_wrappers(folder: Path) -> list[Path]:
    """The forward and backward wrappers Inductor generates for the tiny Llama, written to `folder`."""
    import torch
    from torch._inductor.utils import run_and_get_code
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=256, num_hidden_layers=16, num_attention_heads=4,
                         num_key_value_heads=1, max_position_embeddings=8192, rope_theta=500000.0, tie_word_embeddings=True,
                         use_cache=False)  # fmt: skip
    config._attn_implementation = "sdpa"
    model = torch.compile(LlamaForCausalLM(config))
    ids = torch.randint(0, 256, (1, 16))

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()

    _, codes = run_and_get_code(step)
    paths = []
    for i, code in enumerate(codes):
        path = folder / f"wrapper{i}.py"
        path.write_text(code)
        paths.append(path)
    return paths


def answered_from_cache(name: str) -> None:
    """An ATen op (torch.ops.aten.<name>.default) that computes once per input shape and then returns its outputs."""
    import torch

    packet = getattr(torch.ops.aten, name)
    real, memo = packet.default, {}

    def cached(*args: Any, **kwargs: Any) -> Any:
        key = tuple(tuple(a.shape) if isinstance(a, torch.Tensor) else a for a in args)
        if key not in memo:
            memo[key] = real(*args, **kwargs)
        return memo[key]

    packet.default = cached  # the op overload the wrapper looks up on each call


def wrapper_time(path: Path, calls: int, rounds: int) -> tuple[float, int]:
    """(seconds of one call of the wrapper with its kernels as no-ops, its kernel lines)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    args = module.get_args()
    module.call(list(args))  # fills the ATen fallbacks' caches

    def nop(*_: Any, **__: Any) -> None:
        return None

    for name in list(vars(module)):
        if name.startswith("cpp_fused_"):
            setattr(module, name, nop)
    module.extern_kernels = types.SimpleNamespace(mm=nop, addmm=nop, bmm=nop, baddbmm=nop, convolution=nop)
    source = path.read_text()
    body = source[source.index("    def call(self, args):"):source.index("runner = Runner")]
    return best(lambda: module.call(list(args)), calls, rounds), len(KERNEL_LINE.findall(body))


def main(rounds: int = 7) -> dict[str, dict[str, float]]:
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as folder:
        paths = compiled_wrappers(Path(folder))
        for name in ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention_for_cpu_backward", "cumsum"):
            answered_from_cache(name)
        out = {}
        for phase, path in zip(("forward", "backward"), paths, strict=True):
            seconds, lines = wrapper_time(path, 50, rounds)
            out[phase] = {"seconds": seconds, "kernel_lines": float(lines), "per_line_s": seconds / lines}
    total = sum(r["seconds"] for r in out.values()), sum(r["kernel_lines"] for r in out.values())
    out["both"] = {"seconds": total[0], "kernel_lines": total[1], "per_line_s": total[0] / total[1]}
    return out


def compiled_call(rounds: int = 7) -> dict[str, float]:
    """Seconds of the compiled model's forward, and of forward + backward + zero_grad, called as the Trainer calls it, with
    every kernel of its wrappers a no-op (the --call mode of the module docstring)."""
    import torch
    from torch._inductor.codecache import PyCodeCache
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=256, num_hidden_layers=16, num_attention_heads=4,
                         num_key_value_heads=1, max_position_embeddings=8192, rope_theta=500000.0, tie_word_embeddings=True,
                         use_cache=False)  # fmt: skip
    config._attn_implementation = "sdpa"
    model = LlamaForCausalLM(config)
    compiled = torch.compile(model)
    ids = torch.randint(0, 256, (1, 16))

    def forward() -> Any:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return compiled(input_ids=ids, labels=ids).loss

    def step() -> None:
        forward().backward()
        model.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    for name in ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention_for_cpu_backward", "cumsum"):
        answered_from_cache(name)
    step()  # fills their caches

    def nop(*_: Any, **__: Any) -> None:
        return None

    modules = PyCodeCache.modules if isinstance(PyCodeCache.modules, list) else list(PyCodeCache.modules.values())
    for module in modules:
        for name in list(vars(module)):
            if name.startswith("cpp_fused_"):
                setattr(module, name, nop)
        module.extern_kernels = types.SimpleNamespace(mm=nop, addmm=nop, bmm=nop, baddbmm=nop, convolution=nop)
    return {"forward": best(forward, 20, rounds), "forward+backward+zero_grad": best(step, 20, rounds)}


if __name__ == "__main__":
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 7
    if "--call" in sys.argv:
        for phase, seconds in compiled_call(rounds).items():
            print(phase, "called, no-op kernels:", round(seconds, 9), "s")
    else:
        for phase, row in main(rounds).items():
            print(phase, {k: round(v, 9) for k, v in row.items()})
