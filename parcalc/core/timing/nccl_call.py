"""One collective call as nccl-tests would measure it: the derivations of NCCL's own choice.

parcalc.core.timing.network.collective_time picks, as NCCL's tuning model does (src/graph/tuning.cc),
the cheapest algorithm (ring, tree, NVLS, NVLS_TREE) and protocol (LL, LL128, Simple) for a message
of M bytes over a group of n ranks placed on nodes; `fit` times every collective of a step with it.
Here the same call is written out as derivations: its time t = latency + transfer (+ the pipeline ramp
NCCL's model leaves out, NVLS only), then nccl-tests' algbw = M / t and busbw = algbw x factor
(NVIDIA/nccl-tests doc/PERFORMANCE.md), so that a user can hold it against an all_reduce_perf line.
"""

from __future__ import annotations

from typing import Any

from parcalc.core.collectives import NCCL_TESTS, bus_factor
from parcalc.derivation import Derivation, Term

NCCL_MODEL = "NCCL's tuning model (src/graph/tuning.cc, v2.23.4: base and hardware latencies, bandwidth per algorithm and protocol); parcalc.core.timing.network"


def nccl_call_derivations(op: Any, size: Term, group: Any, fabric: Any) -> tuple[tuple[Derivation, ...], Any]:
    """(time, algbw, busbw) of one call of `op` on `size` bytes over `group` (a Placement) of
    `fabric`, and the CollectiveTime it comes from (algorithm, protocol)."""
    from parcalc.core.timing.network import collective_time

    call = collective_time(op, size.value, group, fabric)
    transfer = max(call.time - call.latency - call.fill - call.call, 0.0)
    where = f"{group.size} ranks, {group.per_node} per node on {group.nodes} node{'s' if group.nodes > 1 else ''}"
    terms = [
        Term("lat", "t_lat", r"t_{\mathrm{lat}}", call.latency + call.call, "s",
             f"{call.algorithm} / {call.protocol} latency: NCCL's base latency plus its hardware latency per step ({where}), "
             f"plus {call.call * 1e6:.3g} us per call for the kernel launch NCCL's model leaves out (calibrated on one "
             "8 x A100 nccl-tests table: parcalc.core.timing.nccl.CALL_US)",
             f"{NCCL_MODEL}; the per-call cost: docs/nccl-tuning.md sec. 14"),
        Term("bw", "t_bw", r"t_{\mathrm{bw}}", transfer, "s",
             f"the bytes the busiest link carries at {call.algorithm} / {call.protocol}'s bus bandwidth "
             f"{call.bus_bandwidth / 1e9:.4g} GB/s", NCCL_MODEL),
    ]  # fmt: skip
    formula, latex = "$lat + $bw", "$lat + $bw"
    if call.fill:
        terms.append(Term("fill", "t_fill", r"t_{\mathrm{fill}}", call.fill, "s",
                          "NVLS pipeline ramp (chunks through the switch; not in NCCL's own estimate)", "docs/nccl-tuning.md sec. 13"))  # fmt: skip
        formula, latex = formula + " + $fill", latex + " + $fill"
    time = Derivation("time", f"Time of one {op.value} as NCCL runs it ({call.algorithm}, {call.protocol})", "t", "t", formula, latex,
                      tuple(terms), call.time, "s", NCCL_MODEL,
                      (f"NCCL would choose {call.algorithm} with the {call.protocol} protocol (the cheapest of its estimates)",))  # fmt: skip
    algbw = Derivation("algbw", "Algorithm bandwidth (nccl-tests algbw)", "algbw", r"\mathrm{algbw}", "$m / $t", r"\frac{$m}{$t}",
                       (size, time.as_term("t")), call.algbw, "B/s", NCCL_TESTS)  # fmt: skip
    factor = bus_factor(op, group.size)
    busbw = Derivation("busbw", "Bus bandwidth (nccl-tests busbw)", "busbw", r"\mathrm{busbw}", "$algbw × $f", r"$algbw \times $f",
                       (algbw.as_term("algbw"), Term("f", "f", "f", factor, "", f"nccl-tests' bus factor of {op.value} over n = {group.size}")),
                       call.busbw, "B/s", NCCL_TESTS)  # fmt: skip
    return (time, algbw, busbw), call
