"""`parcalc bubble`: closed forms and simulation through the CLI, timelines as text, JSON, CSV and SVG."""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from parcalc.cli import app

SVG = "{http://www.w3.org/2000/svg}"


# ---------------------------------------------------------------------------------------------
# Numbers


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_seed003_example(run_json, schedule: str) -> None:
    # Seed 003: 4 stages, 16 micro-batches: 3/19 = 15.8 % of total, 3/16 = 18.75 % relative.
    doc = run_json("bubble", "--pp", "4", "--micro-batches", "16", "--schedule", schedule)
    results = doc["results"]
    assert results["bubble_share"]["value"] == pytest.approx(3 / 19, abs=1e-15)
    assert results["bubble_relative"]["value"] == 0.1875
    assert results["bubble_share"]["substituted"] == "(4 - 1) / (16 + 4 - 1)"
    assert "share of total" in results["bubble_share"]["label"]
    assert "relative to ideal" in results["bubble_relative"]["label"]
    # the simulation agrees: each device idles (p - 1)(t_f + t_b) = 9 of a makespan of 19 x 3 = 57
    assert results["sim_makespan"]["value"] == 57
    assert results["sim_bubble_share"]["value"] == pytest.approx(3 / 19, abs=1e-15)
    assert doc["settings"]["schedule"] == schedule


def test_json_carries_timeline_events_and_devices(run_json) -> None:
    doc = run_json("bubble", "--pp", "4", "--micro-batches", "8", "--t-forward", "10ms")
    events = doc["tables"]["timeline"]["rows"]
    assert len(events) == 2 * 4 * 8  # one F and one B per micro-batch per stage
    assert set(events[0]) == {"device", "op", "micro_batch", "chunk", "start", "end"}
    # numbered from 1; the first event is device 1's forward of micro-batch 1, from 0 to t_f
    assert events[0] == {"device": 1, "op": "F", "micro_batch": 1, "chunk": 1, "start": 0, "end": pytest.approx(0.01)}
    assert {e["device"] for e in events} == {1, 2, 3, 4}
    assert max(e["end"] for e in events) == pytest.approx(doc["results"]["sim_makespan"]["value"])
    devices = doc["tables"]["devices"]["rows"]
    # 1F1B in flight: p - s (Narayanan et al. 2021 sec. 2.2); idle (p - 1)(t_f + t_b) = 90 ms
    assert [d["peak_in_flight"] for d in devices] == [4, 3, 2, 1]
    assert [d["peak_in_flight_closed_form"] for d in devices] == [4, 3, 2, 1]
    assert [d["idle"] for d in devices] == pytest.approx([0.09] * 4)


def test_zero_bubble_json_has_w_passes(run_json) -> None:
    doc = run_json("bubble", "--pp", "4", "--micro-batches", "12", "--schedule", "zb-h2")
    ops = [e["op"] for e in doc["tables"]["timeline"]["rows"]]
    assert ops.count("W") == ops.count("F") == ops.count("B") == 4 * 12
    # Qi et al. 2024 Table 2 with T_F = T_B = T_W: ZB-H2 has no bubble per device
    assert doc["results"]["bubble_time"]["value"] == 0
    assert doc["results"]["sim_span_bubble"]["value"] == 0
    assert [d["peak_in_flight"] for d in doc["tables"]["devices"]["rows"]] == [7, 5, 3, 1]  # 2(p - s) - 1


def test_interleaved(run_json) -> None:
    # Narayanan et al. 2021 sec. 2.2.2: (p - 1)/(v m) = 3/16 with p = 4, m = 8, v = 2 (default)
    doc = run_json("bubble", "--pp", "4", "--micro-batches", "8", "--schedule", "interleaved")
    assert doc["inputs"]["chunks"]["value"] == 2
    assert doc["results"]["bubble_relative"]["value"] == 0.1875
    assert {e["chunk"] for e in doc["tables"]["timeline"]["rows"]} == {1, 2}


def test_target(run_json) -> None:
    # (p - 1)(1 - t)/t = 3 x 0.9/0.1 = 27 (share of total); (p - 1)/t = 30 (relative to ideal)
    doc = run_json("bubble", "--pp", "4", "--micro-batches", "16", "--target", "10%")
    assert doc["results"]["micro_batches_for_target"]["value"] == 27
    assert doc["results"]["micro_batches_for_target_relative"]["value"] == 30
    assert any("m = 27" in verdict for verdict in doc["verdicts"])


def test_unbalanced_stages_and_latency(run_json) -> None:
    # p = 2, m = 1, stage forwards 1 ms and 3 ms, backwards twice those, 0.5 ms between stages:
    # F 0-1, F 1.5-4.5, B 4.5-10.5, B 11-13 ms.
    doc = run_json("bubble", "--pp", "2", "--micro-batches", "1", "--t-forward", "1ms",
                   "--stage-times", "1ms,3ms", "--p2p-latency", "0.5ms")  # fmt: skip
    assert doc["results"]["sim_makespan"]["value"] == pytest.approx(13e-3)
    assert doc["settings"]["stage_times"] == [0.001, 0.003]
    assert any("unbalanced" in v for v in doc["verdicts"])


