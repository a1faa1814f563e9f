"""`parcalc memory` through the CLI: values in JSON, tables, verdicts, and one-line errors."""

from __future__ import annotations

import pytest

from parcalc.cli import app

# GPT-3 175B as Korthikanti et al. 2022 count it: attention materialises its s x s scores (5as^2b), so --no-flash-attention
KORTHIKANTI_175B = ["--layers", "96", "--hidden", "12288", "--heads", "96", "--vocab", "51200", "--seq-len", "2048", "--micro-batch", "1",
                    "--no-flash-attention"]


def test_zero_figure_1_through_the_cli(run_json) -> None:
    # ZeRO Figure 1's model states are per GPU; a 7.5B model is not a preset, so check P_os on a
    # model from flags: 4 layers of h = 1024 (P = 4 x (12 h^2 + 13 h) = 50,384,896, no vocabulary),
    # mixed-fp16 Adam, N_d = 64: 2P + 2P + 12P/64 = 201,539,584 + 9,447,168 = 210,986,752 bytes.
    doc = run_json("memory", "--layers", "4", "--hidden", "1024", "--heads", "16", "--seq-len", "128", "--dp", "64",
                   "--zero", "1", "--precision", "mixed-fp16", "--optimizer", "adam")  # fmt: skip
    results = doc["results"]
    assert results["stage_parameters"]["value"] == 50_384_896
    total = results["weights"]["value"] + results["gradients"]["value"] + results["optimizer_states"]["value"]
    assert total == 210_986_752
    assert results["optimizer_states"]["formula"] == "K × Ψ / N_d"
    assert doc["settings"]["zero"] == 1


def test_korthikanti_175b_first_stage(run_json) -> None:
    # GPT-3 175B with t = 8, p = 8, SP and selective recomputation: 34 sbh/t = 106,954,752 bytes per
    # layer; the first stage keeps 12 layers x 8 micro-batches = 96 layers' worth: 10,267,656,192 bytes.
    doc = run_json("memory", *KORTHIKANTI_175B, "--tp", "8", "--pp", "8", "--sequence-parallel", "--recompute", "selective")
    results = doc["results"]
    assert results["activation_per_layer"]["value"] == 106_954_752
    assert results["korthikanti_per_layer"]["value"] == 106_954_752
    assert results["korthikanti_per_layer"]["formula"] == "34 × s × b × h / t"
    assert results["in_flight"]["value"] == 8
    assert results["stage_activations"]["value"] == 10_267_656_192
    assert any("equals Korthikanti" in v for v in doc["verdicts"])
    # the component table adds up to the total
    rows = doc["tables"]["components"]["rows"]
    assert rows[-1]["component"] == "total"
    assert sum(r["bytes"] for r in rows[:-1]) == pytest.approx(rows[-1]["bytes"], rel=1e-12)


def test_fits_verdict_with_a_gpu(run_json) -> None:
    doc = run_json("memory", "--model", "gpt2-xl", "--micro-batch", "1", "--gpu", "a100-sxm4-80gb")
    headroom = doc["results"]["headroom"]
    # A100 80GB: 80 GiB = 85,899,345,920 bytes of capacity
    assert headroom["inputs"]["C"]["value"] == 85_899_345_920
    assert headroom["value"] == 85_899_345_920 - doc["results"]["total"]["value"]
    assert doc["verdicts"][0].startswith("fits:")


def test_does_not_fit_is_a_verdict_not_an_error(run_json) -> None:
    doc = run_json("memory", "--model", "homework-7b", "--seq-len", "4096", "--gpu", "a100-sxm4-80gb")
    assert doc["results"]["headroom"]["value"] < 0
    assert doc["verdicts"][0].startswith("does not fit:")


def test_gpus_give_the_data_parallel_degree(run_json) -> None:
    # 64 GPUs as t = 8, p = 4: d = 64 / 32 = 2, over which ZeRO-1 shards the optimizer states
    doc = run_json("memory", *KORTHIKANTI_175B, "--tp", "8", "--pp", "4", "--gpus", "64", "--zero", "1")
    assert doc["inputs"]["dp"]["value"] == 2
    assert doc["results"]["optimizer_states"]["inputs"]["N_d"]["value"] == 2


def test_per_stage_table(run_json) -> None:
    doc = run_json("memory", *KORTHIKANTI_175B, "--tp", "8", "--pp", "8", "--micro-batches", "16", "--per-stage")
    stages = doc["tables"]["stages"]["rows"]
    assert [s["stage"] for s in stages] == list(range(1, 9))
    assert [s["in_flight"] for s in stages] == [8, 7, 6, 5, 4, 3, 2, 1]  # 1F1B: p - s
    assert stages[0]["embeddings"] > 0 and stages[-1]["logits"] > 0 and stages[3]["logits"] == 0
    # the fullest stage is the one the derivations describe
    assert max(s["total"] for s in stages) == doc["results"]["total"]["value"]


