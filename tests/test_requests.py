"""The results layer's typed requests (issue #29): each command's `request(**flag texts)` reads its
flags into typed values (a TransformerModel, a Layout, a TrainingSetup, GPU presets, base units),
`result(request)` computes from them alone and equals the command's --format json; and the
library's `layout=` keyword sets the degree, ZeRO, SP and schedule flags from one Layout value."""

from __future__ import annotations

import json

import pytest

import parcalc
from parcalc.cli import app
from parcalc.core.choices import Precision, Recompute, Schedule
from parcalc.core.layout import Layout
from parcalc.errors import InputError
from parcalc.results import analyze, comm_volume, fit, flops, intensity, memory, scaling
from parcalc.results.run import run_command

GIB = 2**30


def _cli_json(runner, *words: str) -> dict:
    out = runner.invoke(app, [*words, "--format", "json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


def _request(module, command: str, inputs: dict):
    """The command's request from `inputs` as the library and run files pass flags (checked as the
    command line checks them, defaults filled in): parcalc.results.run.flag_values."""
    from parcalc.results.run import flag_values
    from parcalc.runfile import OUTPUT_KEYS, defaults_for, signature

    command_signature = signature(command)
    values = flag_values(command_signature, defaults_for(command_signature, command, inputs, "test", refuse=OUTPUT_KEYS), "test")
    return module.request(**values)


# One real case per command: its flags on the command line, and the same as inputs.
CASES = [
    pytest.param(memory, "memory", {"model": "llama3-70b", "seq_len": 4096, "tp": 8, "pp": 4, "dp": 4, "zero": 1,
                                    "sequence_parallel": True, "gpu": "h100-sxm5"}, id="memory"),  # fmt: skip
    pytest.param(flops, "flops", {"model": "llama3-8b", "seq_len": 8192, "batch": 512, "pp": 4, "cp": 2, "causal": True,
                                  "step_time": "6s", "gpus": 64, "gpu": "h100-sxm5"}, id="flops"),  # fmt: skip
    pytest.param(fit, "fit", {"model": "llama3-70b", "gpu": "h100-sxm5", "gpus": 64, "batch": 64, "seq_len": 4096,
                              "tp": 8, "pp": 4, "dp": 2, "zero": ["1"], "sequence_parallel": True}, id="fit-configuration"),  # fmt: skip
    pytest.param(fit, "fit", {"model": "llama3-8b", "gpu": "h100-sxm5", "gpus": 8, "batch": 8, "seq_len": 4096}, id="fit-strategies"),
    pytest.param(comm_volume, "comm-volume", {"strategy": "3d", "model": "llama3-8b", "seq_len": 4096, "tp": 2, "pp": 2, "dp": 2,
                                              "zero": 1}, id="comm-volume-3d"),  # fmt: skip
    pytest.param(comm_volume, "comm-volume", {"collective": "all-reduce", "size": "1GB", "gpus": 8}, id="comm-volume-collective"),
    pytest.param(scaling, "scaling", {"model": "llama3-8b", "gpu": "h100-sxm5", "gpus": "8,16,...,64", "batch": 64,
                                      "seq_len": 4096, "strategy": "zero3"}, id="scaling"),  # fmt: skip
    pytest.param(intensity, "intensity", {"m": 4096, "k": 4096, "n": 4096, "gpu": "h100-sxm5", "dtype": "bf16"}, id="intensity"),
    pytest.param(analyze, "analyze", {"file": "lab-ddp-timings.csv", "time_is": "epoch"}, id="analyze"),
]


def _words(command: str, inputs: dict) -> list[str]:
    words = command.split()
    for key, value in inputs.items():
        flag = "--" + key.replace("_", "-")
        if key == "file":
            words.append(str(value))
        elif value is True:
            words.append(flag)
        elif isinstance(value, list):
            for item in value:
                words += [flag, str(item)]
        else:
            words += [flag, str(value)]
    return words


@pytest.mark.parametrize(("module", "command", "inputs"), CASES)
def test_result_of_the_request_is_the_commands_json(runner, module, command: str, inputs: dict) -> None:
    req = _request(module, command, inputs)
    assert module.result(req).to_dict() == _cli_json(runner, *_words(command, inputs))


def test_memory_request_holds_the_parsed_values() -> None:
    req = _request(memory, "memory", {"model": "llama3-70b", "seq_len": 4096, "tp": 8, "pp": 4, "dp": 4, "zero": 1,
                                      "sequence_parallel": True, "gpu": "h100-sxm5", "reserve": "2GiB"})  # fmt: skip
    assert req.layout == Layout(tp=8, pp=4, dp=4, zero=1, sequence_parallel=True)
    assert req.model.layers == 80 and req.model.hidden == 8192  # presets/models/llama3-70b.yaml (Meta-Llama-3-70B config.json)
    assert req.setup.seq_len == 4096 and req.setup.micro_batch == 1
    assert req.setup.micro_batches == 4  # no --micro-batches: m = p for 1F1B (parcalc.results.memory.request)
    assert req.setup.capacity == 80 * GIB  # presets/gpus/h100-sxm5.yaml: 80 GiB of HBM3
    assert req.setup.reserve == 2 * GIB
    assert req.setup.precision is Precision.MIXED_BF16 and req.gpu is not None and req.gpu.key == "h100-sxm5"
    # --gpus gives d: 128 GPUs / (t x p) = 4; --batch B gives m = B / (b d) (Megatron-LM's get_num_microbatches)
    req = _request(memory, "memory", {"model": "llama3-70b", "tp": 8, "pp": 4, "gpus": 128, "batch": 64})
    assert (req.layout.dp, req.setup.micro_batches) == (4, 16)
    # --schedule interleaved --chunks 2: v = 2, and m defaults to 2p
    req = _request(memory, "memory", {"model": "llama3-70b", "tp": 8, "pp": 4, "schedule": "interleaved", "chunks": 2})
    assert (req.layout.schedule, req.layout.chunks, req.setup.micro_batches) == (Schedule.INTERLEAVED, 2, 8)


def test_requests_of_the_other_commands_hold_the_parsed_values() -> None:
    req = _request(flops, "flops", {"model": "llama3-8b", "seq_len": 8192, "batch": 512, "pp": 4, "step_time": "6s", "gpus": 64,
                                    "gpu": "h100-sxm5"})  # fmt: skip
    assert (req.batch, req.seq_len, req.pp, req.cp) == (512, 8192, 4, None)
    assert req.utilization is not None and (req.utilization.step_time, req.utilization.gpus) == (6.0, 64)
    assert req.utilization.peak == 989.4e12  # H100 SXM5 dense BF16, NVIDIA H100 datasheet (presets/gpus/h100-sxm5.yaml)
    req = _request(fit, "fit", {"model": "llama3-70b", "gpu": "h100-sxm5", "gpus": 64, "batch": 64, "seq_len": 4096,
                                "tp": 8, "pp": 4, "recompute": ["selective"]})  # fmt: skip
    assert req.mode is fit.FitMode.CONFIGURATION and req.config is not None
    assert (req.config.layout.tp, req.config.layout.pp, req.config.layout.dp) == (8, 4, 2)  # dp: the rest of the 64 GPUs
    assert req.config.recompute is Recompute.SELECTIVE and req.training.global_batch == 64
    assert req.cluster.gpus == 64 and req.cluster.capacity == 80 * GIB
    req = _request(fit, "fit", {"model": "llama3-8b", "gpu": ["h100-sxm5", "a100-sxm4-80gb"], "gpus": 8, "batch": 8, "seq_len": 4096,
                                "search": True, "pp": 1})  # fmt: skip
    assert req.mode is fit.FitMode.SEARCH and req.space is not None and req.space.pp == 1
    assert req.gpu_keys == ("h100-sxm5", "a100-sxm4-80gb") and len(req.clusters) == 2
    req = _request(comm_volume, "comm-volume", {"strategy": "3d", "model": "llama3-8b", "seq_len": 4096, "tp": 2, "pp": 2, "dp": 2})
    assert req.strategy is not None and req.strategy.layout.gpus == 8 and req.strategy.workload.seq_len == 4096
    req = _request(comm_volume, "comm-volume", {"collective": "all-reduce", "size": "1GB", "gpus": 8})
    assert req.collective is not None and (req.collective.message, req.collective.gpus) == (1e9, 8)
    assert req.collective.link.bandwidth_per_direction.value == 300e9  # presets/links/nvlink3.yaml: 12 links x 25 GB/s
    req = _request(scaling, "scaling", {"model": "llama3-8b", "gpu": "h100-sxm5", "gpus": "8,16,...,64", "batch": 64})
    assert req.counts == (8, 16, 32, 64) and req.batch == 64 and req.cluster.gpus == 8  # the cluster at the smallest count
    req = _request(intensity, "intensity", {"m": 4096, "k": 1024, "n": 2048, "dtype": "bf16"})
    assert req.dims == (4096, 1024, 2048, 1) and req.element_bytes == 2.0 and req.machine is None
    req = _request(analyze, "analyze", {"file": "lab-ddp-timings.csv", "time_is": "epoch", "section": ["shares"]})
    assert [s.value for s in req.sections] == ["shares"] and req.timings.time_kind.value == "epoch"
    # presets/worksheets/lab-ddp-timings.csv (seed 002's Tables 1-6): 9 rows, the first 1 GPU x 32 at 48.61245506070554 s
    assert len(req.timings.rows) == 9 and req.timings.rows[0].time == 48.61245506070554 and req.timings.rows[0].gpus == 1


def test_a_request_names_the_bad_flag() -> None:
    with pytest.raises(InputError, match=r"--gpus: 100 is not t x p x d = 8 x 4 x 4 = 128"):
        _request(memory, "memory", {"model": "llama3-70b", "tp": 8, "pp": 4, "dp": 4, "gpus": 100})
    with pytest.raises(InputError, match=r"--mfu: times a whole run; give --tokens D"):  # was an internal error (NoneType)
        _request(flops, "flops", {"model": "llama3-8b", "mfu": 0.4, "gpus": 8, "gpu": "h100-sxm5"})


LAYOUT = Layout(tp=8, pp=4, dp=2, zero=1, sequence_parallel=True)
FLAGS = {"tp": 8, "pp": 4, "dp": 2, "zero": 1, "sequence_parallel": True}


def test_layout_keyword_is_the_flags() -> None:
    assert parcalc.Layout is Layout
    base = {"model": "llama3-70b", "seq_len": 4096, "gpu": "h100-sxm5"}
    assert parcalc.memory(**base, layout=LAYOUT) == parcalc.memory(**base, **FLAGS)
    # fit pins the configuration and takes --gpus from the layout: 8 x 4 x 2 = 64
    assert parcalc.fit(**base, batch=64, layout=LAYOUT) == parcalc.fit(**base, batch=64, gpus=64, **{**FLAGS, "zero": ["1"]})
    interleaved = Layout(tp=2, pp=2, dp=2, schedule=Schedule.INTERLEAVED, chunks=2, cp=1)
    assert (parcalc.comm_volume(strategy="3d", model="llama3-8b", seq_len=4096, layout=interleaved)
            == parcalc.comm_volume(strategy="3d", model="llama3-8b", seq_len=4096, tp=2, pp=2, dp=2, schedule="interleaved", chunks=2))  # fmt: skip
    # flops takes the stages and context parallelism; tp and dp change no FLOP of an iteration
    assert (parcalc.flops(model="llama3-8b", seq_len=4096, layout=Layout(tp=8, pp=4, cp=2))
            == parcalc.flops(model="llama3-8b", seq_len=4096, pp=4, cp=2))  # fmt: skip
    assert parcalc.run("memory", **base, layout=LAYOUT) == parcalc.memory(**base, **FLAGS)
    # the requests the layout's flags give hold the layout itself (GPUs per node: 8, the default and the H100 node's)
    from parcalc.results.layout_flags import layout_inputs

    assert _request(memory, "memory", {**base, **layout_inputs("memory", LAYOUT, {})}).layout == LAYOUT
    pinned = _request(fit, "fit", {**base, "batch": 64, **layout_inputs("fit", LAYOUT, {})})
    assert pinned.config is not None and pinned.config.layout == LAYOUT and pinned.cluster.gpus == 64
    # the request the layout gives holds it
    assert run_command("memory", {**base, **FLAGS}).title == parcalc.memory(**base, layout=LAYOUT).title


def test_layout_with_a_flag_it_sets_is_an_error() -> None:
    with pytest.raises(InputError, match=r"memory\(\): layout= and tp=: the layout sets --tp \(layout.tp = 8\); give one of them"):
        parcalc.memory(model="llama3-70b", layout=LAYOUT, tp=4)
    with pytest.raises(InputError, match=r"layout= and sequence_parallel=: the layout sets --sequence-parallel"):
        parcalc.memory(model="llama3-70b", layout=LAYOUT, sequence_parallel=False)
    with pytest.raises(InputError, match=r"fit\(\): layout= and gpus=: the layout sets --gpus \(tp x pp x cp x dp = 64\)"):
        parcalc.fit(model="llama3-70b", gpu="h100-sxm5", gpus=64, layout=LAYOUT)
    with pytest.raises(TypeError, match=r"layout=: a parcalc.Layout"):
        parcalc.memory(model="llama3-70b", layout={"tp": 8})
    with pytest.raises(TypeError, match="unexpected keyword argument 'layout'"):
        parcalc.intensity(m=1, k=1, n=1, layout=LAYOUT)
