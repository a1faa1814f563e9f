"""`intensity`: arithmetic intensity of a matmul or of one transformer layer's operations, and the roofline
verdict with each kernel's predicted time on a GPU."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from parcalc.frozen import frozen

if TYPE_CHECKING:
    from parcalc.core.hardware import Gpu
    from parcalc.core.intensity import Machine
    from parcalc.core.model import TransformerModel
    from parcalc.core.timing.compute import ComputeSpec
    from parcalc.derivation import Result


@frozen
class IntensityRequest:
    """What `intensity` is asked, parsed: one matmul (m, k, n, batch) or one layer of a model, the
    dtype, and the machine whose roofline times it (FLOP/s and bytes/s; None: intensity alone)."""

    dtype: str  # canonical (parcalc.core.dtypes)
    element_bytes: float
    machine: Machine | None = None
    gpu: Gpu | None = None  # the preset the machine came from (None: --peak and --bandwidth alone, or no machine)
    rated_peak: float | None = None  # the preset's peak before a power limit lowered the roof
    peak_given: bool = False  # --peak replaced the preset's peak
    bandwidth_given: bool = False  # --bandwidth replaced the preset's
    dims: tuple[int, int, int, int] | None = None  # (m, k, n, batch): one matmul
    model: TransformerModel | None = None  # one layer of this model (with batch and seq_len)
    batch: int = 1
    seq_len: int = 0
    flash_attention: bool = True
    compile: bool = False
    eager: bool = False  # --kernels eager


def request(m: str | None = None, k: str | None = None, n: str | None = None, batch: str | None = None,
            dtype: str = "fp16", model: str | None = None, seq_len: str | None = None, gpu: str | None = None,
            peak: str | None = None, bandwidth: str | None = None, flash_attention: bool | None = None,
            compile_: bool = False, kernels: str | None = None, presets: list[Path] | None = None,
            power_limit: str | None = None) -> IntensityRequest:  # fmt: skip
    """The request from `intensity`'s flag texts; bad input raises InputError naming the flag."""
    from parcalc.core.dtypes import bytes_per_element, canonical_dtype
    from parcalc.errors import InputError
    from parcalc.results.parse import kernels_flag, preset_dirs
    from parcalc.units import parse_count

    dtype_key = canonical_dtype(dtype)
    element_bytes = bytes_per_element(dtype_key)
    machine, device, rated = _machine(gpu, peak, bandwidth, dtype_key, preset_dirs(presets), power_limit)
    peak_given, bandwidth_given = peak is not None, bool(bandwidth)
    if model is not None:
        if any(v is not None for v in (m, k, n)):
            raise InputError("--model: give either --model (a layer table) or --m/--k/--n (one matmul), not both")
        from parcalc.presets import load_model

        shape = load_model(model, preset_dirs(presets))
        sequences = parse_count(batch or 1, "--batch")
        length = parse_count(seq_len, "--seq-len") if seq_len else (shape.max_seq_len or 0)
        if length == 0:
            raise InputError("--seq-len: required (the model preset has no maximum sequence length)")
        if machine is not None and kernels is not None and kernels_flag(kernels) == "hf":
            raise InputError("--kernels hf: fit times Hugging Face's layer (fit --framework hf); intensity lists the fused or eager set")
        if machine is None and kernels is not None:
            raise InputError("--kernels: with --model and a GPU (--gpu, or --peak and --bandwidth): it changes the timed kernels")
        return IntensityRequest(dtype_key, element_bytes, machine, device, rated, model=shape, batch=sequences, seq_len=length,
                                flash_attention=flash_attention is not False, compile=compile_,
                                eager=kernels_flag(kernels) == "eager", peak_given=peak_given,
                                bandwidth_given=bandwidth_given)  # fmt: skip
    if flash_attention is not None or compile_ or kernels is not None:  # flash attention's default (on) changes no matmul
        flag = ("--flash-attention" if flash_attention else "--no-flash-attention") if flash_attention is not None else "--compile" if compile_ else "--kernels"
        raise InputError(f"{flag}: only with --model (it changes a layer's kernels)")
    missing = [flag for flag, value in (("--m", m), ("--k", k), ("--n", n)) if value is None]
    if missing:
        raise InputError(f"give --m, --k and --n (missing: {', '.join(missing)}), or --model")
    assert m is not None and k is not None and n is not None  # none missing
    dims = (parse_count(m, "--m"), parse_count(k, "--k"), parse_count(n, "--n"), parse_count(batch or 1, "--batch"))
    return IntensityRequest(dtype_key, element_bytes, machine, device, rated, peak_given, bandwidth_given, dims=dims)


