"""parcalc.core.fit_search over expert parallelism (MoE models) and context parallelism (issue #13):
the vectorised search's numbers are parcalc.core.fit.estimate's for the same configuration (memory
and every step-time term to 1e-9 relative), the space holds exactly the ep / cp values the rules
allow, and an ep > 1 layout wins where the terms say it must."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import numpy as np
import pytest

from parcalc.core.choices import Precision, Recompute
from parcalc.core.fit import Cluster, Training, estimate, invalid_reason
from parcalc.core.fit_search import CP_MIN_SEQ_LEN, RECOMPUTES, SearchSpace, search
from parcalc.presets import load_gpu, load_link, load_model

H100 = load_gpu("h100-sxm5", ())


def h100_cluster(gpus: int) -> Cluster:
    return Cluster(gpus, 8, H100.dtypes["bf16"].dense_peak.value, H100.memory_capacity.value, load_link("nvlink4", ()),
                   load_link("ib-ndr", ()), gpu=H100)  # fmt: skip


SCENARIOS = {  # (model, training, GPUs)
    "mixtral-8x7b-64": ("mixtral-8x7b", Training(512, 4096, flash_attention=True), 64),
    "qwen3-30b-a3b-64": ("qwen3-30b-a3b", Training(256, 4096, flash_attention=True), 64),
    "llama3-8b-64-128k": ("llama3-8b", Training(8, 131072, flash_attention=True), 64),
    # MoE layers that are not every layer: the middle pipeline stages then differ in their experts,
    # and the fullest one is not the second stage (DeepSeek-V3's three leading dense layers; Llama 4
    # Maverick's MoE on every other layer). Qwen3-30B-A3B's shapes with those layouts.
    "qwen3-30b-a3b-dense-first-3-64": ("qwen3-30b-a3b", Training(256, 4096, flash_attention=True), 64),
    "qwen3-30b-a3b-every-2-64": ("qwen3-30b-a3b", Training(256, 4096, flash_attention=True), 64),
    # FP8: Transformer Engine's weight copies of the experts a rank holds (parcalc.core.memory.fp8_weight_cache)
    "qwen3-30b-a3b-fp8-64": ("qwen3-30b-a3b", Training(256, 4096, Precision.FP8, flash_attention=True), 64),
    # --recompute-modules pins what the search's selective candidates recompute (Megatron's modules, dense and MoE)
    "qwen3-30b-a3b-recompute-modules-64": ("qwen3-30b-a3b", Training(256, 4096, flash_attention=True,
                                                                     recompute_modules=("mlp", "moe_act", "layernorm", "moe")), 64),
}
MOE_LAYOUT = {"qwen3-30b-a3b-dense-first-3-64": {"first_dense_layers": 3}, "qwen3-30b-a3b-every-2-64": {"every": 2},
              "qwen3-30b-a3b-recompute-modules-64": {"first_dense_layers": 3}}


def _scalar(model, config, training, cluster) -> dict[str, float]:  # type: ignore[no-untyped-def]
    e = estimate(model, config, training, cluster)
    return {"memory": e.total_memory, "t_compute": e.compute.value, "t_tp": e.tp_comm.value, "t_bubble": e.bubble.value,
            "t_pp": e.pp_comm.value, "t_dp": e.dp_comm.value, "t_optimizer": e.optimizer.value, "t_step": e.step.value,
            "t_cp": e.cp_comm.value if e.cp_comm is not None else 0.0, "t_ep": e.ep_comm.value if e.ep_comm is not None else 0.0,
            "mfu": e.mfu.value}  # fmt: skip


@pytest.fixture(scope="module", params=sorted(SCENARIOS))
def scenario(request):  # type: ignore[no-untyped-def]
    key, training, gpus = SCENARIOS[request.param]
    model, cluster = load_model(key, ()), h100_cluster(gpus)
    if request.param in MOE_LAYOUT:
        model = replace(model, moe=replace(model.moe, **MOE_LAYOUT[request.param]))
    return request.param, model, training, cluster, search(model, training, cluster)


def test_the_best_is_the_scalar_estimate_of_its_configuration(scenario) -> None:  # type: ignore[no-untyped-def]
    """Memory and t_step of the search's best equal estimate() of that configuration to 1e-9."""
    name, model, training, cluster, found = scenario
    best = int(found.ranked()[0])
    config = found.evaluated.config(best)
    expected = _scalar(model, config, training, cluster)
    for key, value in expected.items():
        assert found.evaluated.columns[key][best] == pytest.approx(value, rel=1e-9, abs=1e-15), (name, config.label(), key)


