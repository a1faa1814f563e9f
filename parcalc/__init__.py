"""parcalc: what a parallel training run costs, and what fits.

The library is the product; the `parcalc` command is one client of it. Typical use:

    >>> from parcalc import peak_flops
    >>> peak_flops(1.41e9, 108, 512, dtype="tf32").value
    155934720000000.0

Every calculation returns `Derivation`s (formula, inputs, value in base units, source) or a
typed result holding them; see parcalc.core for the formulas and parcalc.presets for data.
Every command is a function too, taking its flags with Python names and returning its Result
(parcalc.api):

    >>> import parcalc
    >>> parcalc.memory(model="gpt3-175b", tp=8, pp=8, dp=16, gpu="a100-sxm4-80gb").derivation("total").unit
    'B'

Names are imported on first use, so that `import parcalc` stays cheap for the CLI.
"""

from __future__ import annotations

# Nothing is imported here at module level: `parcalc` (the command) imports this package before
# parcalc.__main__ can catch Ctrl-C, and every import is time in which Ctrl-C prints a traceback.

__version__ = "0.1.0"  # the one source of the version: pyproject.toml reads it ([tool.hatch.version])

_EXPORTS = {
    "Derivation": "parcalc.derivation",
    "Result": "parcalc.derivation",
    "Term": "parcalc.derivation",
    "peak_flops": "parcalc.core.peak_flops",
    "gpu_peak_flops": "parcalc.core.peak_flops",
    "matmul_flops": "parcalc.core.intensity",
    "matmul_bytes": "parcalc.core.intensity",
    "arithmetic_intensity": "parcalc.core.intensity",
    "roofline": "parcalc.core.intensity",
    "load_gpu": "parcalc.presets",
    "load_link": "parcalc.presets",
    "load_model": "parcalc.presets",
    "Layout": "parcalc.core.layout",  # the parallel layout: parcalc.memory(..., layout=parcalc.Layout(tp=8, pp=2, dp=4))
}

# The commands as functions (parcalc.api): parcalc.memory(model=..., tp=8) returns memory's Result.
# `peak_flops` stays the formula above; the command is parcalc.api.peak_flops.
_COMMAND_FUNCTIONS = ("intensity", "comm_volume", "bubble", "memory", "flops", "fit", "scaling", "analyze", "presets_list",
                      "presets_show", "run", "sweep")  # fmt: skip
_EXPORTS.update(dict.fromkeys(_COMMAND_FUNCTIONS, "parcalc.api"))

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'parcalc' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
