"""`parcalc comm-volume`: collectives and strategies through the CLI, output formats and bad input."""

from __future__ import annotations

import json

import pytest

from parcalc.cli import app
from parcalc.core.collectives import Algorithm

SEED004 = ["--model", "homework-7b", "--batch", "128", "--seq-len", "4096", "--dtype", "fp16", "--gpus", "8"]


# ---------------------------------------------------------------------------------------------
# --collective


def test_ring_all_reduce_seed003_example(run_json) -> None:
    # Seed 003 sec. 11: P = 1 GB on 4 GPUs -> 2 P (N-1)/N = 1.5 GB sent per device.
    # Time at 25 GB/s, 5 us: 2 x 3 x (5e-6 + 1e9 / (4 x 25e9)) = 6 x 0.010005 = 0.06003 s.
    doc = run_json("comm-volume", "--collective", "all-reduce", "--size", "1GB", "--gpus", "4",
                   "--bandwidth", "25GB/s", "--latency", "5us")  # fmt: skip
    results = doc["results"]
    assert results["sent_per_worker"]["value"] == 1_500_000_000
    assert results["total_bytes"]["value"] == 6_000_000_000
    assert results["steps"]["value"] == 6
    assert results["time"]["value"] == pytest.approx(0.06003, rel=1e-12)
    # nccl-tests: algbw = S / t; busbw = algbw x 2 (n-1)/n = (1e9 / 0.06003) x 1.5
    assert results["busbw"]["value"] == pytest.approx(1e9 / 0.06003 * 1.5, rel=1e-12)
    assert results["ring_time_patarasuk_yuan"]["value"] == pytest.approx(0.06003, rel=1e-12)
    assert doc["settings"] == {"collective": "all-reduce", "algorithm": "ring", "link": "given"}


def test_elements_and_dtype_make_the_message(run_json) -> None:
    # 25M fp32 elements = 100,000,000 bytes; seed 002's X and itsize appear in its time formula.
    doc = run_json("comm-volume", "--collective", "all-reduce", "--elements", "25M", "--dtype", "fp32", "--gpus", "4",
                   "--bandwidth", "25GB/s", "--latency", "5us")  # fmt: skip
    assert doc["inputs"]["message_bytes"]["value"] == 100_000_000
    ring = doc["results"]["ring_time_patarasuk_yuan"]
    assert ring["inputs"]["x"]["value"] == 25_000_000 and ring["inputs"]["s"]["value"] == 4
    assert ring["value"] == pytest.approx(6 * (5e-6 + 1e8 / 1e11), rel=1e-12)


def test_compare_prints_every_algorithm_beside_the_slide(run_json, runner) -> None:
    doc = run_json("comm-volume", "--collective", "all-reduce", "--size", "1GB", "--gpus", "8", "--link", "nvlink3", "--compare")
    rows = {r["algorithm"]: r for r in doc["tables"]["algorithms"]["rows"]}
    assert list(rows) == [a.value for a in Algorithm][:7]
    # Ring: exact 2(N-1)M = 14 GB beside seed 001's 2NM = 16 GB; naive N(N-1)M = 56 GB beside N^2 M = 64 GB.
    assert (rows["ring"]["total"], rows["ring"]["slide_total"], rows["ring"]["slide_formula"]) == (14e9, 16e9, "2 × N × M")
    assert (rows["naive"]["total"], rows["naive"]["slide_total"]) == (56e9, 64e9)
    assert rows["parameter-server"]["total"] == 16e9
    text = runner.invoke(app, ["comm-volume", "--collective", "all-reduce", "--size", "1GB", "--gpus", "8", "--compare"])
    assert text.exit_code == 0
    assert "approximation" in text.stdout and "approximate total" in text.stdout and "double-binary-tree" in text.stdout
    assert "seed 001" not in text.stdout and "(slide)" not in text.stdout