def test_interleaved_defaults_to_2p_micro_batches(run_json) -> None:
    doc = run_json("memory", *KORTHIKANTI_175B, "--tp", "8", "--pp", "8", "--schedule", "interleaved", "--chunks", "3")
    # m = 2p = 16; p (1 + (p - 1)/(p v)) = 8 + 7/3 micro-batches of the first stage's 12 layers
    assert doc["inputs"]["micro_batches"]["value"] == 16
    assert doc["results"]["in_flight"]["value"] == pytest.approx(8 + 7 / 3, rel=1e-15)


def test_table_output_shows_the_derivation(runner) -> None:
    result = runner.invoke(app, ["memory", "--model", "gpt2-xl", "--micro-batch", "2", "--seq-len", "1024", "--detail", "full"])
    assert result.exit_code == 0, result.output
    assert "A_layer = s × b × (c_whole + c_split / t)" in result.stdout
    assert "What one layer keeps for backward" in result.stdout
    assert "give --gpu or --capacity for a verdict" in result.stdout


def test_reserve_default_is_stated_and_sourced(runner, run_json) -> None:
    # the help states the default and where each part comes from; it must agree with the core's parts
    from parcalc.core.training_setup import RESERVE_PARTS

    help_text = " ".join(runner.invoke(app, ["memory", "--help"]).stdout.split())
    for needle in ("Default 2GiB", "CUDA context 0.5GiB", "PyTorch PR #86509", "NCCL buffers 1GiB", "NVIDIA/nccl src/init.cc",
                   "fragmentation 0.5GiB"):  # fmt: skip
        assert needle in help_text
    assert [part[2] / 2**30 for part in RESERVE_PARTS] == [0.5, 1.0, 0.5]
    reserve = run_json("memory", "--model", "gpt2-xl", "--micro-batch", "1")["results"]["reserve"]
    assert reserve["value"] == 2 * 2**30  # 2 GiB = 2,147,483,648 bytes
    assert "PyTorch PR #86509" in reserve["source"] and "NVIDIA/nccl src/init.cc" in reserve["source"]
    assert "PR #86509" in reserve["inputs"]["R_ctx"]["source"] and "init.cc" in reserve["inputs"]["R_nccl"]["source"]
    given = run_json("memory", "--model", "gpt2-xl", "--micro-batch", "1", "--reserve", "0")["results"]["reserve"]
    assert given["value"] == 0 and given["source"] == "given on the command line"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--model", "gpt2-xl", "--tp", "7"], "--tp: 7 does not divide the attention heads (25)", id="tp-heads"),
        pytest.param(["--model", "gpt2-xl", "--pp", "5"], "--pp: 48 layers do not split evenly", id="pp-layers"),
        # Megatron-LM's uneven split as the way out: 9 + 3 x 10 + 9 = 48
        pytest.param(["--model", "gpt2-xl", "--pp", "5"], "e.g. --first-stage-layers 9 --last-stage-layers 9 (9 + 3 x 10 + 9)",
                     id="pp-layers-uneven-hint"),
        pytest.param(["--model", "gpt2-xl", "--pp", "5", "--first-stage-layers", "8", "--last-stage-layers", "8"],
                     "the 32 layers left after 8 + 8 do not split evenly over the 3 middle stage(s)", id="uneven-remainder"),
        pytest.param(["--model", "gpt2-xl", "--gpus", "12", "--pp", "8"], "--gpus: 12 GPUs do not divide", id="gpus-not-divisible"),
        pytest.param(["--model", "gpt2-xl", "--gpus", "16", "--dp", "4"], "--gpus: 16 is not t x p x d = 1 x 1 x 4", id="gpus-mismatch"),
        pytest.param(["--model", "gpt2-xl", "--chunks", "2"], "--chunks: only the interleaved schedule", id="chunks-1f1b"),
        pytest.param(["--model", "gpt2-xl", "--micro-batch", "0"], "--micro-batch", id="zero-micro-batch"),
        pytest.param(["--model", "gpt2-xl", "--capacity", "80 parsecs"], "--capacity", id="bad-capacity"),
        pytest.param(["--model", "gpt2-xl", "--reserve", "-1GiB"], "--reserve", id="negative-reserve"),
        pytest.param(["--layers", "4", "--hidden", "1000", "--heads", "3", "--seq-len", "8"], "--heads: 3 heads do not divide", id="heads-hidden"),
        pytest.param(["--layers", "4", "--hidden", "64"], "--model: give a model preset", id="no-model"),
        pytest.param(["--model", "gpt2-xl", "--seq-len", "2048"], "--seq-len: 2048 tokens, but", id="beyond-learned-positions"),
        pytest.param(["--model", "homework-7b", "--seq-len", "1e200"], "--seq-len: 1e+200 is beyond any possible size", id="impossible-seq"),
        pytest.param(["--model", "no-such-model"], "unknown model", id="unknown-model"),
        # Llama 3 70B: 64 query heads, 8 key/value heads; t = 16 divides the first, not the second
        pytest.param(["--model", "llama3-70b", "--seq-len", "4096", "--tp", "16"], "--tp: 16 does not divide the key/value heads (8)",
                     id="tp-kv-heads"),
        pytest.param(["--layers", "4", "--hidden", "64", "--heads", "4", "--ffn-hidden", "10", "--tp", "4", "--seq-len", "8"],
                     "--tp: 4 does not divide the MLP width (ffn_hidden) (10)", id="tp-ffn"),
        pytest.param(["--model", "gpt2-xl", "--pp", "96"], "--pp: 48 layers do not split evenly over pp = 96", id="pp-more-than-layers"),
        pytest.param(["--model", "gpt2-xl", "--pp", "8", "--schedule", "interleaved", "--chunks", "4"],
                     "--pp: 48 layers do not split evenly over pp x chunks = 8 x 4", id="chunks-layers"),
        pytest.param(["--model", "gpt2-xl", "--pp", "4", "--schedule", "interleaved", "--chunks", "2", "--micro-batches", "6"],
                     "--micro-batches: the interleaved schedule needs m to be a multiple of p", id="interleaved-m"),
        pytest.param(["--model", "gpt2-xl", "--pp", "16", "--schedule", "zb-v"], "ZB-V holds two chunks a device in a V: 2p = 32 must divide the 48 layers",
                     id="zb-v-chunks"),
        pytest.param(["--model", "gpt2-xl", "--micro-batch", "1e16"], "--micro-batch: 1e+16 is beyond any possible size", id="impossible-micro-batch"),
        pytest.param(["--model", "gpt2-xl", "--tp", "1e17"], "--tp: 1e+17 is beyond any possible size", id="impossible-tp"),
        pytest.param(["--model", "gpt2-xl", "--micro-batch", "2.5"], "--micro-batch: '2.5' must be a whole number", id="fractional-micro-batch"),
        pytest.param(["--model", "gpt2-xl", "--dp", "0"], "--dp: '0' must be greater than zero", id="zero-dp"),
    ],
)
def test_bad_input_is_one_error_line(run_error, args: list[str], message: str) -> None:
    line = run_error(["memory", *args])
    assert message in line


