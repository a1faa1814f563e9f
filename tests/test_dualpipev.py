"""DualPipeV: the reference's order in the event simulator, against its own figure and bubble formula.

Sources: deepseek-ai/DualPipe @3da1bbe, dualpipe/dualpipev.py (DualPipeV.step, the order ported in
parcalc.core.pipeline_sim.dualpipev_order), images/dualpipev.png ("Example DualPipeV scheduling for
4 PP ranks (8 PP stages) and 10 micro-batches") and README.md's table: bubble (PP/2 - 1)(F&B + B - 3W),
activations PP + 1 chunks per device, over PP = 2p stages on p devices.
"""

from __future__ import annotations

import pytest

from parcalc.core import pipeline_sim as sim
from parcalc.core.bubble_analysis import analyse_bubble
from parcalc.core.choices import Schedule
from parcalc.core.pipeline import bubble_time, in_flight_micro_batches, pass_times, simulate_schedule

# One unit per chunk pass, as the figure draws them: F = B (input gradient) = W = 1, a full backward 2.
# A device holds two chunks, so its times for a micro-batch are t_f = 2, t_b = 4 (of which t_w = 2).
UNIT = pass_times(2.0, 4.0, 2.0)


def _figure_row(order: tuple[sim.Task, ...]) -> list[str]:
    """A device's order as the figure labels it: 0-based micro-batch, full backwards (B then its W) as one cell."""
    cells, skip = [], False
    for i, task in enumerate(order):
        if skip:
            skip = False
            continue
        full = task.op == sim.B and i + 1 < len(order) and order[i + 1].joined and order[i + 1].op == sim.W
        cells.append(f"{'F' if task.op == sim.F else 'B' if full else task.op.lower() if task.op == sim.W else 'b'}"
                     f"{task.chunk}:{task.micro_batch}")
        skip = full
    return cells


def test_device_0_runs_the_figures_order() -> None:
    """images/dualpipev.png, device 0: forwards 0-6 of chunk 0, then chunk 1's 0 with its split backward
    and W, 1, 2 likewise, then 3, chunk 0's 7 and chunk 1's full backward of 3 ("0 1 2 3 4 5 6 0 0 0 1 1 1
    2 2 2 3 7 3")."""
    row = _figure_row(sim.dualpipev_order(4, 10)[0])
    assert row[:19] == ["F0:0", "F0:1", "F0:2", "F0:3", "F0:4", "F0:5", "F0:6", "F1:0", "b1:0", "w1:0", "F1:1", "b1:1", "w1:1",
                        "F1:2", "b1:2", "w1:2", "F1:3", "F0:7", "B1:3"]  # fmt: skip


@pytest.mark.parametrize("p, m", [(4, 10), (2, 4), (3, 9), (8, 16), (8, 20), (16, 32)])
def test_the_simulated_bubble_is_the_readmes_at_unit_times(p: int, m: int) -> None:
    """At F = B = W per chunk every device idles (PP/2 - 1)(F&B + B - 3W) = (p - 1)(3 + 2 - 3) = 2(p - 1) units
    (F&B = F + B: the pair overlaps communication, not compute), and holds PP + 1 = 2p + 1 chunks' activations."""
    timeline = simulate_schedule(Schedule.DUALPIPEV, p, m, UNIT)
    assert timeline.makespan == pytest.approx(m * 6 + 2 * (p - 1))
    assert timeline.idle == pytest.approx((2.0 * (p - 1),) * p)
    assert bubble_time(Schedule.DUALPIPEV, p, m, UNIT).value == pytest.approx(2 * (p - 1))
    assert timeline.peak_in_flight == pytest.approx((p + 0.5,) * p)
    assert in_flight_micro_batches(Schedule.DUALPIPEV, p, m) == p + 0.5