def test_random_configurations_agree_with_the_scalar_estimate(scenario) -> None:  # type: ignore[no-untyped-def]
    """60 random configurations, among them ep > 1 (MoE) or cp > 1 (128k tokens) ones."""
    name, model, training, cluster, found = scenario
    ev = found.evaluated
    varied = "cp" if model.moe is None else "ep"
    wide = np.flatnonzero(ev.columns[varied] > 1)
    assert wide.size > 0, name
    rng = random.Random(name)
    sample = rng.sample(range(len(ev)), 40) + rng.sample(wide.tolist(), 20)
    deep = np.flatnonzero(ev.columns["pp"] > 2)  # middle stages, where MoE layer counts differ
    fitting = np.flatnonzero(ev.columns["fits"])
    sample += rng.sample(deep.tolist(), min(20, deep.size)) + rng.sample(fitting.tolist(), min(30, fitting.size))
    if training.recompute_modules is not None:  # selective candidates, which the pinned modules change, fitting and not
        selective = np.flatnonzero(ev.columns["recompute"] == RECOMPUTES.index(Recompute.SELECTIVE))
        chosen = np.intersect1d(selective, fitting)
        assert chosen.size > 0, name
        sample += rng.sample(selective.tolist(), 20) + rng.sample(chosen.tolist(), min(20, chosen.size))
    for i in sample:
        config = ev.config(i)
        assert invalid_reason(model, config, training, cluster) is None
        for key, value in _scalar(model, config, training, cluster).items():
            if ev.columns["fits"][i] or key == "memory":
                assert ev.columns[key][i] == pytest.approx(value, rel=1e-9, abs=1e-15), (name, config.label(), key)
            else:  # the search times only what fits
                assert math.isnan(ev.columns[key][i]), (name, config.label(), key)


def test_the_ep_values_are_the_divisors_folding_allows() -> None:
    """Mixtral's 8 experts on 64 GPUs: ep in {1, 2, 4, 8}, each dividing cp x dp (etp = tp, so
    ep x etp | tp x cp x dp is ep | cp x dp); a dense model keeps ep = 1."""
    model, training, cluster = load_model("mixtral-8x7b", ()), Training(512, 4096, flash_attention=True), h100_cluster(64)
    c = search(model, training, cluster).evaluated.columns
    assert sorted(np.unique(c["ep"]).tolist()) == [1, 2, 4, 8]
    assert np.all((c["cp"] * c["dp"]) % c["ep"] == 0)
    assert set(np.unique(c["dp"][c["ep"] == 8]).tolist()) == {8, 16, 32, 64}  # dp = 4 (tp 2 pp 8) cannot hold ep = 8
    pinned = search(model, training, cluster, SearchSpace(ep=2)).evaluated.columns
    assert np.all(pinned["ep"] == 2) and len(pinned["ep"]) > 0
    dense = search(load_model("llama3-8b", ()), Training(64, 4096), h100_cluster(16)).evaluated.columns
    timed = dense["fits"].astype(bool)  # the search times what fits; the rest keep nan times
    assert np.all(dense["ep"] == 1) and np.all(dense["cp"] == 1) and np.all(dense["t_ep"][timed] == 0) and np.all(dense["t_cp"][timed] == 0)
    assert timed.any() and np.all(np.isnan(dense["t_ep"][~timed]))


def test_expert_parallelism_wins_where_the_experts_do_not_fit_replicated() -> None:
    """Mixtral 8x7B, 64 H100, B = 512, s = 4096, ZeRO off (DDP). 45.1 B of its 46.7 B parameters
    are routed experts, 18 bytes each with mixed-precision AdamW: replicated over dp they need 8
    GPUs' share of tp x pp to fit in 80 GB, so the best ep = 1 layout is TP 2 x PP 8 (TP
    collectives and slower GEMMs). ep = 8 divides the expert states by 8 on every GPU: TP 1 x PP 4
    x DP 16 x EP 8 fits (~67 GiB) and pays only the MoE all-to-alls (t_ep), less than the TP
    communication and compute it saves. The same configuration at ep = 1 holds ~214 GiB."""
    model, training, cluster = load_model("mixtral-8x7b", ()), Training(512, 4096, flash_attention=True), h100_cluster(64)
    free = search(model, training, cluster, SearchSpace(zero_stages=(0,)))
    dense = search(model, training, cluster, SearchSpace(zero_stages=(0,), ep=1))
    best, best_dense = free.evaluated.config(int(free.ranked()[0])), dense.evaluated.config(int(dense.ranked()[0]))
    assert best.layout.ep == 8 and (best.layout.tp, best.layout.pp, best.layout.dp) == (1, 4, 16)
    assert best_dense.layout.ep == 1 and best_dense.layout.tp * best_dense.layout.pp >= 8
    winner, runner_up = estimate(model, best, training, cluster), estimate(model, best_dense, training, cluster)
    assert winner.step.value < runner_up.step.value
    assert winner.ep_comm is not None and winner.ep_comm.value > 0
    # what ep = 8 buys: the compute and TP communication ep = 1 needs to fit, beyond the all-to-alls
    saved = (runner_up.compute.value + runner_up.tp_comm.value) - (winner.compute.value + winner.tp_comm.value)
    assert saved > winner.ep_comm.value
    at_ep1 = estimate(model, best.replaced(ep=1), training, cluster)
    assert not at_ep1.fits and at_ep1.total_memory > 2.5 * winner.total_memory


