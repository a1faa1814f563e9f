"""parcalc: what a parallel training run costs, and what fits.

The library is the product; the `parcalc` command is one client of it. Typical use:

    >>> from parcalc import peak_flops
    >>> peak_flops(1.41e9, 108, 512, dtype="tf32").value
    155934720000000.0

Every calculation returns `Derivation`s (formula, inputs, value in base units, source) or a
typed result holding them; see parcalc.core for the formulas and parcalc.presets for data.
"""

from __future__ import annotations

__version__ = "0.1.0"

from parcalc.core.flops import gpu_peak_flops, peak_flops  # noqa: E402
from parcalc.core.intensity import arithmetic_intensity, matmul_bytes, matmul_flops, roofline  # noqa: E402
from parcalc.derivation import Derivation, Result, Term  # noqa: E402

__all__ = [
    "Derivation",
    "Result",
    "Term",
    "__version__",
    "arithmetic_intensity",
    "gpu_peak_flops",
    "matmul_bytes",
    "matmul_flops",
    "peak_flops",
    "roofline",
]