def result(req: IntensityRequest) -> Result:
    """The arithmetic intensity, the roofline's verdict and, on a machine, each kernel's time; no parsing."""
    from parcalc.core.intensity import layer_intensity, matmul_intensity

    machine, device = req.machine, req.gpu
    if req.model is not None:
        result = layer_intensity(req.model, req.batch, req.seq_len, req.dtype, req.element_bytes, machine)
        if machine is not None:
            result = _with_layer_kernels(result, req, machine)
    else:
        assert req.dims is not None  # request(): a matmul or a model
        result = matmul_intensity(*req.dims[:3], req.dtype, req.element_bytes, req.dims[3], machine)
        if machine is not None:
            result = _with_gemm_times(result, req, machine)
    return _under_power_limit(_gpu_settings(result, device), device)


def from_flags(**flags: Any) -> Result:
    """`intensity`'s Result from its flags as the command line gives them (texts with units, choices,
    switches): what parcalc.commands.intensity and the library (parcalc.results.run) both call."""
    return result(request(**flags))


def _under_power_limit(result: Result, device: Gpu | None) -> Result:
    """The limit among the inputs, and what it assumes (the roofline's peak is already the capped one)."""
    from dataclasses import replace

    from parcalc.core.power import tensor_power_scale
    from parcalc.results.parse import power_assumptions

    scale = tensor_power_scale(device) if device is not None else None
    if scale is None:
        return result
    return replace(result, inputs=result.inputs + (scale.inputs[0], scale.as_term("s_P")),
                   assumptions=result.assumptions + power_assumptions(device))


def _gpu_settings(result: Result, device: Gpu | None) -> Result:
    """settings.gpu as every command gives it (issue #15, the JSON schema): the preset's name ('none'
    for --peak/--bandwidth alone), with its display name as gpu_name, as fit does."""
    from dataclasses import replace

    settings = result.settings
    if not any(key == "gpu" for key, _ in settings):
        return result
    key = device.key if device is not None else "none"
    named = [pair for key_value in settings for pair in ((("gpu", key), ("gpu_name", key_value[1])) if key_value[0] == "gpu" else (key_value,))]
    return replace(result, settings=tuple(named))


def _spec(req: IntensityRequest, machine: Machine) -> ComputeSpec:
    """The ComputeSpec fit would build for this GPU and dtype (--bandwidth replaces the preset's);
    the rated peak before a power limit, where one lowers the roof (compute_spec applies the limit itself)."""
    from parcalc.core.timing.kernel_report import kernel_spec

    device, rated = req.gpu, req.rated_peak
    bw = machine.bandwidth.value if req.bandwidth_given or device is None else None
    return kernel_spec(device, req.dtype, rated if rated is not None else machine.peak.value, bw, given_peak=req.peak_given)


def _kernel_assumptions(device: Gpu | None, spec: ComputeSpec) -> tuple[str, ...]:
    from parcalc.core.timing.kernels import GENERIC  # not compute: a matmul needs no layer model

    if device is None or getattr(device, "kernels", None) is None:
        return (f"kernel shares: {GENERIC}",)
    return ()


def _with_gemm_times(result: Result, req: IntensityRequest, machine: Machine) -> Result:
    """intensity --m --k --n with a machine: the GEMM's predicted time and achieved FLOP/s."""
    from dataclasses import replace

    from parcalc.core.timing.kernel_report import gemm_times

    spec = _spec(req, machine)
    assert req.dims is not None  # a matmul's request
    m, k, n, b = req.dims
    times = gemm_times(m, k, n, b, req.element_bytes, req.dtype, spec)
    notes = _kernel_assumptions(req.gpu, spec)
    if len(times) == 2:
        notes += ("no isolated GEMM share in the GPU preset (kernels.matmul_isolated): only the in-training time is given",)
    return replace(result, derivations=result.derivations + times, assumptions=result.assumptions + notes)


