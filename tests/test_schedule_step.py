"""Pipeline schedules in the step-time model (issue #31): fit's bubble from the event simulation of the schedules that
split the backward, the closed form where it equals the simulation, DualPipeV's overlapped pairs, memory per schedule.

Sources: Narayanan et al. 2021 sec. 2.2 ((p - 1)/(v m) for 1F1B and interleaved); Qi et al. 2024 (ICLR), sec. 2.3 and
Table 2 (ZB-H1's (p - 1)(T_F + T_B - T_W)) and Table 1 (M_W = 32 sbh of M_B = 34 sbh + 5 a s^2 b); deepseek-ai/DualPipe
@3da1bbe dualpipev.py (the order, its m >= 2p assert, the overlapped F & B pairs); sail-sg/zero-bubble-pipeline-parallelism
@39f2c186 zbv.py (ZB-V's heuristic) and zbpp_utils.py (a V needs an even number of layers per stage).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parcalc.core import pipeline, pipeline_step
from parcalc.core import pipeline_sim as sim
from parcalc.core.choices import Recompute, Schedule
from parcalc.core.layout import Layout
from parcalc.core.memory import memory_breakdown
from parcalc.core.pipeline import PassTimes, simulate_schedule
from parcalc.core.pipeline_step import paired_passes, step_bubble
from parcalc.core.training_setup import TrainingSetup
from parcalc.presets import load_model

FIT = ("fit", "--model", "llama3-8b", "--gpus", "32", "--gpu", "h100-sxm5", "--tp", "4", "--pp", "4", "--dp", "2", "--batch", "64",
       "--seq-len", "4096")  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 8), st.integers(1, 4), st.integers(1, 4), st.floats(0.1, 5.0), st.floats(0.1, 5.0))
def test_the_simulation_reproduces_the_closed_form_of_1f1b_and_interleaved(p: int, k: int, v: int, f: float, b: float) -> None:
    """combine's (p - 1)/(v m) x m (F + B) for equal stages is the simulated idle time of Megatron-LM's order: the closed
    form stays where it equals the simulation (Narayanan et al. 2021 sec. 2.2.1, 2.2.2)."""
    m = k * p
    for schedule, chunks in ((Schedule.ONE_F_ONE_B, 1), (Schedule.INTERLEAVED, v)):
        timeline = simulate_schedule(schedule, p, m, PassTimes(f, b, 0.0), chunks=chunks)
        closed = (p - 1) / (chunks * m) * m * (f + b)
        assert timeline.makespan - m * (f + b) == pytest.approx(closed, rel=1e-9)


@pytest.mark.parametrize("p, m", [(4, 8), (8, 32), (16, 64)])
def test_zb_h1_step_bubble_is_qis_closed_form_when_w_is_the_smallest(p: int, m: int) -> None:
    """Qi et al. 2024 Table 2: (p - 1)(T_F + T_B - T_W) when T_W <= T_F, T_B and m >= p."""
    f, b, w = 0.30, 0.35, 0.25
    assert step_bubble(Schedule.ZB_H1, p, m, f, b, w) == pytest.approx((p - 1) * (f + b - w))


def test_a_split_backward_schedule_idles_less_than_1f1b(run_json) -> None:
    """Llama 3 8B, TP 4 x PP 4 x DP 2, 32 micro-batches of 1 on 32 H100: the same compute, less bubble. ZB-H1's idle time is
    the simulated order's with the stage's F, B and W (its weight-gradient GEMMs), each micro-batch's exposed TP split
    evenly between F and B; ZB-H2 and ZB-V idle less still (their W passes fill more of the gaps)."""
    docs = {s: run_json(*FIT, "--schedule", s)["results"] for s in ("1f1b", "zb-h1", "zb-h2", "zb-v", "dualpipev")}
    compute = docs["1f1b"]["t_compute"]["value"]
    assert all(docs[s]["t_compute"]["value"] == pytest.approx(compute) for s in ("zb-h1", "zb-h2"))
    # a V's rank 0 runs the first virtual stage and the last: the embedding's lookup beside the head and loss paces it
    # (parcalc.core.memory.head_stage; 1.1131 -> 1.1146 s here), where 1F1B's last stage holds the head alone
    v_compute = docs["zb-v"]["t_compute"]["value"]
    assert v_compute == docs["dualpipev"]["t_compute"]["value"] and 0 < v_compute - compute < 0.005 * compute
    bubble = {s: d["t_bubble"]["value"] for s, d in docs.items()}
    assert bubble["zb-h1"] < bubble["1f1b"] and bubble["zb-h2"] < bubble["zb-h1"] and bubble["zb-v"] < bubble["zb-h2"]
    # the derivation's inputs reproduce the value through the simulation
    inputs = {key: term["value"] for key, term in docs["zb-h1"]["t_bubble"]["inputs"].items()}
    f, b, w, c = inputs["F"], inputs["B"], inputs["W"], inputs["c"]
    assert 0 < w < b
    assert bubble["zb-h1"] == pytest.approx(step_bubble(Schedule.ZB_H1, 4, 32, f + c / 2, b + c / 2, w))
    assert bubble["zb-h1"] == pytest.approx(3 * (f + b - w + c))  # W is the smallest pass here: Qi's closed form
    # 1F1B's stays the closed form, (p - 1)/m of the stage's work
    assert bubble["1f1b"] == pytest.approx(3 / 32 * (compute + docs["1f1b"]["t_tp"]["value"]))
    # a V sends down and back up: 4 m sends; DualPipeV's overlapped pairs send theirs under the pair's compute
    t_pp = {s: d["t_pp"]["value"] for s, d in docs.items()}
    assert t_pp["zb-v"] == pytest.approx(2 * t_pp["1f1b"])
    pairs = paired_passes(Schedule.DUALPIPEV, 4, 32)
    assert pairs == 2 * 32 - 3 * 4 + 1
    assert t_pp["dualpipev"] == pytest.approx(t_pp["zb-v"] * (4 * 32 - 2 * pairs) / (4 * 32))


def test_dualpipev_pairs_hide_the_expert_exchanges(run_json) -> None:
    """Mixtral 8x7B on 64 H100, EP 8 over the NCCL all-to-all, --ep-overlap none: under DualPipeV each overlapped F & B pair
    hides one chunk's dispatch and combine under the other's compute (DeepSeek-V3 sec. 3.2.1), whatever --ep-overlap says:
    t_ep = (m - P/2) A + (P/2) E, P = 2m - 3p + 1 pairs on device 0; under 1F1B without overlap every exchange is exposed."""
    args = ("fit", "--model", "mixtral-8x7b", "--gpus", "64", "--gpu", "h100-sxm5", "--tp", "2", "--pp", "4", "--dp", "8", "--ep", "8",
            "--batch", "128", "--seq-len", "4096")  # fmt: skip
    plain = run_json(*args)["results"]["t_ep"]
    paired = run_json(*args, "--schedule", "dualpipev")["results"]["t_ep"]
    m = 128 // 8
    terms = {key: term["value"] for key, term in paired["inputs"].items()}
    p_pairs = 2 * m - 3 * 4 + 1
    assert terms["u"] == pytest.approx(m - p_pairs / 2)
    assert paired["value"] == pytest.approx(terms["u"] * terms["A"] + (m - terms["u"]) * terms["E"])
    assert terms["E"] < terms["A"]
    assert paired["value"] < plain["value"] == pytest.approx(m * terms["A"])


@pytest.mark.parametrize("schedule", [Schedule.ZB_H1, Schedule.ZB_V, Schedule.DUALPIPEV])
def test_step_bubble_with_fewer_simulated_micro_batches_is_the_full_simulation(monkeypatch, schedule: Schedule) -> None:
    """Beyond MAX_STEP_OPERATIONS the step simulates fewer micro-batches: the steady phase adds no idle time."""
    full = step_bubble(schedule, 4, 40, 0.3, 0.35, 0.2)
    step_bubble.cache_clear()
    monkeypatch.setattr(pipeline_step, "MAX_STEP_OPERATIONS", pipeline.operation_count(schedule, 4, 1) * 12)
    assert pipeline_step.step_micro_batches(schedule, 4, 40) == 12
    assert step_bubble(schedule, 4, 40, 0.3, 0.35, 0.2) == pytest.approx(full)
    step_bubble.cache_clear()


def test_zb_v_keeps_1f1bs_activations_and_idles_no_more_than_its_span() -> None:
    """ZB-V (zbv.py): at T_F = T_B = T_W every device holds at most p micro-batches (2p chunks, the reference's memory
    limit) and, from its own first F to its own last W, does not idle (Qi et al.: zero bubble)."""
    for p, m in ((4, 8), (8, 24)):
        timeline = simulate_schedule(Schedule.ZB_V, p, m, PassTimes(1.0, 2.0, 1.0))
        assert max(timeline.peak_in_flight) == p
        assert timeline.span_bubble == pytest.approx(0.0)
        order = sim.zbv_order(p, m)
        assert all(len(row) == 6 * m for row in order)


def _in_flight(schedule: Schedule, flash: bool = True) -> list[float]:
    model = load_model("llama3-8b")
    setup = TrainingSetup(1, 8192, flash_attention=flash, micro_batches=16)
    return [s.in_flight.value for s in memory_breakdown(model, Layout(pp=4, schedule=schedule), setup).stages]


def test_memory_counts_the_w_pending_micro_batches_at_32_of_34() -> None:
    """ZB-H1 on p = 4 with FlashAttention: stage i holds p - i micro-batches for B and i waiting for W, each of those at
    M_W / M_B = 32/34 (Qi et al. 2024 Table 1; sec. 2.3: (p - i + 1) M_B + (i - 1) M_W on worker i); without it the
    scores count in M_B: 32 h / (34 h + 5 a s) = 32 x 4096 / (34 x 4096 + 5 x 32 x 8192)."""
    assert _in_flight(Schedule.ZB_H1) == pytest.approx([4 - i + 32 / 34 * i for i in range(4)])
    share = 32 * 4096 / (34 * 4096 + 5 * 32 * 8192)
    assert _in_flight(Schedule.ZB_H1, flash=False) == pytest.approx([4 - i + share * i for i in range(4)])


def test_memory_of_zb_h2_and_dualpipev() -> None:
    """ZB-H2: 2(p - i) - 1 for B and 2i for W (Qi et al. sec. 2.3); DualPipeV: p + 1/2 on every device (the README's PP + 1
    chunks over PP = 2p stages); 1F1B's p - i for comparison."""
    assert _in_flight(Schedule.ZB_H2) == pytest.approx([2 * (4 - i) - 1 + 32 / 34 * 2 * i for i in range(4)])
    assert _in_flight(Schedule.DUALPIPEV) == pytest.approx([4.5] * 4)
    assert _in_flight(Schedule.ONE_F_ONE_B) == [4, 3, 2, 1]


