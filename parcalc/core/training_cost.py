"""Time, energy and cost to train: a run of D tokens (or I iterations) from a step time or a throughput.

From the step time of one iteration (parcalc.core.fit.estimate's t_step, the search's t_step, or a
measured one):

    I = ceil(D / (B s))              iterations; the last one is a whole batch, so D' = I B s >= D tokens
    T = I x t_step                   wall-clock time, seconds (days = T / 86,400 s)

From a throughput X per GPU instead (llm-analysis's way; Narayanan et al. 2021 eq. 4):

    T = C / (N X)                    C: the run's FLOPs in the convention X counts them in

and from either:

    GPU-h = N x T / 3,600 s
    E     = PUE x N x P x T / 3,600 s    watt-hours; P the GPU's board power (its datasheet's maximum)
    cost  = price x GPU-h                 price per GPU-hour, the user's (no price presets)
    cost per 1M tokens = cost / D' x 10^6 = price x N x t_step / (B s) x 10^6 / 3,600 s

Energy counts the GPUs' boards at their maximum power: CPUs, memory, network cards, switches and
cooling are not in P; a datacentre's overhead enters through its PUE (default 1: the GPUs alone),
a node's through --gpu-power (e.g. a DGX's system power over its GPUs). Pure: numbers in,
Derivations out; the array helpers take numpy arrays or floats alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from parcalc.derivation import Derivation, Term
from parcalc.errors import InputError

SECONDS_PER_DAY = 86_400
SECONDS_PER_HOUR = 3_600
DEFAULT_PUE = 1.0
MAX_PUE = 10.0  # surveyed datacentres average about 1.5; 10 is a typo, not a building
MAX_GPU_POWER = 100e3  # watts: more than a whole 8-GPU server (a DGX H100 draws up to 10.2 kW) per GPU is a typo
NARAYANAN_EQ4 = ("Narayanan et al. 2021 (Megatron-LM, SC'21) sec. 5.1 eq. (4): end-to-end training time ~ 8TP/(nX), "
                 "8 = 2 (multiply-add) x 4 (forward, backward twice, recomputed forward) FLOPs per parameter and token")  # fmt: skip
ITERATIONS_SOURCE = "whole iterations of B sequences of s tokens: I = ceil(D / (B s)) (hand derivation)"
TIME_SOURCE = "I iterations of t_step each (hand derivation)"
THROUGHPUT_SOURCE = "the run's FLOPs at X per GPU on N GPUs (llm-analysis's total training latency; Narayanan et al. 2021 eq. 4)"
ENERGY_SOURCE = "board power x GPUs x time x PUE (hand derivation; The Green Grid's PUE = facility energy / IT energy)"
PUE_SOURCE = "--pue (default 1: the GPUs' boards alone; a datacentre's PUE is its own)"
CURRENCIES = {"$": "USD", "€": "EUR", "£": "GBP"}  # symbols as ISO codes, so every renderer can print them


@dataclass(frozen=True)
class Power:
    """Board power per GPU (watts) with its source, and the datacentre's PUE."""

    watts: float
    source: str
    pue: float = DEFAULT_PUE

    def __post_init__(self) -> None:
        if not (self.watts > 0 and math.isfinite(self.watts)):
            raise InputError(f"--gpu-power: must be greater than zero, got {self.watts!r}")
        if self.watts > MAX_GPU_POWER:
            raise InputError(f"--gpu-power: {self.watts:.4g} W per GPU; parcalc takes at most {MAX_GPU_POWER / 1e3:g} kW "
                             "(a whole DGX H100 server draws up to 10.2 kW)")  # fmt: skip
        if not (1.0 <= self.pue <= MAX_PUE):
            raise InputError(f"--pue: a datacentre's power usage effectiveness (facility energy / IT energy) is at least 1 "
                             f"and at most {MAX_PUE:g}, got {self.pue:g}")  # fmt: skip


@dataclass(frozen=True)
class Price:
    """A price per GPU-hour in a currency (an ISO code such as USD)."""

    per_gpu_hour: float
    currency: str = "USD"

    def __post_init__(self) -> None:
        if not (self.per_gpu_hour > 0 and math.isfinite(self.per_gpu_hour)):
            raise InputError(f"--price: must be greater than zero, got {self.per_gpu_hour!r}")