def _with_layer_kernels(result: Result, req: IntensityRequest, machine: Machine) -> Result:
    """intensity --model with a machine: every kernel of one layer timed by the step-time model."""
    from dataclasses import replace

    from parcalc.core.activations import attention_assumption
    from parcalc.core.timing.compute import LayerShard, compile_assumption, kernel_set_assumption
    from parcalc.core.timing.kernel_report import layer_kernels

    shape, batch, seq_len, device = req.model, req.batch, req.seq_len, req.gpu
    assert shape is not None  # a layer's request
    flash, compiled, eager = req.flash_attention, req.compile, req.eager
    spec = _spec(req, machine)
    fp8 = req.dtype == "fp8"
    activation_bytes = 2.0 if fp8 else req.element_bytes  # FP8 training keeps 16-bit activations
    dropout = bool(getattr(shape, "dropout", False))
    shard = LayerShard(batch, seq_len, 1, False, flash, dropout, True, activation_bytes, 1, "delayed" if fp8 else "", compiled, eager)
    table, totals = layer_kernels(shape, shard, spec, moe_layer=getattr(shape, "moe", None) is not None)
    notes = (*_kernel_assumptions(device, spec),
             "kernel times: one GPU (no TP), one micro-batch of --batch sequences, causal attention, GEMMs at the in-training "
             "share fit uses (kernels.matmul)" + ("; dropout as the model trains" if dropout else ""),
             attention_assumption(flash, timed=True),
             *(("--compile: " + compile_assumption(),) if compiled and not eager else ()), kernel_set_assumption(eager, compiled))  # fmt: skip
    return replace(result, derivations=result.derivations + totals, tables=result.tables + (table,),
                   assumptions=result.assumptions + notes, settings=result.settings + (("flash_attention", str(flash).lower()), ("compile", str(compiled).lower()),
                                                 ("kernels", "eager" if eager else "fused")))


def _machine(gpu: str | None, peak: str | None, bandwidth: str | None, dtype: str, dirs: tuple,
             power_limit: str | None = None) -> tuple[Machine | None, Gpu | None, float | None]:  # fmt: skip
    """The roofline's two roofs from a GPU preset and/or explicit --peak / --bandwidth, the preset
    (or None) and the preset's rated peak when a power limit lowers the roof (else None)."""
    from parcalc.core.intensity import machine_terms
    from parcalc.errors import InputError
    from parcalc.results.parse import power_limited
    from parcalc.units import Dimension, parse_quantity

    if gpu is None and peak is None and bandwidth is None:
        power_limited(None, power_limit)  # --power-limit alone: a one-line error
        return None, None, None
    rated = None
    device = None
    peak_value = parse_quantity(peak, Dimension.FLOP_RATE, "--peak", require_unit=True) if peak else None
    bw_value = parse_quantity(bandwidth, Dimension.BANDWIDTH, "--bandwidth", require_unit=True) if bandwidth else None
    name, peak_source, bw_source = "the given machine", "given on the command line", "given on the command line"
    if gpu is not None:
        from parcalc.core.peak_flops import gpu_peak_flops
        from parcalc.presets import load_gpu

        device = power_limited(load_gpu(gpu, dirs), power_limit, peak_given=peak_value is not None)
        name = device.name
        if peak_value is None:
            chosen = gpu_peak_flops(device, dtype)
            peak_value = chosen.value
            peak_source = (chosen.derived or chosen.datasheet).source  # type: ignore[union-attr]
            from parcalc.core.power import tensor_power_scale

            scale = tensor_power_scale(device)
            if scale is not None:  # the roof the Tensor Cores reach under the board power limit
                rated, peak_value = peak_value, peak_value * scale.value
                peak_source = f"{peak_source}; x {scale.value:.4f} under the {scale.inputs[0].value:g} W power limit (parcalc.core.power)"
        if bw_value is None:
            bw_value, bw_source = device.memory_bandwidth.value, device.memory_bandwidth.source
    else:
        power_limited(None, power_limit)
    if peak_value is None or bw_value is None:
        raise InputError("the roofline needs both --peak and --bandwidth, or --gpu")
    return machine_terms(name, peak_value, peak_source, bw_value, bw_source), device, rated