@pytest.mark.parametrize("args, message", [
    (("--schedule", "zb-v", "--pp", "32", "--tp", "1", "--dp", "1", "--model", "gpt3-175b"), "2p = 64 must divide the 96 layers"),
    (("--schedule", "dualpipev", "--batch", "4"), "DualPipeV needs at least 2p = 8 micro-batches"),
    (("--schedule", "zb-v", "--chunks", "2"), "ZB-V's two chunks a GPU are its V"),
    (("--schedule", "gpipe",), "--schedule: 1f1b, interleaved, zb-h1, zb-h2, dualpipev, zb-v or dualpipe, got 'gpipe'"),
    (("--schedule", "dualpipev", "--first-stage-layers", "11"), "DualPipeV's V without a layout splits the layers evenly over 2p chunks"),
])  # fmt: skip
def test_a_schedule_the_layout_cannot_run_is_one_line(run_error, args: tuple[str, ...], message: str) -> None:
    base = dict(zip(FIT[1::2], FIT[2::2], strict=True))
    given = dict(zip(args[::2], args[1::2], strict=True))
    line = run_error(["fit", *[x for k, v in {**base, **given}.items() for x in (k, v)]])
    assert message in line


@pytest.mark.parametrize("p, m", [(4, 8), (8, 16), (8, 20), (16, 32)])
def test_dualpipe_runs_the_readmes_bubble_and_activations(p: int, m: int) -> None:
    """deepseek-ai/DualPipe README @3da1bbe: DualPipe's bubble (PP/2 - 1)(F&B + B - 3W) over PP = p stages and PP + 1
    activations a device. At F = B = W = 1 per stage (a full backward 2, F&B = F + B = 3) that is 2(p/2 - 1) units, and
    the simulation of dualpipe.py's order idles exactly that on every device, holding p + 1 micro-batches of a stage."""
    timeline = simulate_schedule(Schedule.DUALPIPE, p, m, PassTimes(1.0, 2.0, 1.0))
    assert timeline.idle == pytest.approx((2.0 * (p / 2 - 1),) * p)
    assert timeline.makespan == pytest.approx(3 * m + 2 * (p / 2 - 1))
    assert timeline.peak_in_flight == pytest.approx((p + 1.0,) * p)
    assert pipeline.bubble_time(Schedule.DUALPIPE, p, m, PassTimes(1.0, 2.0, 1.0)).value == pytest.approx(2 * (p / 2 - 1))
    # device d holds stage d of the way down and stage p - 1 - d of the way up
    order = sim.dualpipe_order(p, m)
    assert {(t.chunk, t.micro_batch < m // 2) for t in order[0]} == {(0, True), (1, False)}


def test_dualpipe_holds_both_stages_parameters_and_their_states(run_json) -> None:
    """DeepSeek-V3 sec. 3.2.1 ('two copies of the model parameters'); the README's 2x; example_dualpipe.py keeps and sums both
    copies' gradients. Llama 3 8B on PP 4: device 1 holds stage 1 (embedding + 8 layers) and stage 4 (8 layers + head);
    the optimizer steps both copies' states (2x 1F1B's time on the fullest device, whose stages mirror each other)."""
    base = ("memory", "--model", "llama3-8b", "--pp", "4", "--micro-batches", "8", "--per-stage")
    plain, dual = run_json(*base), run_json(*base, "--schedule", "dualpipe")
    firsts = plain["results"]["stage_parameters"]["value"]
    assert firsts == 8 * 218_112_000 + 128_256 * 4096  # 8 layers of Llama 3 8B and the embedding
    assert dual["results"]["stage_parameters"]["value"] == 2 * 8 * 218_112_000 + 2 * 128_256 * 4096 + 4096  # and the head, final norm
    assert dual["results"]["in_flight"]["value"] == 5  # p + 1
    fit = {s: run_json(*FIT, "--schedule", s)["results"] for s in ("1f1b", "dualpipe")}
    assert fit["dualpipe"]["t_optimizer"]["value"] == pytest.approx(2 * fit["1f1b"]["t_optimizer"]["value"], rel=1e-3)
    pairs = paired_passes(Schedule.DUALPIPE, 4, 32)
    send = fit["1f1b"]["t_pp"]["value"] / (2 * 32)
    assert fit["dualpipe"]["t_pp"]["value"] == pytest.approx((2 * 32 - 2 * pairs) * send)


@pytest.mark.parametrize("args, message", [
    (("--schedule", "dualpipe", "--pp", "2", "--tp", "4", "--dp", "4", "--batch", "36"), "DualPipe needs p even and an even m of at least 2p"),
    (("--schedule", "dualpipe", "--last-stage-layers", "5"), "parcalc times DualPipe's p equal stages, run both ways"),
])  # fmt: skip
def test_dualpipe_rules_are_one_line(run_error, args: tuple[str, ...], message: str) -> None:
    base = dict(zip(FIT[1::2], FIT[2::2], strict=True))
    given = dict(zip(args[::2], args[1::2], strict=True))
    assert message in run_error(["fit", *[x for k, v in {**base, **given}.items() for x in (k, v)]])


@pytest.mark.parametrize("model_key, schedule, gpus", [
    ("llama3-8b", Schedule.ZB_H1, 32), ("llama3-8b", Schedule.ZB_H2, 16),
    pytest.param("llama3-70b", Schedule.ZB_V, 64, marks=pytest.mark.slow), pytest.param("mixtral-8x7b", Schedule.DUALPIPEV, 64, marks=pytest.mark.slow),
])  # fmt: skip
def test_the_search_with_a_schedule_agrees_with_the_estimate(model_key: str, schedule: Schedule, gpus: int) -> None:
    """fit --search --schedule X: every pipelined layout runs X; the vectorised rows (memory with X's in-flight count, the
    simulated bubble, DualPipeV's pairs) are the scalar estimate's (the search's own agreement test, tests/test_fit_search.py)."""
    import math
    import random

    import numpy as np

    from parcalc.core.fit import Cluster, Training, estimate, invalid_reason
    from parcalc.core.fit_search import COST_FIELDS, SearchSpace, search
    from parcalc.presets import load_gpu, load_link

    h100 = load_gpu("h100-sxm5", ())
    cluster = Cluster(gpus=gpus, gpus_per_node=8, peak=989e12, capacity=h100.memory_capacity.value, intra=load_link("nvlink4", ()),
                      inter=load_link("ib-ndr", ()), gpu=h100)  # fmt: skip
    model = load_model(model_key, ())
    training = Training(128, 4096, flash_attention=True)
    found = search(model, training, cluster, SearchSpace(schedule=schedule, zero_stages=(0, 1), recomputes=(Recompute.NONE, Recompute.FULL)))
    c = found.evaluated.columns
    piped = np.flatnonzero(c["pp"] > 1).tolist()
    assert piped and all(c["schedule"][i] for i in piped)
    rng = random.Random(f"{model_key}-{schedule.value}")
    fitting = [i for i in piped if c["fits"][i]]
    for i in rng.sample(piped, min(12, len(piped))) + rng.sample(fitting, min(8, len(fitting))):
        config = found.evaluated.config(i)
        assert config.layout.schedule is schedule
        assert invalid_reason(model, config, training, cluster) is None
        scalar = estimate(model, config, training, cluster)
        expected = {"memory": scalar.total_memory, "fits": scalar.fits, "t_compute": scalar.compute.value, "t_tp": scalar.tp_comm.value,
                    "t_bubble": scalar.bubble.value, "t_pp": scalar.pp_comm.value, "t_dp": scalar.dp_comm.value,
                    "t_optimizer": scalar.optimizer.value, "t_step": scalar.step.value, "tokens_per_second": scalar.tokens_per_second.value,
                    "mfu": scalar.mfu.value, "hfu": scalar.hfu.value}  # fmt: skip
        assert set(expected) == set(COST_FIELDS)
        for key, value in expected.items():
            if c["fits"][i] or key in ("memory", "fits"):
                assert c[key][i] == pytest.approx(value, rel=1e-9, abs=1e-15), (config.label(), key)
            else:
                assert math.isnan(c[key][i])


def test_search_schedule_errors(run_error) -> None:
    base = ["fit", "--model", "llama3-8b", "--gpus", "32", "--gpu", "h100-sxm5", "--batch", "64", "--search"]
    assert "dualpipe describes one configuration" in run_error([*base, "--schedule", "dualpipe"])
    assert "the search tries 1F1B and interleaved itself" in run_error([*base, "--schedule", "interleaved"])
    assert "--chunks: describes one configuration" in run_error([*base, "--chunks", "2"])


def test_comm_volume_sends_half_the_micro_batches_each_way_under_dualpipe(run_json) -> None:
    """dualpipe.py: the second pipeline enters at the last rank, so each boundary carries m/2 activations down and m/2 up
    (and their gradients back): the same bytes as 1F1B's m down, split over both directions; a V carries m each way."""
    base = ("comm-volume", "--model", "llama3-8b", "--tp", "1", "--pp", "4", "--dp", "1", "--strategy", "3d", "--batch", "8")

    def sends(schedule: str) -> dict[str, float]:
        rows = run_json(*base, "--schedule", schedule)["tables"]["collectives"]["rows"]
        out: dict[str, float] = {}
        for row in rows:
            if row["dimension"] == "pp":
                out[row["direction"]] = out.get(row["direction"], 0.0) + row["payload"]
        return out

    plain, dual, v = sends("1f1b"), sends("dualpipe"), sends("dualpipev")
    activation = 4096 * 8192 * 2 * 8  # b s h x 2 bytes, 8 micro-batches of one sequence of 8192 tokens, per boundary
    assert plain == {"i → i+1": activation, "i+1 → i": activation}
    assert dual == {"i → i+1": activation, "i+1 → i": activation}  # half the activations down plus half the gradients of those up
    assert v == {"i → i+1": 2 * activation, "i+1 → i": 2 * activation}


def test_a_layout_string_with_a_split_schedule_is_one_line(run_error) -> None:
    """--pipeline-layout places virtual stage i on GPU i mod p (Megatron-LM): several chunks a GPU run the interleaved
    schedule; a V places exactly two a GPU (torchtitan's _get_pp_rank_to_stage_indices_mapping asserts stages_per_rank == 2:
    this layout's 32 stages on pp 8 are four)."""
    base = ["fit", "--model", "deepseek-v3", "--gpus", "1024", "--gpu", "h100-sxm5", "--tp", "2", "--pp", "8", "--ep", "64", "--batch", "1024",
            "--pipeline-layout", "Et*3|(tt|)*29m|L"]  # fmt: skip
    assert "4 chunks per GPU run the interleaved schedule, not --schedule zb-h1" in run_error([*base, "--schedule", "zb-h1"])
    assert "32 virtual stages over --pp 8; a V schedule runs exactly two a rank" in run_error([*base, "--schedule", "dualpipev"])
    assert "--pp: DualPipe needs p even" in run_error(["bubble", "--pp", "3", "--micro-batches", "8", "--schedule", "dualpipe"])


def test_dualpipe_stage_table_names_each_gpus_second_stage(run_json) -> None:
    """DualPipe puts stages d and p - 1 - d on GPU d (deepseek-ai/DualPipe README; core/memory.py dualpipe_parameters): the
    table's parameters are both stages' (Mixtral 8x7B, TP 2, EP 8 (ETP 2): 2 x 8 layers x 109,092,864 = 1,745,485,824 on
    the middle GPUs, plus the 32,000 x 4,096 / 2 embedding and LM head shards and the final norm's 4,096 on the end
    GPUs), and it says which."""
    doc = run_json("fit", "--model", "mixtral-8x7b", "--gpus", "64", "--gpu", "h100-sxm5", "--tp", "2", "--pp", "4", "--dp", "8",
                   "--ep", "8", "--micro-batch", "1", "--batch", "256", "--schedule", "dualpipe")  # fmt: skip
    rows = doc["tables"]["stages"]["rows"]
    assert [r["also"] for r in rows] == ["stage 4, embedding, LM head", "stage 3", "stage 2", "stage 1, embedding, LM head"]
    ends = 1_745_485_824 + 2 * 32_000 * 4_096 // 2 + 4_096
    assert [r["parameters"] for r in rows] == [ends, 1_745_485_824, 1_745_485_824, ends] == [1_876_561_920, 1_745_485_824, 1_745_485_824, 1_876_561_920]


def test_deepseek_v3_dualpipev_on_pp16_with_its_layout(run_json) -> None:
    """DualPipeV's reference (deepseek-ai/DualPipe dualpipev.py) takes any two modules a GPU, and torchtitan places 2p stages
    in a V (_get_pp_rank_to_stage_indices_mapping): DeepSeek-V3's 61 layers as 'Et|(tt|)*30mL' on pp 16 run, GPU 0 holding
    one layer (with the embedding, MTP layer and loss), GPUs 1-15 four, by hand (tests/test_pipeline_layout.py)."""
    doc = run_json("fit", "--model", "deepseek-v3", "--gpus", "1024", "--gpu", "h100-sxm5", "--tp", "1", "--pp", "16", "--dp", "64",
                   "--ep", "64", "--etp", "1", "--batch", "8192", "--seq-len", "4096", "--zero", "1", "--recompute", "full",
                   "--schedule", "dualpipev", "--pipeline-layout", "Et|(tt|)*30mL")  # fmt: skip
    rows = doc["tables"]["stages"]["rows"]
    assert [row["layers"] for row in rows] == [1] + [4] * 15
    assert rows[0]["also"] == "embedding, LM head" and not any(row["also"] for row in rows[1:])
