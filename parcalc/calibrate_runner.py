"""Timing GEMMs with PyTorch for `parcalc calibrate gemm` (the measuring half; the arithmetic is
parcalc.core.calibrate.gemm).

PyTorch is imported here only, when a sweep runs: the rest of parcalc never needs it. A device
is CUDA when PyTorch sees one (ROCm builds answer to `cuda` too), else the CPU.

Each shape: two warm-up calls (cuBLAS / rocBLAS pick and load their kernel, caches fill) and
more for one batch's time, then the best of three single calls to size a batch of at least
`batch_seconds`, then three such batches with the device
synchronised at both ends; the shape's time is the best batch's time per call. The best, not the
mean: load from other processes only ever slows a batch down.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from parcalc.core.calibrate.gemm import GemmShape, GemmTiming, ShapeSet
from parcalc.errors import InputError

INSTALL_HINT = "pip install torch (a CPU-only sweep: pip install torch --index-url https://download.pytorch.org/whl/cpu)"
WARMUP_CALLS = 2
TIMED_BATCHES = 3
MAX_CALLS_PER_BATCH = 10_000
TORCH_DTYPES = {
    "fp32": "float32",
    "tf32": "float32",
    "bf16": "bfloat16",
    "fp16": "float16",
}


def load_torch() -> Any:
    """PyTorch, or an InputError that says how to install it."""
    try:
        import torch
    except ImportError:
        raise InputError(f"calibrate gemm needs PyTorch: {INSTALL_HINT}") from None
    except OSError as error:  # a wheel whose CUDA libraries do not load
        raise InputError(
            f"calibrate gemm: PyTorch is installed but does not load ({error}); reinstall it: {INSTALL_HINT}"
        ) from None
    return torch


@dataclass(frozen=True)
class Device:
    torch: Any
    handle: Any  # torch.device
    kind: str  # "cuda" or "cpu"
    name: str
    description: str  # device, backend and PyTorch version, for the preset's source


def open_device(torch: Any, wanted: str) -> Device:
    """`auto` (CUDA / ROCm when PyTorch sees one, else the CPU), `cpu`, `cuda` or `cuda:N`."""
    choice = wanted.strip().lower()
    cuda_ok = bool(torch.cuda.is_available())
    if choice == "auto":
        choice = "cuda" if cuda_ok else "cpu"
    if choice.startswith("cuda"):
        if not cuda_ok:
            raise InputError(
                f"--device {wanted}: PyTorch sees no CUDA or ROCm device (torch.cuda.is_available() is False)"
            )
        try:
            handle = torch.device(choice)
            index = (
                handle.index
                if handle.index is not None
                else torch.cuda.current_device()
            )
            name = torch.cuda.get_device_name(index)
        except (RuntimeError, AssertionError, ValueError) as error:
            raise InputError(
                f"--device {wanted}: {str(error).splitlines()[0]}"
            ) from None
        backend = (
            f"ROCm {torch.version.hip}"
            if getattr(torch.version, "hip", None)
            else f"CUDA {torch.version.cuda}"
        )
        return Device(
            torch,
            torch.device("cuda", index),
            "cuda",
            name,
            f"{name}, {backend}, PyTorch {torch.__version__}",
        )
    if choice != "cpu":
        raise InputError(f"--device: {wanted!r} is not auto, cpu, cuda or cuda:N")
    name = cpu_name()
    threads = torch.get_num_threads()
    return Device(
        torch,
        torch.device("cpu"),
        "cpu",
        name,
        f"{name}, {threads} threads, PyTorch {torch.__version__}",
    )


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux), else what `platform` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def cpu_vendor() -> str:
    """AMD, Intel, ... from /proc/cpuinfo's vendor_id on Linux, else the OS's name."""
    vendors = {"AuthenticAMD": "AMD", "GenuineIntel": "Intel", "HygonGenuine": "Hygon"}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                if line.lower().startswith(("vendor_id", "cpu implementer")):
                    value = line.split(":", 1)[1].strip()
                    return vendors.get(
                        value, "Arm" if value.startswith("0x") else value
                    )
    except OSError:
        pass
    return f"{platform.system()} CPU"


def facts(device: Device) -> dict[str, Any]:
    """Vendor, architecture, memory and SMs as the device reports them."""
    torch = device.torch
    if device.kind == "cuda":
        props = torch.cuda.get_device_properties(device.handle)
        hip = getattr(torch.version, "hip", None)
        arch = (
            getattr(props, "gcnArchName", "")
            if hip
            else f"compute capability {props.major}.{props.minor}"
        )
        return {"vendor": "AMD" if hip else "NVIDIA", "architecture": arch or device.name, "memory_capacity": float(props.total_memory),
                "sms": int(props.multi_processor_count), "where": f"torch.cuda.get_device_properties, {device.description}"}  # fmt: skip
    pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    return {"vendor": cpu_vendor(), "architecture": platform.machine() or "CPU", "memory_capacity": float(pages * page_size),
            "sms": None, "where": f"os.sysconf physical pages x page size, {device.description}"}  # fmt: skip


def _synchronise(device: Device) -> None:
    if device.kind == "cuda":
        device.torch.cuda.synchronize(device.handle)


def _run(device: Device, call: Callable[[], Any], calls: int) -> float:
    """Seconds for `calls` back-to-back calls, the device idle at both ends."""
    _synchronise(device)
    start = time.perf_counter()
    for _ in range(calls):
        call()
    _synchronise(device)
    return time.perf_counter() - start


def time_gemms(
    device: Device,
    dtype: str,
    shapes: ShapeSet,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[GemmTiming, ...]:
    """The best time per call of every shape (module docstring)."""
    torch = device.torch
    if dtype not in TORCH_DTYPES:
        raise InputError(
            f"--dtype: calibrate gemm times {', '.join(TORCH_DTYPES)}, not {dtype}"
        )
    if dtype == "tf32" and device.kind != "cuda":
        raise InputError(
            "--dtype tf32: TF32 is a Tensor Core mode of NVIDIA GPUs; on a CPU use fp32"
        )
    element = getattr(torch, TORCH_DTYPES[dtype])
    tf32_was = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = (
        dtype == "tf32"
    )  # fp32 means IEEE fp32, not TF32, as in the presets
    timings = []
    try:
        with torch.no_grad():
            for index, shape in enumerate(shapes.shapes):
                timings.append(
                    GemmTiming(
                        shape, _time_one(device, shape, element, shapes.batch_seconds)
                    )
                )
                if progress is not None:
                    progress(index + 1, len(shapes.shapes))
    except RuntimeError as error:  # out of memory, a dtype the device lacks
        raise InputError(
            f"calibrate gemm: PyTorch failed on {device.name}: {str(error).splitlines()[0]}"
        ) from None
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32_was
    return tuple(timings)


def _time_one(
    device: Device, shape: GemmShape, element: Any, batch_seconds: float
) -> float:
    torch = device.torch
    a = torch.randn(shape.m, shape.k, device=device.handle).to(element)
    b = torch.randn(shape.k, shape.n, device=device.handle).to(element)
    out = torch.empty(shape.m, shape.n, device=device.handle, dtype=element)

    def call() -> Any:
        return torch.matmul(a, b, out=out)

    warm_until = time.perf_counter() + batch_seconds
    _run(device, call, WARMUP_CALLS)
    while (
        time.perf_counter() < warm_until
    ):  # and for one batch's time: thread pools and clocks settle
        _run(device, call, 1)
    once = max(
        min(_run(device, call, 1) for _ in range(3)), 1e-9
    )  # one preempted call must not size the batch
    calls = max(1, min(MAX_CALLS_PER_BATCH, round(batch_seconds / once)))
    return min(_run(device, call, calls) / calls for _ in range(TIMED_BATCHES))


def copy_bandwidth(device: Device, size: int) -> float:
    """Bytes per second of a device-to-device copy (read + write), the best of three."""
    torch = device.torch
    elements = size // 4
    source = torch.ones(elements, dtype=torch.float32, device=device.handle)
    target = torch.empty_like(source)
    target.copy_(source)  # warm-up: first touch of the pages
    seconds = min(_run(device, lambda: target.copy_(source), 1) for _ in range(3))
    return 2 * elements * 4 / max(seconds, 1e-9)