@pytest.mark.parametrize(
    ("collective", "sent"),
    [
        # (n-1)/n x 512 MiB on 16 ranks: 15/16 x 536,870,912 = 503,316,480 B
        pytest.param("all-gather", 503_316_480, id="all-gather"),
        pytest.param("reduce-scatter", 503_316_480, id="reduce-scatter"),
        pytest.param("all-to-all", 503_316_480, id="all-to-all"),
        # a chain: every rank but the last forwards the whole 512 MiB
        pytest.param("broadcast", 536_870_912, id="broadcast"),
    ],
)
def test_other_collectives(run_json, collective: str, sent: int) -> None:
    doc = run_json("comm-volume", "--collective", collective, "--size", "512MiB", "--gpus", "16", "--link", "ib-ndr")
    assert doc["results"]["sent_per_worker"]["value"] == sent


def test_point_to_point_defaults_to_two_workers(run_json) -> None:
    doc = run_json("comm-volume", "--collective", "point-to-point", "--size", "4MB", "--bandwidth", "50GB/s", "--latency", "2us")
    # 2e-6 + 4e6 / 50e9 = 8.2e-5 s
    assert doc["results"]["time"]["value"] == pytest.approx(8.2e-5, rel=1e-12)


# ---------------------------------------------------------------------------------------------
# --strategy: seed 004 question 2


def test_seed004_every_strategy(run_json) -> None:
    doc = run_json("comm-volume", "--strategy", "all", *SEED004)
    results = doc["results"]
    # Hand derivations (seed 004 Q2), P = 12 x 4096^2 x 32 = 6,442,450,944 parameters, 2 bytes each:
    # DP: P x 2 = 12,884,901,888 B all-reduced.
    assert results["dp.dp_allreduce_payload"]["value"] == 12_884_901_888
    # PP: B x L x D x 2 = 128 x 4096 x 4096 x 2 = 4,294,967,296 B from stage i to i+1 (and back).
    assert results["pp-gpipe.pp_p2p_per_boundary"]["value"] == 4_294_967_296
    # TP 8: 4 all-reduces per layer x 32 layers x 4,294,967,296 B = 549,755,813,888 B.
    assert results["tp.tp_allreduce_payload"]["value"] == 549_755_813_888
    # FSDP: 2 x P x 2 = 25,769,803,776 B all-gathered, P x 2 = 12,884,901,888 B reduce-scattered.
    assert results["fsdp.fsdp_all_gather_payload"]["value"] == 25_769_803_776
    assert results["fsdp.fsdp_reduce_scatter_payload"]["value"] == 12_884_901_888
    strategies = [r["strategy"] for r in doc["tables"]["totals"]["rows"]]
    assert strategies == ["dp", "zero1", "zero2", "fsdp", "tp", "tp+sp", "pp-gpipe", "pp-1f1b"]
    pp = [r for r in doc["tables"]["collectives"]["rows"] if r["strategy"] == "pp-gpipe"]
    assert {(r["direction"], r["payload"]) for r in pp} == {("i → i+1", 4_294_967_296), ("i+1 → i", 4_294_967_296)}


def test_strategy_table_names_both_conventions(run_json, runner) -> None:
    doc = run_json("comm-volume", "--strategy", "dp", *SEED004)
    (row,) = doc["tables"]["collectives"]["rows"]
    # payload 12,884,901,888 B; each GPU sends 2 x 7/8 of it = 22,548,578,304 B with the ring
    assert (row["op"], row["payload"], row["sent"], row["group_size"], row["algorithm"]) == (
        "all-reduce", 12_884_901_888, 22_548_578_304, 8, "ring")
    assert row["calls"] == 192 and row["link"] == "nvlink3" and row["inter_node"] is False
    assert any("payload (bytes aggregated)" in v and "per-device traffic" in v for v in doc["verdicts"])
    text = runner.invoke(app, ["comm-volume", "--strategy", "dp", *SEED004])
    assert "payload/iter" in text.stdout and "sent/device/iter" in text.stdout