@dataclass(frozen=True)
class RunPlan:
    """How long the run is (tokens or iterations, exactly one) and what energy and money cost."""

    tokens: int | None = None
    iterations: int | None = None
    power: Power | None = None
    price: Price | None = None

    def __post_init__(self) -> None:
        if (self.tokens is None) == (self.iterations is None):
            raise InputError("--tokens / --iterations: give one of them (the length of the run)")
        for flag, value in (("--tokens", self.tokens), ("--iterations", self.iterations)):
            if value is not None and value < 1:
                raise InputError(f"{flag}: at least 1, got {value}")


@dataclass(frozen=True)
class TrainingRun:
    """A whole run: how many iterations and tokens, how long, how many GPU-hours, kWh and money."""

    iterations: Derivation | None  # None: a run from a throughput without a batch
    tokens: Derivation  # D' = I B s (or D as given)
    wall_clock: Derivation  # seconds
    days: Derivation
    gpu_hours: Derivation
    energy: Derivation | None = None  # Wh; None without a board power
    cost: Derivation | None = None
    cost_per_million_tokens: Derivation | None = None

    def derivations(self) -> tuple[Derivation, ...]:
        optional = (self.energy, self.cost, self.cost_per_million_tokens)
        return (*((self.iterations,) if self.iterations else ()), self.tokens, self.wall_clock, self.days, self.gpu_hours,
                *(d for d in optional if d is not None))  # fmt: skip


def _t(key: str, symbol: str, value: float, unit: str, description: str, source: str = "", latex: str | None = None) -> Term:
    return Term(key, symbol, latex or symbol, float(value), unit, description, source)