@pytest.mark.parametrize(
    ("args", "note"),
    [
        pytest.param(["--zero", "3"], "--zero 3 with dp x cp = 1", id="zero-dp1"),
        pytest.param(["--sequence-parallel"], "--sequence-parallel with --tp 1", id="sp-tp1"),
        # --gpus 10 over t x p = 5 x 2 leaves d = 1
        pytest.param(["--tp", "5", "--pp", "2", "--gpus", "10", "--zero", "1"], "--zero 1 with dp x cp = 1", id="zero-gpus-leave-dp1"),
    ],
)
def test_no_op_flags_for_sweeps_are_stated_not_refused(run_json, args: list[str], note: str) -> None:
    """Issue #15: a sweep over tp or dp reaches SP with one TP rank and ZeRO with one DP rank; they change
    nothing, so the memory is the plain configuration's, and an assumption says so."""
    plain = [a for a in args if a not in ("--sequence-parallel", "--zero", "1", "3")]
    given, without = run_json("memory", "--model", "gpt2-xl", *args), run_json("memory", "--model", "gpt2-xl", *plain)
    assert given["results"]["total"]["value"] == without["results"]["total"]["value"]
    assert any(a.startswith(note) and a.endswith("a no-op (taken as 0)" if "zero" in note else "a no-op (taken as off)") for a in given["assumptions"])



def test_memory_tables_are_in_the_verdicts_unit(runner) -> None:
    # issue 28: the components table said GB under "bytes [B]", the bar and the verdict GiB. Llama 3 8B, s 8192,
    # DP 8 with ZeRO-1 on an H100 (80 GiB): 87,191,672,832 B = 81.2 GiB in the table, 81.20 GiB in the verdict.
    result = runner.invoke(app, ["memory", "--model", "llama3-8b", "--seq-len", "8192", "--dp", "8", "--zero", "1", "--gpu", "h100-sxm5", "--detail", "full"])
    assert result.exit_code == 0, result.output
    table = result.stdout.split("Memory of one GPU of stage 1", 1)[1].split("\n\n", 1)[0]
    assert "[B]" not in table and " GB" not in table
    total = next(line for line in table.splitlines() if line.strip().startswith("total"))
    assert "81.2 GiB" in total
    assert "needs 81.20 GiB of 80.00 GiB" in result.stdout
    # the verdict first, under the title (it followed ~100 lines of derivations), and once
    lines = result.stdout.splitlines()
    assert lines[3].startswith("=> does not fit: the fullest GPU (stage 1) needs 81.20 GiB") and lines.index("Inputs") > 3
    assert sum("needs 81.20 GiB" in line for line in lines) == 1
