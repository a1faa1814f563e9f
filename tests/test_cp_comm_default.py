"""--cp-comm's default is the framework's own (issue 32): Megatron-LM's --cp-comm-type defaults to p2p
(megatron/training/arguments.py @d98e8a64 line 3221, default=["p2p"]); torchtitan's rotate method to 'allgather'
(torchtitan 9dec370 config_manager.py --experimental.context_parallel_rotate_method default="allgather"; at b5bcd76 it sets
none and PyTorch v2.13.0's _ContextParallelOptions.rotate_method = _RotateMethod.ALL_GATHER holds), which parcalc reads as
--cp-comm all-gather (presets/frameworks/torchtitan.yaml context_parallel). memory, fit, fit --search and the library's
layout= agree; comm-volume, which has no --framework, keeps p2p."""

from __future__ import annotations

import pytest

from parcalc.core.layout import Layout
from parcalc.presets import load_framework
from parcalc.results.layout_flags import layout_inputs


def test_the_profiles_carry_their_stacks_default_with_its_source() -> None:
    titan, megatron = load_framework("torchtitan", ()), load_framework("megatron", ())
    assert titan.cp_comm_default == "all-gather" and "default=\"allgather\"" in titan.source("cp_comm_default")
    assert megatron.cp_comm_default == "p2p" and "--cp-comm-type" in megatron.source("cp_comm_default")
    assert load_framework("fsdp2", ()).cp_comm_default == "p2p"  # a profile without the field: p2p


def _pytorch_rotate_default() -> str:
    """PyTorch's own rotate method, as torchtitan at HEAD leaves it (the installed torch is v2.13.0)."""
    pytest.importorskip("torch")
    from torch.distributed.tensor.experimental._context_parallel import _attention

    return _attention._ContextParallelOptions().rotate_method.name


def test_pytorch_default_rotate_method_is_allgather() -> None:
    """The source the torchtitan profile cites for its default, checked against the installed PyTorch."""
    assert _pytorch_rotate_default() == "ALL_GATHER"


_8B = ("--model", "llama3-8b", "--gpu", "h200", "--gpus", "8", "--seq-len", "8192", "--dp", "4", "--cp", "2")


def test_memory_under_torchtitan_walks_the_allgather_ring_without_cp_comm(run_json) -> None:
    """Before: p2p (the 'alltoall' ring) under torchtitan without --cp-comm; after: 'allgather', torchtitan's, and the
    assumptions say the profile chose it."""
    document = run_json("memory", *_8B, "--framework", "torchtitan", "--recompute", "full")
    assert document["settings"]["cp_comm"] == "all-gather"
    assert "all-gathered once (allgather rotate)" in str(document)
    assert any(a.startswith("--cp-comm all-gather: the TorchTitan") for a in document["assumptions"])
    stated = run_json("memory", *_8B, "--framework", "torchtitan", "--recompute", "full", "--cp-comm", "all-gather")
    assert stated["results"]["total"] == document["results"]["total"]
    assert not any(a.startswith("--cp-comm") for a in stated["assumptions"])  # given: nothing to say


def test_memory_under_torchtitan_compile_is_walked_by_default(run_json) -> None:
    """The compiled ring is read with allgather (parcalc.core.memory_torchtitan_cp_compile): with torchtitan's default
    exchange --compile --cp 2 is walked (before: the textbook sum, '--compile with --cp-comm p2p')."""
    document = run_json("memory", *_8B, "--framework", "torchtitan", "--recompute", "full", "--compile")
    assert "step_reserved" in document["results"]


def test_megatron_and_no_framework_keep_p2p(run_json) -> None:
    for framework in (("--framework", "megatron"), ()):
        document = run_json("memory", *_8B, *framework)
        assert document["settings"]["cp_comm"] == "p2p"
    volume = run_json("comm-volume", "--model", "llama3-8b", "--strategy", "3d", "--gpus", "8", "--tp", "1", "--pp", "1", "--dp", "4",
                      "--cp", "2", "--seq-len", "8192")  # fmt: skip
    assert volume["settings"]["cp_comm"] == "p2p"


def test_fit_times_torchtitans_default(run_json) -> None:
    """fit pins the configuration with torchtitan's exchange: at cp 4 the allgather rotate is slower than the alltoall ring
    here (t_cp differs), and no --cp-comm is --cp-comm all-gather exactly."""
    base = ("--model", "llama3-8b", "--gpu", "h200", "--gpus", "8", "--seq-len", "32768", "--tp", "1", "--cp", "4", "--dp", "2",
            "--framework", "torchtitan")  # fmt: skip
    default, gathered, ring = (run_json("fit", *base, *extra)["results"]["t_step"]["value"]
                               for extra in ((), ("--cp-comm", "all-gather"), ("--cp-comm", "p2p")))  # fmt: skip
    assert default == gathered != ring


def test_fit_search_searches_with_torchtitans_default() -> None:
    from parcalc.results.fit_request import request

    titan = request(model="llama3-8b", gpus="8", gpu=["h200"], seq_len="32768", search=True, framework="torchtitan")
    assert titan.space is not None and titan.space.cp_comm == "all-gather"
    assert any(n.startswith("--cp-comm all-gather") for n in titan.notes)
    megatron = request(model="llama3-8b", gpus="8", gpu=["h200"], seq_len="32768", search=True)
    assert megatron.space is not None and megatron.space.cp_comm == "p2p"


def test_a_layout_gives_its_exchange_as_written() -> None:
    """Layout(cp=2) is p2p as written (Layout's field), under --framework torchtitan too, as its ZeRO stage is."""
    assert layout_inputs("memory", Layout(cp=2), {})["cp_comm"] == "p2p"
    assert "cp_comm" not in layout_inputs("memory", Layout(), {})