# ---------------------------------------------------------------------------------------------
# Pictures


def test_timeline_text_8_stages_32_micro_batches_is_legible(runner) -> None:
    result = runner.invoke(app, ["bubble", "--pp", "8", "--micro-batches", "32", "--timeline"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "\x1b[" not in out  # plain characters when colour is off
    picture = out[out.index("Timeline of 1F1B"):]
    assert all(len(line) <= 120 for line in picture.splitlines())  # wrapped to COLUMNS = 120
    rows = [line for line in picture.splitlines() if line.startswith("Device ")]
    assert len(rows) % 8 == 0 and len(rows) > 8  # several bands of 8 devices
    for device in range(1, 9):
        text = " ".join(line.split(None, 2)[2] for line in rows if line.startswith(f"Device {device} "))
        # every micro-batch's forward and backward is there, with its number
        assert sorted(int(n) for n in re.findall(r"F(\d+)", text)) == list(range(1, 33))
        assert sorted(int(n) for n in re.findall(r"B(\d+)", text)) == list(range(1, 33))
    assert "." in rows[-1]  # idle time visible
    assert "Devices (in flight" in out  # the result is shown above the picture
    assert '"op"' not in out and "micro-batch  chunk" not in out  # the event table is not


def test_timeline_text_shows_w_and_chunks(runner) -> None:
    zb = runner.invoke(app, ["bubble", "--pp", "2", "--micro-batches", "4", "--schedule", "zb-h1", "--timeline"])
    assert zb.exit_code == 0 and "W1" in zb.stdout and "weight gradient" in zb.stdout
    interleaved = runner.invoke(app, ["bubble", "--pp", "2", "--micro-batches", "4", "--schedule", "interleaved", "--timeline"])
    assert interleaved.exit_code == 0 and "F1.2" in interleaved.stdout


def test_timeline_in_colour() -> None:
    from rich.console import Console

    from parcalc.core.bubble_analysis import analyse_bubble
    from parcalc.core.pipeline import Schedule
    from parcalc.render.timeline_text import print_timeline

    console = Console(file=io.StringIO(), force_terminal=True, color_system="256", width=100, record=True)
    print_timeline(analyse_bubble(Schedule.ONE_F_ONE_B, 4, 8).timeline, console, "t")
    styled = console.export_text(styles=True, clear=False)
    text = console.export_text()
    assert "\x1b[" in styled and "Device 4" in text and "F1" not in text  # colour replaces the letters
    assert all(len(line) <= 100 for line in text.splitlines())


def test_svg_output(runner, tmp_path: Path) -> None:
    target = tmp_path / "timeline.svg"
    result = runner.invoke(app, ["bubble", "--pp", "4", "--micro-batches", "8", "--schedule", "zb-h1", "-o", str(target)])
    assert result.exit_code == 0, result.output
    assert result.stderr.strip() == f"wrote {target}"
    assert result.stdout == ""  # only the line memory -o FILE.svg prints, not the whole result (issue 28)
    root = ET.parse(target).getroot()  # well-formed XML
    assert root.tag == f"{SVG}svg"
    boxes = [r for r in root.iter(f"{SVG}rect") if r.find(f"{SVG}title") is not None]
    assert len(boxes) == 3 * 4 * 8  # F, B and W of every micro-batch on every stage
    labels = {t.text for t in root.iter(f"{SVG}text")}
    assert {"Device 1", "Device 4"} <= labels
    assert not list(tmp_path.glob(".*part"))  # written atomically, no leftovers


def test_text_file_with_timeline(runner, tmp_path: Path) -> None:
    target = tmp_path / "bubble.txt"
    result = runner.invoke(app, ["bubble", "--pp", "2", "--micro-batches", "3", "--timeline", "-o", str(target)])
    assert result.exit_code == 0, result.output
    text = target.read_text()
    assert "Bubble as a share of total time" in text and "Device 2" in text and "B3" in text


def test_csv_is_the_device_table_and_table_timeline_the_events(runner) -> None:
    """CSV holds one table: the devices by default (issue #15: the events were the first table), said
    on stderr; --table timeline gives the p x m x 2 passes (3 x 2 x 2 = 12 rows), headers the JSON keys."""
    result = runner.invoke(app, ["bubble", "--pp", "3", "--micro-batches", "2", "--format", "csv"])
    assert result.exit_code == 0, result.output
    rows = list(csv.reader(io.StringIO(result.stdout)))
    assert rows[0][0] == "device" and len(rows) == 1 + 3
    assert result.stderr == "csv: printed table 'devices'; the others: timeline, results (--table NAME picks one)\n"
    events = runner.invoke(app, ["bubble", "--pp", "3", "--micro-batches", "2", "--format", "csv", "--table", "timeline"])
    rows = list(csv.reader(io.StringIO(events.stdout)))
    assert rows[0] == ["device", "op", "micro_batch", "chunk", "start", "end"]
    assert len(rows) == 1 + 2 * 3 * 2


def test_markdown_leaves_out_the_events(runner) -> None:
    result = runner.invoke(app, ["bubble", "--pp", "3", "--micro-batches", "2", "--format", "markdown"])
    assert result.exit_code == 0
    assert "### Devices" in result.stdout and "### Timeline" not in result.stdout


def test_worksheet_keeps_the_timeline_for_the_report() -> None:
    # A worksheet runs the command in-process; the report draws its TikZ figure from the table.
    from parcalc.render.report import timeline_figure
    from parcalc.worksheet import Calculation, run_calculation

    result = run_calculation(Calculation("bubble", {"pp": 4, "micro-batches": 8, "schedule": "zb-h1", "timeline": True}))
    assert any(t.key == "timeline" for t in result.tables)
    figure = timeline_figure([result])
    assert figure is not None and len(figure["boxes"]) == 3 * 4 * 8
    assert figure["devices"] == [1, 2, 3, 4]
    assert {b["op"] for b in figure["boxes"]} == {"F", "B", "W"}


# ---------------------------------------------------------------------------------------------
# Bad input


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        pytest.param(["--pp", "0", "--micro-batches", "4"], "--pp", id="p-zero"),
        pytest.param(["--pp", "-2", "--micro-batches", "4"], "--pp", id="p-negative"),
        pytest.param(["--pp", "4", "--micro-batches", "0"], "--micro-batches", id="m-zero"),
        pytest.param(["--pp", "2.5", "--micro-batches", "4"], "whole number", id="p-fraction"),
        pytest.param(["--pp", "4", "--micro-batches", "6", "--schedule", "interleaved"], "multiple of p", id="interleaved-m"),
        pytest.param(["--pp", "4", "--micro-batches", "8", "--schedule", "interleaved", "--chunks", "0"], "--chunks", id="v-zero"),
        pytest.param(["--pp", "4", "--micro-batches", "8", "--chunks", "2"], "only the interleaved", id="chunks-1f1b"),
        pytest.param(["--pp", "4", "--micro-batches", "8", "--t-forward", "-1ms"], "--t-forward", id="negative-forward"),
        pytest.param(["--pp", "4", "--micro-batches", "8", "--t-backward", "-3ms"], "--t-backward", id="negative-backward"),
        pytest.param(["--pp", "4", "--micro-batches", "8", "--t-weight", "-1ms"], "--t-weight", id="negative-weight"),
        pytest.param(["--pp", "4", "--micro-batches", "8", "--t-weight", "3s"], "cannot exceed", id="weight-over-backward"),
        pytest.param(["--pp", "4", "--micro-batches", "8", "--p2p-latency", "-1us"], "--p2p-latency", id="negative-latency"),
        pytest.param(["--pp", "4", "--micro-batches", "8", "--stage-times", "1ms,2ms"], "one forward time per stage", id="stage-times-count"),
        pytest.param(["--pp", "2", "--micro-batches", "8", "--stage-times", "1ms,-2ms"], "--stage-times", id="stage-times-negative"),
        pytest.param(["--pp", "4", "--micro-batches", "8", "--target", "150%"], "--target", id="target-over-100"),
        pytest.param(["--pp", "4", "--micro-batches", "8", "--schedule", "pipedream"], "--schedule", id="unknown-schedule"),
        pytest.param(["--pp", "4", "--micro-batches", "8", "-o", "timeline.png"], ".svg", id="unknown-extension"),
        pytest.param(["--micro-batches", "8"], "--pp", id="missing-stages"),
    ],
)
def test_bad_input(run_error, args: list[str], fragment: str) -> None:
    line = run_error(["bubble", *args])
    assert fragment in line


def test_interleaved_error_explains_the_constraint(run_error) -> None:
    line = run_error(["bubble", "--pp", "4", "--micro-batches", "6", "--schedule", "interleaved"])
    assert "try 4 or 8" in line and "Megatron-LM" in line


def test_bad_svg_path_writes_nothing(run_error, tmp_path: Path) -> None:
    run_error(["bubble", "--pp", "2", "--micro-batches", "2", "-o", str(tmp_path / "missing" / "t.svg")])
    assert not (tmp_path / "missing").exists()


def test_help_has_examples(runner) -> None:
    result = runner.invoke(app, ["bubble", "--help"])
    assert result.exit_code == 0
    assert "Examples:" in result.stdout and "--stage-times" in result.stdout and "zb-h1" in result.stdout