def test_model_from_flags_is_the_homework_model(run_json) -> None:
    # --layers 32 --hidden 4096 --heads 32 --ffn-hidden 16384: no embeddings, biases or norms, as in seed 004.
    doc = run_json("comm-volume", "--strategy", "fsdp", "--layers", "32", "--hidden", "4096", "--heads", "32",
                   "--ffn-hidden", "16384", "--batch", "128", "--seq-len", "4096", "--dtype", "fp16", "--gpus", "8")  # fmt: skip
    assert doc["inputs"]["params"]["value"] == 6_442_450_944
    assert doc["results"]["fsdp_all_gather_payload"]["value"] == 25_769_803_776


def test_pp_direction_and_micro_batches(run_json) -> None:
    doc = run_json("comm-volume", "--strategy", "pp", *SEED004, "--micro-batch", "4", "--schedule", "gpipe")
    rows = doc["tables"]["collectives"]["rows"]
    # 128 / 4 = 32 sends of 4 x 4096 x 4096 x 2 = 134,217,728 B on each of the 7 boundaries, each way.
    assert {(r["direction"], r["calls"], r["mean_bytes_per_call"], r["groups"]) for r in rows} == {
        ("i → i+1", 32, 134_217_728, 7), ("i+1 → i", 32, 134_217_728, 7)}
    assert doc["settings"]["schedule"] == "gpipe"


def test_3d_uses_the_inter_node_link_across_nodes(run_json) -> None:
    doc = run_json("comm-volume", "--strategy", "3d", "--model", "homework-7b", "--tp", "2", "--pp", "4", "--dp", "2",
                   "--gpus-per-node", "4", "--batch", "64", "--seq-len", "4096", "--dtype", "fp16")  # fmt: skip
    rows = doc["tables"]["collectives"]["rows"]
    links = {(r["group"] if "group" in r else r["dimension"], r["link"]) for r in rows}
    assert links == {("tp", "nvlink3"), ("dp", "nvlink3"), ("pp", "ib-hdr")}
    assert doc["settings"]["inter_node_link"] == "ib-hdr"
    assert doc["inputs"]["inter_node_bandwidth"]["value"] == 25e9  # IB HDR: 200 Gb/s per direction


def test_sequence_parallel_flag(run_json) -> None:
    doc = run_json("comm-volume", "--strategy", "tp", "--sequence-parallel", *SEED004)
    ops = {r["op"] for r in doc["tables"]["collectives"]["rows"]}
    assert ops == {"all-gather", "reduce-scatter"}
    # homework-7b, B = 128, L = D = 4096, fp16: 4 x 32 x 128 x 4096 x 4096 x 2 B reduce-scattered; 2 x 32 x ... more
    # all-gathered, the column-parallel inputs gathered again in backward (Megatron-LM's sequence parallelism)
    assert doc["results"]["sp_reduce_scatter_payload"]["value"] == 549_755_813_888
    assert doc["results"]["sp_all_gather_payload"]["value"] == 824_633_720_832
    assert any("re-gathered" in r["purpose"] for r in doc["tables"]["collectives"]["rows"])


@pytest.mark.parametrize("fmt", ["csv", "markdown", "table"])
def test_other_formats(runner, fmt: str) -> None:
    # the table form's every collective (payload 12,884,901,888 B) is --detail full's; the brief form shows the totals
    detail = ["--detail", "full"] if fmt == "table" else []
    result = runner.invoke(app, ["comm-volume", "--strategy", "all", *SEED004, "--format", fmt, *detail])
    assert result.exit_code == 0, result.output
    assert "12884901888" in result.stdout.replace(",", "") or "12.8849" in result.stdout


