"""The 2021-22 A100 Megatron-style runs as their code ran them (issue #32, the Megatron-style family).

Three things parcalc timed otherwise than the runs' own code and hardware did, each read from the source:
- Pipeline sends. Megatron-LM at the GPT-3 example's commit (152aab304d, 2021-01-11, whose README quotes the 32 s
  iteration) sent the whole (seq_length, micro_batch_size, hidden_size) tensor from every TP rank (megatron/training.py
  `communicate`); the scatter/gather that splits it over the TP ranks came with 27fc468964 (2021-01-20), was on by
  default from 72e4230bb5 (2021-02-16) and left with Megatron-Core's p2p_communication.py (3c92fa93b5, 2023-03-23),
  which splits it only under sequence parallelism. DeepSpeed's PipelineEngine partitions it (is_pipe_partitioned).
- Dropout. Megatron-LM's --attention-dropout and --hidden-dropout default to 0.1 (arguments.py at 152aab304d, and in
  bigscience's Megatron-DeepSpeed); neither script sets them, and BLOOM's README says 'The default Megatron-LM dropout
  settings are inherited'.
- BLOOM's network: '4 Omni-Path 100 Gbps links per node' (Le Scao et al. 2022, sec. 3.4.1), not a DGX A100's 8 x HDR.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from step_time_cases import CASES, error, inputs

from parcalc.core.choices import Collective, Schedule
from parcalc.core.fit import estimate
from parcalc.core.memory import vocab_shard
from parcalc.core.timing.framework import MEGATRON
from parcalc.core.timing.network import collective_time, placement
from parcalc.core.timing.step import embedding_sync_time
from parcalc.errors import PresetError
from parcalc.preset_frameworks import framework_from_document
from parcalc.presets import load_framework

GPT3 = next(case for case in CASES if case.key == "megatron-gpt3-175b-1024xa100")
BLOOM = next(case for case in CASES if case.key == "bloom-176b-384xa100")


def _send(cluster, config, size: float) -> float:  # type: ignore[no-untyped-def]
    layout = config.layout
    return collective_time(Collective.POINT_TO_POINT, size, placement(2, layout.tp * layout.cp * layout.dp, cluster.gpus_per_node),
                           cluster.fabric).time  # fmt: skip


def test_the_profiles_say_what_a_tp_rank_sends_across_a_stage_boundary() -> None:
    assert load_framework("megatron").pipeline_scatter_gather is False  # Megatron-Core since 3c92fa93b5
    assert "3c92fa93b5" in load_framework("megatron").source("pipeline_scatter_gather")
    assert load_framework("deepspeed").pipeline_scatter_gather is True  # PipelineEngine.is_pipe_partitioned
    assert "is_pipe_partitioned" in load_framework("deepspeed").source("pipeline_scatter_gather")
    assert MEGATRON.pipeline_scatter_gather is True  # the core default: Megatron-LM as the 2021-22 papers ran it


def test_gpt3_every_tp_rank_sends_the_whole_activation() -> None:
    model, config, training, cluster = inputs(GPT3)
    est = estimate(model, config, training, cluster)
    m = config.micro_batches(training)
    assert m == 192  # 1,536 sequences / dp 8, micro-batch 1
    whole = 2048 * 1 * 12288 * 2  # s x b x h in fp16: 50.3 MB from each of the 8 TP ranks, one HDR card each
    sync = _embedding_sync(cluster, config, 51200 // 8 * 12288 * 2)  # the tied embedding's fp16 gradient, 6.4 ms
    assert est.pp_comm.value == pytest.approx(2 * m * _send(cluster, config, whole) + sync, rel=1e-12)
    assert est.pp_comm.value == pytest.approx(0.791, abs=0.005)  # 2.04 ms a send at 25 GB/s (0.11 s with the split)
    assert "whole b s h from every TP rank" in next(t.description for t in est.pp_comm.inputs if t.key == "T_p2p")
    # the same run under sequence parallelism, or with the 2021-22 scatter/gather (the core default), sends 1/8 of it
    for changed_config, changed_cluster in ((config.replaced(sequence_parallel=True), cluster), (config, replace(cluster, framework=MEGATRON))):
        split = estimate(model, changed_config, training, changed_cluster)
        wire = changed_cluster.framework.wire_bytes(training.precision)  # the case's fp16 reduction; MEGATRON's fp32 main_grad
        changed_sync = _embedding_sync(cluster, config, 51200 // 8 * 12288 * wire)
        assert split.pp_comm.value == pytest.approx(2 * m * _send(cluster, config, whole / 8) + changed_sync, rel=1e-12)


def _embedding_sync(cluster, config, size: float) -> float:  # type: ignore[no-untyped-def]
    layout = config.layout
    group = placement(2, layout.tp * layout.cp * layout.dp * (layout.pp - 1), cluster.gpus_per_node)  # the first and last stage
    return collective_time(Collective.ALL_REDUCE, size, group, cluster.fabric).time


def test_the_tied_embedding_gradient_is_all_reduced_between_the_pipeline_ends() -> None:
    # Megatron-LM's embedding group (training.py at 152aab304d, after the DP all-reduce), DeepSpeed's ReduceTiedGrads
    # (weight._hp_grad in fp32 under the BF16 optimizer, after the flush): once per iteration, nothing to hide behind
    model, config, training, cluster = inputs(BLOOM)
    layout = config.layout
    shard = vocab_shard(model, 4) * 14336  # V / t rows of h (250,680 padded: Megatron-LM's --make-vocab-size-divisible-by)
    assert shard == pytest.approx(898e6, rel=1e-3)
    expected = _embedding_sync(cluster, config, shard * 4)  # fp32 copies: 3.6 GB, 2 ranks on 2 nodes at 6.25 GB/s a GPU
    assert expected == pytest.approx(0.575, abs=0.005)
    assert embedding_sync_time(model, layout.tp, layout.pp, layout.dp, layout.schedule, training, cluster) == pytest.approx(expected, rel=1e-12)
    est = estimate(model, config, training, cluster)
    m = config.micro_batches(training)
    assert est.pp_comm.value == pytest.approx(2 * m * _send(cluster, config, 2 * 2048 * 14336 * 2 / 4) + expected, rel=1e-12)
    assert "T_emb" in est.pp_comm.formula
    # none without a pipeline, for untied embeddings (Llama 3 405B), or where one device holds both ends (a V schedule)
    assert embedding_sync_time(model, layout.tp, 1, layout.dp, layout.schedule, training, cluster) == 0.0
    assert embedding_sync_time(replace(model, tied_embeddings=False), layout.tp, layout.pp, layout.dp, layout.schedule, training, cluster) == 0.0
    assert embedding_sync_time(model, layout.tp, layout.pp, layout.dp, Schedule.ZB_V, training, cluster) == 0.0


def test_the_2021_runs_train_with_dropout() -> None:
    for case in (GPT3, BLOOM):
        model, config, training, cluster = inputs(case)
        assert training.dropout is True, case.key
        on = estimate(model, config, training, cluster)
        off = estimate(model, config, replace(training, dropout=False), cluster)
        # only memory-bound kernels change: the masks of attention's s x s probabilities and of both residual branches
        assert on.gemm.value == off.gemm.value and on.tp_comm.value == off.tp_comm.value
        assert on.memory_bound.value > off.memory_bound.value
    # GPT-3: 1.48 -> 2.21 s of memory-bound kernels a step; +10.7 % -> +6.0 % with the sends, the fp16 reduction and the
    # tied embedding's all-reduce
    assert error(GPT3)[0] == pytest.approx(0.060, abs=0.005)


def test_gpt3_reduces_its_fp16_gradients() -> None:
    # 152aab304d's local DDP all-reduces param.grad of the fp16 model (fp32_allreduce off unless --fp32-allreduce)
    _, _, _, cluster = inputs(GPT3)
    assert cluster.framework.reduce_bytes == 2


def test_bloom_runs_on_its_stated_network() -> None:
    _, _, _, cluster = inputs(BLOOM)
    fabric = cluster.fabric
    assert fabric.nics_per_node == 4 and fabric.inter.bandwidth_per_direction.value == 12.5e9  # 100 Gb/s
    assert fabric.nic_bandwidth_per_gpu == pytest.approx(6.25e9)  # a quarter of a DGX A100's 25 GB/s per GPU
    _, _, _, gpt3 = inputs(GPT3)  # no network stated: the preset's node, one HDR card per GPU
    assert gpt3.fabric.nics_per_node == 8 and gpt3.fabric.nic_bandwidth_per_gpu == pytest.approx(25e9)


def test_a_profile_refuses_a_scatter_gather_that_is_not_a_flag(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = {"kind": "framework", "name": "x", "sources": {"s": "a source"}, "gradient_buckets": {"min_params": 1, "source": "s"},
            "reduce_bytes": {"value": 2, "source": "s"}, "zero_stages": {"value": [0], "source": "s"},
            "pipeline_scatter_gather": {"value": "yes", "source": "s"},
            **{flag: {"value": True, "source": "s"} for flag in ("fp32_grads", "overlap_grad_reduce", "overlap_param_gather",
                                                                   "reduce_every_micro_batch", "reshard_after_forward", "tp_comm_overlap")}}  # fmt: skip
    with pytest.raises(PresetError, match=r"pipeline_scatter_gather\.value.*expected true or false"):
        framework_from_document("x", tmp_path / "x.yaml", data)
    data["pipeline_scatter_gather"] = {"value": False, "source": "s"}
    assert framework_from_document("x", tmp_path / "x.yaml", data).pipeline_scatter_gather is False


def test_the_search_sends_what_fit_sends() -> None:
    # fit_search times each configuration's pipeline send with pipeline_send_bytes too: the published row equals fit, and
    # the same layout under sequence parallelism sends 1/8 (GPT-3: 0.785 s against 0.109 s of sends)
    from parcalc.core.choices import Recompute
    from parcalc.core.fit_search import SearchSpace, search

    model, config, training, cluster = inputs(GPT3)
    fit = estimate(model, config, training, cluster)
    space = SearchSpace(tp=8, pp=16, recomputes=(Recompute.FULL,), micro_batches=(1,), zero_stages=(0,))
    columns = search(model, training, cluster, space).evaluated.columns
    rows = [i for i in range(len(columns["tp"])) if columns["dp"][i] == 8 and columns["chunks"][i] == 1]
    by_sp = {bool(columns["sequence_parallel"][i]): i for i in rows}
    assert float(columns["t_pp"][by_sp[False]]) == pytest.approx(fit.pp_comm.value, rel=1e-12)
    assert float(columns["t_step"][by_sp[False]]) == pytest.approx(fit.step.value, rel=1e-12)
    m = config.micro_batches(training)
    sync = _embedding_sync(cluster, config, 51200 // 8 * 12288 * 2)
    assert float(columns["t_pp"][by_sp[True]]) == pytest.approx(2 * m * _send(cluster, config, 2048 * 12288 * 2 / 8) + sync, rel=1e-12)