def test_a_lighter_weight_pass_leaves_less_bubble_than_the_closed_form() -> None:
    """The README's -3W counts three W passes filling each gap; with W < F the simulation (the order as run)
    idles less than the formula says, and the command says which it is."""
    times = pass_times(2.0, 4.0, 1.0)  # per chunk F = 1, B = 1.5, W = 0.5
    analysis = analyse_bubble(Schedule.DUALPIPEV, 4, 10, times=times)
    closed = analysis.closed_form("bubble_time").value
    assert closed == pytest.approx(3 * (2 + 2 * 3 - 1) / 2)  # (p - 1)(T_F + 2 T_B - T_W) / 2 = 10.5
    assert analysis.timeline is not None and analysis.timeline.total_idle / 4 == pytest.approx(9.5)
    assert "the simulation is the schedule as run" in analysis.result().verdicts[-1]


def test_the_v_places_two_stages_on_each_device() -> None:
    assert [sim.virtual_stage(c, d, 4, sim.V_SHAPE) for d in range(4) for c in (0, 1)] == [0, 7, 1, 6, 2, 5, 3, 4]
    assert [sim.device_of(q, 4, sim.V_SHAPE) for q in range(8)] == [0, 1, 2, 3, 3, 2, 1, 0]


def test_bubble_command(run_json, run_error) -> None:
    doc = run_json("bubble", "--pp", "4", "--micro-batches", "10", "--schedule", "dualpipev",
                   "--t-forward", "2s", "--t-backward", "4s", "--t-weight", "2s")  # fmt: skip
    assert doc["results"]["bubble_time"]["value"] == pytest.approx(6.0)
    assert doc["results"]["sim_makespan"]["value"] == pytest.approx(66.0)
    assert "8 stages in a V" in doc["title"]
    assert "at least 2p = 8 micro-batches" in run_error(["bubble", "--pp", "4", "--micro-batches", "6", "--schedule", "dualpipev"])
    assert "two chunks a device are its V" in run_error(["bubble", "--pp", "4", "--micro-batches", "8", "--schedule", "dualpipev",
                                                         "--chunks", "2"])  # fmt: skip


def test_comm_volume_crosses_each_boundary_down_and_back_up(run_json) -> None:
    """DualPipeV sends each micro-batch's activations over every device boundary twice (dualpipev.py:
    _send_forward(0) to the next rank, _send_forward(1) to the previous): twice 1F1B's bytes."""
    args = ("comm-volume", "--strategy", "pp", "--model", "llama3-8b", "--pp", "4", "--gpus", "4", "--batch", "32")
    one_f_one_b = run_json(*args)["results"]["pp_p2p_per_boundary"]["value"]
    dualpipev = run_json(*args, "--schedule", "dualpipev")["results"]["pp_p2p_per_boundary"]["value"]
    assert dualpipev == 2 * one_f_one_b == 2 * 32 * 8192 * 4096 * 2  # B x s x h x 2 bytes, both ways


def test_memory_holds_p_plus_a_half_and_refuses_too_few_micro_batches(run_json, run_error) -> None:
    """The README's PP + 1 chunks on every device: p + 1/2 stage micro-batches, no W pending at the peak (the simulation
    of dualpipev.py's order); fewer than 2p micro-batches are refused with the reference's assert."""
    assert "at least 2p = 8 micro-batches" in run_error(["memory", "--model", "llama3-8b", "--pp", "4", "--schedule", "dualpipev"])
    doc = run_json("memory", "--model", "llama3-8b", "--pp", "4", "--schedule", "dualpipev", "--micro-batches", "8", "--per-stage")
    assert doc["results"]["in_flight"]["value"] == pytest.approx(4.5)


def test_a_target_alone_starts_from_2p(run_json) -> None:
    """`--target` without `--micro-batches` probed at m = p, which DualPipeV refuses (found by the session's review);
    at T_F = T_B = T_W the bubble is 2(p - 1) units against 6 m units of work, so a 5 % share needs
    2 x 3 x 0.95 / (0.05 x 6) = 19 micro-batches on p = 4."""
    doc = run_json("bubble", "--pp", "4", "--schedule", "dualpipev", "--target", "5%", "--t-forward", "2s", "--t-backward", "4s",
                   "--t-weight", "2s")  # fmt: skip
    assert doc["results"]["micro_batches_for_target"]["value"] == 19
    assert doc["results"]["bubble_share"]["value"] <= 0.05