def test_cp_is_searched_only_for_long_sequences_or_when_pinned() -> None:
    """The rule (SearchSpace.cp_values): cp = 1 below CP_MIN_SEQ_LEN = 16,384 tokens; from it every
    divisor of the GPUs with s divisible by 2 cp (Megatron-LM's causal load balancing); --cp pins."""
    assert CP_MIN_SEQ_LEN == 16384
    space = SearchSpace()
    assert space.cp_values(64, 8192) == [1]
    assert space.cp_values(64, 16384) == [1, 2, 4, 8, 16, 32, 64]
    assert space.cp_values(48, 20480) == [1, 2, 4, 8, 16]  # 20,480 = 2^12 x 5: 2 cp must divide it, so no cp with a factor 3
    assert SearchSpace(cp=4).cp_values(64, 4096) == [4]
    model, cluster = load_model("llama3-8b", ()), h100_cluster(64)
    short = search(model, Training(64, 8192, flash_attention=True), cluster).evaluated.columns
    assert np.all(short["cp"] == 1)
    pinned = search(model, Training(64, 8192, flash_attention=True), cluster, SearchSpace(cp=2)).evaluated.columns
    assert np.all(pinned["cp"] == 2) and np.all(pinned["tp"] * pinned["pp"] * pinned["cp"] * pinned["dp"] == 64)


def test_long_sequences_need_context_parallelism() -> None:
    """Llama 3 8B at 131,072 tokens on 64 H100: without CP no layout fits (one sequence's
    activations, even with full recomputation and tp 8, exceed 80 GB), so the best splits the
    sequence (cp > 1) and its t_cp is in its step."""
    model, training, cluster = load_model("llama3-8b", ()), Training(8, 131072, flash_attention=True), h100_cluster(64)
    found = search(model, training, cluster)
    c = found.evaluated.columns
    best = int(found.ranked()[0])
    assert c["cp"][best] > 1 and c["t_cp"][best] >= 0
    no_cp = search(model, training, cluster, SearchSpace(cp=1))
    if no_cp.ranked().size:
        assert no_cp.evaluated.columns["t_step"][no_cp.ranked()[0]] > c["t_step"][best]


def test_cli_search_pins_ep_and_cp_and_carries_them_in_json(run_json, run_error) -> None:  # type: ignore[no-untyped-def]
    """--ep / --cp with --search pin the search (every row has them); JSON carries ep / t_ep (and
    cp / t_cp where cp varies); the best's step equals estimate() of its configuration."""
    doc = run_json("fit", "--model", "mixtral-8x7b", "--gpu", "h100-sxm5", "--gpus", "64", "--batch", "512", "--seq-len", "4096",
                   "--flash-attention", "--search", "--ep", "8", "--zero", "0", "--top", "3")  # fmt: skip
    top = doc["tables"]["top"]
    keys = [c["key"] for c in top["columns"]]
    # memory_basis: JSON's last (tests/test_search_replay.py); no pipeline_layout: none of the rows shown has one (the
    # search proposes Mixtral's 32 layers + E + L on PP 2 x VP 9: every configuration's table carries it)
    assert keys[-3:] == ["ep", "t_ep", "memory_basis"] and "cp" not in keys
    every = [c["key"] for c in doc["tables"]["configurations"]["columns"]]
    assert every[-3:] == ["t_ep", "pipeline_layout", "memory_basis"]
    assert [row["ep"] for row in top["rows"]] == [8, 8, 8]
    assert all(row["t_ep"] > 0 for row in top["rows"])
    assert (top["rows"][0]["tp"], top["rows"][0]["pp"], top["rows"][0]["dp"]) == (1, 4, 16)
    assert any("expert parallelism pinned to ep = 8" in a for a in doc["assumptions"])
    doc = run_json("fit", "--model", "llama3-8b", "--gpu", "h100-sxm5", "--gpus", "64", "--batch", "64", "--seq-len", "8192",
                   "--flash-attention", "--search", "--cp", "2", "--top", "2")  # fmt: skip
    top = doc["tables"]["top"]
    keys = [c["key"] for c in top["columns"]]
    assert [row["cp"] for row in top["rows"]] == [2, 2] and "ep" not in keys
    assert any("pinned to cp = 2" in a for a in doc["assumptions"])
    base = ["fit", "--model", "mixtral-8x7b", "--gpu", "h100-sxm5", "--gpus", "64", "--batch", "512", "--search"]
    assert "--etp: describes one configuration" in run_error([*base, "--etp", "2"])
    assert "ep x etp does not divide" in run_error([*base, "--ep", "3"])
    assert "cp does not divide the GPUs" in run_error([*base, "--cp", "7"])
