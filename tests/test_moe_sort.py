"""The all-to-all dispatcher's sort into expert order and back (parcalc.core.timing.moe, SORT_SOURCE).

After Megatron-Core's all-to-all the received token copies arrive in source-rank order; with several local experts the
dispatcher sorts them into expert order (dispatch_postprocess, 'Permutation 2') and back before the combine
(combine_preprocess, 'Unpermutation 2'), each a read and a write of every copy (Transformer Engine's fused
sort_chunks_by_map, its backward the same for the gradients). TorchTitan's all-to-all dispatcher does the same
(_permute / _unpermute). DeepEP and HybridEP permute the received tokens once, the permute parcalc already times.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import modern_cases

from parcalc.core.timing.compute import layer_passes
from parcalc.core.timing.moe import SORT_SOURCE
from parcalc.core.timing.step import _layer_shard

QWEN235_FP8 = "mbridge2604-qwen3-235b-256xh100-fp8"  # all-to-all dispatcher, EP 32, 4 local experts, TP 2 with SP


def _passes(key: str, **experts: object):  # type: ignore[no-untyped-def]
    case = next(c for c in modern_cases.CASES + modern_cases.KNOWN_GAPS if c.key == key)
    model, config, training, cluster = modern_cases.inputs(case)
    shard = _layer_shard(model, config.layout, config.micro_batch, training, cluster)
    return layer_passes(model, shard, cluster.spec, replace(config.experts(), **experts))


def _by_key(kernels):  # type: ignore[no-untyped-def]
    return {k.key: k for k in kernels}


def test_sort_moves_every_received_copy_both_ways_on_qwen3_235b() -> None:
    """Qwen3-235B-A22B on the FP8 row's layout: T = 4096 / TP 2 = 2,048 routed tokens (SP), top 8, so 16,384 copies a rank
    sends and (balanced) receives, 4 local experts of 4,096 rows; hidden 4,096 in BF16 (the dispatch stays BF16 under FP8).
    Sort: 2 x (2 x 4,096 + 4) x 16,384 = 268,566,528 bytes (tokens and their fp32 probs read and written); unsort: the
    tokens only, 268,435,456; the same again backward."""
    passes = _passes(QWEN235_FP8)
    forward, backward = _by_key(passes.forward), _by_key(passes.backward)
    assert forward["moe.sort"].bytes == backward["moe.sort.bwd"].bytes == 2 * (2 * 4096 + 4) * 16384
    assert forward["moe.unsort"].bytes == backward["moe.unsort.bwd"].bytes == 2 * 2 * 4096 * 16384
    keys = [k.key for k in passes.forward]
    # after the dispatch (permute, all-to-all), before the experts; back before the un-permute and the combine
    assert keys.index("moe.permute") < keys.index("moe.sort") < keys.index("moe.experts.fc1")
    assert keys.index("moe.experts.fc2") < keys.index("moe.unsort") < keys.index("moe.unpermute")
    # memory-bound at the rate of the permute beside it (both move over 100 MB: the H100 preset's memory kernel rate),
    # 89 us each on the H100 SXM5 (268.6 MB at about 3.0 TB/s)
    permute = forward["moe.permute"]
    assert forward["moe.sort"].bound == "memory"
    assert forward["moe.sort"].time / forward["moe.sort"].bytes == pytest.approx(permute.time / permute.bytes, rel=1e-6)
    assert forward["moe.sort"].time == pytest.approx(89e-6, rel=0.02)


def test_no_sort_where_the_dispatcher_or_the_experts_need_none() -> None:
    # DeepEP and HybridEP permute the received tokens once (the permute); one local expert needs no sorting; without EP
    # there is no all-to-all
    for experts in ({"dispatcher": "deepep"}, {"dispatcher": "hybridep"}, {"ep": 128}, {"ep": 1}):
        keys = {k.key for k in _passes(QWEN235_FP8, **experts).forward}
        assert "moe.sort" not in keys and "moe.unsort" not in keys, experts
    # the family's other rows: DeepEP (DeepSeek-V3, Qwen3-235B BF16) and HybridEP (Qwen3-30B) have no sort
    for case in modern_cases.CASES:
        if "moe" in case.run.categories and case.dispatcher != "alltoall":
            assert "moe.sort" not in {k.key for k in _passes(case.key).forward}, case.key


def test_sort_source_names_both_stacks() -> None:
    assert "sort_chunks_by_idxs" in SORT_SOURCE and "@2edffadb" in SORT_SOURCE  # Megatron-LM
    assert "sort_chunks_by_map" in SORT_SOURCE  # Transformer Engine's fused kernel
    assert "torchtitan" in SORT_SOURCE  # TorchTitan's _permute