# ---------------------------------------------------------------------------------------------
# Bad input: one `Error:` line naming the constraint, exit 2


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        pytest.param(["--collective", "all-reduce", "--size", "1GB", "--gpus", "0"], "--gpus: '0' must be greater than zero", id="workers-0"),
        pytest.param(["--collective", "all-reduce", "--size", "1GB", "--gpus", "-2"], "--gpus", id="workers-negative"),
        pytest.param(["--collective", "all-reduce", "--size", "0", "--gpus", "4"], "--size: '0' must be greater than zero", id="size-0"),
        pytest.param(["--collective", "all-reduce", "--size", "-1GB", "--gpus", "4"], "--size", id="size-negative"),
        pytest.param(["--collective", "all-reduce", "--gpus", "4"], "--size: required", id="size-missing"),
        pytest.param(["--collective", "all-reduce", "--size", "1GB", "--gpus", "4", "--algorithm", "pairwise"], "--algorithm: pairwise does not apply", id="wrong-algorithm"),
        pytest.param(["--collective", "all-reduce", "--size", "1GB", "--gpus", "4", "--latency", "5us"], "--latency: give --bandwidth with it", id="latency-alone"),
        pytest.param(["--collective", "all-reduce", "--size", "1GB", "--gpus", "4", "--link", "nvlnk4"], "unknown link", id="unknown-link"),
        pytest.param([], "give one of --collective", id="nothing"),
        pytest.param(["--collective", "all-reduce", "--strategy", "dp"], "give one of --collective", id="both"),
        pytest.param(["--strategy", "tp", *SEED004[:-2], "--gpus", "3"], "--tp: 3 does not divide the 32 attention heads", id="tp-heads"),
        pytest.param(["--strategy", "tp", "--model", "homework-7b", "--tp", "5", "--seq-len", "4096", "--batch", "10"], "--tp: 5 does not divide", id="tp-flag"),
        pytest.param(["--strategy", "pp", *SEED004[:-2], "--gpus", "64", "--inter-node-link", "ib-hdr"], "more stages than the model's 32 layers", id="pp-layers"),
        pytest.param(["--strategy", "dp", *SEED004, "--micro-batch", "3"], "--micro-batch: 3 does not divide", id="micro-batch"),
        pytest.param(["--strategy", "3d", *SEED004, "--tp", "2", "--pp", "2", "--dp", "4"], "--gpus: 8 is not tp x pp x dp = 2 x 2 x 4 = 16", id="gpus-product"),
        pytest.param(["--strategy", "dp", "--layers", "4", "--hidden", "100", "--heads", "3", "--seq-len", "8"], "--heads: 3 heads do not divide the hidden size 100", id="heads-hidden"),
        pytest.param(["--strategy", "dp", "--hidden", "64"], "--model: give a model preset", id="no-model"),
        pytest.param(["--strategy", "dp", *SEED004[:-2], "--gpus", "16", "--inter-node-link", "nope"], "unknown link", id="unknown-inter-link"),
        pytest.param(["--strategy", "dp", *SEED004, "--dtype", "fp12"], "--dtype: unknown dtype", id="dtype"),
        pytest.param(["--strategy", "3d", *SEED004[:-2], "--zero", "5"], "--zero", id="zero-stage"),
        pytest.param(["--strategy", "dp", *SEED004, "--size", "1GB"], "--size: applies to --collective, not --strategy", id="size-with-strategy"),
        pytest.param(["--collective", "all-reduce", "--size", "1GB", "--gpus", "4", "--model", "homework-7b"], "--model: applies to --strategy", id="model-with-collective"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(run_error, args: list[str], fragment: str) -> None:
    line = run_error(["comm-volume", *args], exit_code=2)
    assert fragment in line


def test_json_output_is_raw_numbers(runner) -> None:
    result = runner.invoke(app, ["comm-volume", "--strategy", "fsdp", *SEED004, "--format", "json"])
    doc = json.loads(result.stdout)
    for row in doc["tables"]["collectives"]["rows"]:
        assert isinstance(row["payload"], int) and isinstance(row["time"], float)


# ---------------------------------------------------------------------------------------------
# --collective on hardware: NCCL's own choice (issue #18 item 3)


def test_collective_on_a_gpu_prints_what_nccl_tests_would_measure(run_json) -> None:  # type: ignore[no-untyped-def]
    """1 GiB all-reduce over 16 H100s (2 DGX H100 nodes): the time is collective_time's, the function
    fit's step model calls (NVLS_TREE, Simple); busbw = algbw x 2(n-1)/n. Held against the committed
    nccl-tests table tests/fixtures/nccl/h100x16_ib_all_reduce.txt, row 1073741824: 4511.97 us."""
    from parcalc.core.choices import Collective
    from parcalc.core.timing.network import Fabric, collective_time, placement
    from parcalc.presets import load_link

    doc = run_json("comm-volume", "--collective", "all-reduce", "--size", "1GiB", "--workers", "16", "--gpu", "h100-sxm5")
    fabric = Fabric(8, load_link("nvlink4", ()), load_link("ib-ndr", ()), 8, "sm90", "nvlink")
    call = collective_time(Collective.ALL_REDUCE, 2**30, placement(16, 1, 8), fabric)
    results = doc["results"]
    assert results["time"]["value"] == pytest.approx(call.time, rel=1e-12)
    assert doc["settings"]["algorithm"] == call.algorithm == "nvls_tree" and doc["settings"]["protocol"] == "Simple"
    assert results["algbw"]["value"] == pytest.approx(2**30 / call.time, rel=1e-12)
    assert results["busbw"]["value"] == pytest.approx(2**30 / call.time * 2 * 15 / 16, rel=1e-12)
    assert 1 / 1.5 < results["time"]["value"] / 4511.97e-6 < 1.5
    # the textbook counts stay; its alpha-beta time under its own key, on the GPU's own NVLink (450 GB/s)
    assert results["sent_per_worker"]["value"] == pytest.approx(2 * 15 * 2**30 / 16)
    ab = results["time_alpha_beta"]
    assert ab["value"] == pytest.approx(2 * 15 * (3.4e-6 + 2**30 / (16 * 450e9)), rel=1e-9)


def test_collective_small_message_uses_a_low_latency_protocol(run_json) -> None:  # type: ignore[no-untyped-def]
    """1 KiB over 8 A100s in one node: NCCL's LL protocol, about 15 us (nccl-tests on DGX A100 measure
    13-25 us for such sizes, issue #18), not the Simple protocol's tens of microseconds."""
    doc = run_json("comm-volume", "--collective", "all-reduce", "--size", "1KiB", "--workers", "8", "--gpu", "a100-sxm4-80gb")
    assert doc["settings"]["protocol"] == "LL"
    assert 10e-6 < doc["results"]["time"]["value"] < 25e-6


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--gpu", "h100-sxm5", "--algorithm", "ring"], "--algorithm: describes the textbook", id="algorithm"),
        pytest.param(["--gpu", "h100-sxm5", "--compare"], "--compare: describes the textbook", id="compare"),
        pytest.param(["--gpu", "h100-sxm5", "--bandwidth", "10GB/s"], "--bandwidth / --latency", id="bandwidth"),
        pytest.param(["--gpu", "nope"], "unknown gpu 'nope'", id="unknown-gpu"),
        pytest.param(["--gpus-per-node", "0"], "--gpus-per-node", id="zero-per-node"),
        pytest.param(["--gpus-per-node", "100000"], "--gpus-per-node: 100,000 GPUs per node", id="huge-per-node"),
        pytest.param(["--gpu", "h100-sxm5", "--gpus", "1"], "--gpus: 1 rank", id="one-rank"),
        pytest.param(["--gpu", "h100-sxm5", "--inter-node-link", ""], "unknown link ''", id="empty-inter-node-link"),
    ],
)
def test_collective_on_hardware_bad_input(run_error, args: list[str], message: str) -> None:  # type: ignore[no-untyped-def]
    assert message in run_error(["comm-volume", "--collective", "all-reduce", "--size", "1GB", "--workers", "16", *args])