def iterations_for(tokens: int, global_batch: int, seq_len: int) -> Derivation:
    """I = ceil(D / (B s)): whole iterations to see at least D tokens."""
    per = global_batch * seq_len
    return Derivation("iterations", "Iterations of the run (whole batches)", "I", "I", "ceil($D / ($B × $s))",
                      r"\left\lceil \frac{$D}{$B \times $s} \right\rceil",
                      (_t("D", "D", tokens, "", "training tokens asked for"), _t("B", "B", global_batch, "", "sequences per iteration"),
                       _t("s", "s", seq_len, "", "tokens per sequence")),
                      float(-(-tokens // per)), "", ITERATIONS_SOURCE)  # fmt: skip


def tokens_trained(iterations: Derivation | int, global_batch: int, seq_len: int) -> Derivation:
    """D' = I B s: the tokens the whole iterations see."""
    term = iterations.as_term("I") if isinstance(iterations, Derivation) else _t("I", "I", iterations, "", "iterations (--iterations)")
    return Derivation("tokens_trained", "Tokens the run trains on (whole iterations)", "D'", "D'", "$I × $B × $s",
                      r"$I \times $B \times $s",
                      (term, _t("B", "B", global_batch, "", "sequences per iteration"), _t("s", "s", seq_len, "", "tokens per sequence")),
                      term.value * global_batch * seq_len, "", "hand derivation")  # fmt: skip


def wall_clock_from_step(iterations: Derivation | Term, step: Derivation | Term) -> Derivation:
    """T = I x t_step."""
    i = iterations.as_term("I") if isinstance(iterations, Derivation) else iterations
    t = step.as_term("t_step") if isinstance(step, Derivation) else step
    return Derivation("train_time", "Wall-clock time of the run", "T", "T", "$I × $t_step", r"$I \times $t_step", (i, t),
                      i.value * t.value, "s", TIME_SOURCE)  # fmt: skip


def wall_clock_from_throughput(flops: Derivation, gpus: int, rate: Term) -> Derivation:
    """T = C / (N X): the run's FLOPs at X FLOP/s on each of N GPUs."""
    return Derivation("train_time", "Wall-clock time of the run", "T", "T", "$C / ($N × $X)", r"\frac{$C}{$N \times $X}",
                      (flops.as_term("C"), _t("N", "N", gpus, "", "GPUs"), rate), flops.value / (gpus * rate.value), "s",
                      THROUGHPUT_SOURCE)  # fmt: skip


def narayanan_time(tokens: float, params: float, gpus: int, rate: Term) -> Derivation:
    """Narayanan et al. 2021 eq. (4): T ~ 8 T P / (n X), with T the tokens and P the parameters."""
    return Derivation("train_time_eq4", "Narayanan et al.'s end-to-end training time, eq. (4)", "T_eq4", r"T_{\mathrm{eq4}}",
                      "8 × $D × $P / ($n × $X)", r"\frac{8 \times $D \times $P}{$n \times $X}",
                      (_t("D", "T", tokens, "", "training tokens"), _t("P", "P", params, "", "parameters"), _t("n", "n", gpus, "", "GPUs"),
                       rate), 8.0 * tokens * params / (gpus * rate.value), "s", NARAYANAN_EQ4)  # fmt: skip


def days_of(wall_clock: Derivation) -> Derivation:
    return Derivation("train_days", "Wall-clock days of the run", "T_days", r"T_{\mathrm{days}}", "$T / 86,400 s",
                      r"\frac{$T}{86400\ \text{s}}", (wall_clock.as_term("T"),), wall_clock.value / SECONDS_PER_DAY, "days",
                      "24 x 3,600 s per day")  # fmt: skip


def gpu_hours_of(wall_clock: Derivation, gpus: int) -> Derivation:
    return Derivation("gpu_hours", "GPU-hours of the run", "H", "H", "$N × $T / 3,600 s", r"\frac{$N \times $T}{3600\ \text{s}}",
                      (_t("N", "N", gpus, "", "GPUs"), wall_clock.as_term("T")), gpus * wall_clock.value / SECONDS_PER_HOUR,
                      "GPU-h", "every GPU held for the whole run (hand derivation)")  # fmt: skip


def energy_of(wall_clock: Derivation, gpus: int, power: Power) -> Derivation:
    """E = PUE x N x P x T / 3,600 s, in watt-hours."""
    return Derivation("energy", "Energy of the run (GPU boards at their maximum power, times the PUE)", "E", "E",
                      "$pue × $N × $P × $T / 3,600 s", r"\frac{$pue \times $N \times $P \times $T}{3600\ \text{s}}",
                      (_t("pue", "PUE", power.pue, "", "power usage effectiveness of the datacentre", PUE_SOURCE, r"\mathrm{PUE}"),
                       _t("N", "N", gpus, "", "GPUs"), _t("P", "P", power.watts, "W", "board power per GPU", power.source),
                       wall_clock.as_term("T")),
                      power.pue * gpus * power.watts * wall_clock.value / SECONDS_PER_HOUR, "Wh", ENERGY_SOURCE,
                      ("GPU boards only, at their datasheet maximum (an upper bound for the GPUs: training averages less); CPUs, "
                       "memory, network cards, switches and cooling are not counted unless --gpu-power or --pue adds them",))  # fmt: skip


def cost_of(gpu_hours: Derivation, price: Price) -> Derivation:
    return Derivation("cost", "Cost of the run", "cost", r"\mathrm{cost}", "$p × $H", r"$p \times $H",
                      (_t("p", "p", price.per_gpu_hour, f"{price.currency}/GPU-h", "price per GPU-hour", "--price (the user's)"),
                       gpu_hours.as_term("H")), price.per_gpu_hour * gpu_hours.value, price.currency,
                      "GPU-hours x price per GPU-hour")  # fmt: skip


def cost_per_million_tokens_of(cost: Derivation, tokens: Derivation, currency: str) -> Derivation:
    return Derivation("cost_per_million_tokens", "Cost per million training tokens", "c_1M", r"c_{\mathrm{1M}}",
                      "$cost / $D × 10^6", r"\frac{$cost}{$D} \times 10^{6}", (cost.as_term("cost"), tokens.as_term("D")),
                      cost.value / tokens.value * 1e6, f"{currency}/1M tokens", "cost / tokens trained")  # fmt: skip


def _finish(iterations: Derivation | None, tokens: Derivation, wall_clock: Derivation, gpus: int, plan: RunPlan) -> TrainingRun:
    gpu_hours = gpu_hours_of(wall_clock, gpus)
    cost = cost_of(gpu_hours, plan.price) if plan.price is not None else None
    return TrainingRun(
        iterations=iterations, tokens=tokens, wall_clock=wall_clock, days=days_of(wall_clock), gpu_hours=gpu_hours,
        energy=energy_of(wall_clock, gpus, plan.power) if plan.power is not None else None, cost=cost,
        cost_per_million_tokens=cost_per_million_tokens_of(cost, tokens, plan.price.currency) if cost is not None and plan.price else None,
    )  # fmt: skip


def run_from_step(plan: RunPlan, step: Derivation | Term, gpus: int, global_batch: int, seq_len: int) -> TrainingRun:
    """The run at one step time per iteration: I = ceil(D / (B s)) (or --iterations), T = I x t_step."""
    _check_shape(gpus, global_batch, seq_len)
    if plan.tokens is not None:
        iterations: Derivation = iterations_for(plan.tokens, global_batch, seq_len)
    else:
        assert plan.iterations is not None  # RunPlan holds exactly one
        iterations = Derivation("iterations", "Iterations of the run (given)", "I", "I", "$I", "$I",
                                (_t("I", "I", plan.iterations, "", "iterations (--iterations)"),), float(plan.iterations), "",
                                "--iterations")  # fmt: skip
    tokens = tokens_trained(iterations, global_batch, seq_len)
    return _finish(iterations, tokens, wall_clock_from_step(iterations, step), gpus, plan)


def run_from_throughput(plan: RunPlan, flops_per_token: Derivation, gpus: int, rate: Term, global_batch: int | None,
                        seq_len: int) -> TrainingRun:  # fmt: skip
    """The run at a throughput X per GPU: T = C / (N X), C = FLOPs per token x tokens (whole
    iterations when the batch is known, else the tokens as given)."""
    _check_shape(gpus, global_batch or 1, seq_len)
    if not (rate.value > 0 and math.isfinite(rate.value)):
        raise InputError(f"the throughput per GPU must be greater than zero, got {rate.value!r}")
    iterations = None
    if global_batch is not None and plan.tokens is not None:
        iterations = iterations_for(plan.tokens, global_batch, seq_len)
        tokens = tokens_trained(iterations, global_batch, seq_len)
    elif plan.iterations is not None:
        if global_batch is None:
            raise InputError("--iterations: give --batch too (tokens = iterations x batch x sequence length)")
        tokens = tokens_trained(plan.iterations, global_batch, seq_len)
    else:
        tokens = Derivation("tokens_trained", "Tokens the run trains on (as given)", "D", "D", "$D", "$D",
                            (_t("D", "D", plan.tokens or 0, "", "training tokens (--tokens)"),), float(plan.tokens or 0), "", "--tokens")  # fmt: skip
    total = Derivation("run_flops", "FLOPs of the run (per token x tokens)", "C", "C", "$f_tok × $D", r"$f_tok \times $D",
                       (flops_per_token.as_term("f_tok"), tokens.as_term("D")), flops_per_token.value * tokens.value, "FLOP",
                       flops_per_token.source)  # fmt: skip
    run = _finish(iterations, tokens, wall_clock_from_throughput(total, gpus, rate), gpus, plan)
    return run


def _check_shape(gpus: int, global_batch: int, seq_len: int) -> None:
    for flag, value in (("--gpus", gpus), ("--batch", global_batch), ("--seq-len", seq_len)):
        if value < 1:
            raise InputError(f"{flag}: at least 1, got {value}")


# ---------------------------------------------------------------------------------------------
# Per configuration of a search (numpy arrays of t_step, or floats)


def days_per_run(t_step, iterations: int):  # type: ignore[no-untyped-def]
    """Days of a run of `iterations` iterations at each t_step (seconds)."""
    return t_step * iterations / SECONDS_PER_DAY


def cost_per_million_tokens(t_step, gpus: int, global_batch: int, seq_len: int, price: Price):  # type: ignore[no-untyped-def]
    """price x N x t_step / 3,600 s / (B s) x 10^6: the cost of a million tokens at each t_step (the
    quantity `fit --search --rank-by cost` ranks by; the same as the run's cost / D')."""
    return price.per_gpu_hour * gpus * t_step / SECONDS_PER_HOUR / (global_batch * seq_len) * 1e6


def cost_per_run(t_step, gpus: int, iterations: int, price: Price):  # type: ignore[no-untyped-def]
    """price x N x I x t_step / 3,600 s: the run's cost at each t_step."""
    return price.per_gpu_hour * gpus * iterations * t_step / SECONDS_PER_HOUR
