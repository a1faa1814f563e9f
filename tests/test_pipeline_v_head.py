"""The head under a V schedule without a layout (ZB-V, DualPipeV): rank 0 runs virtual stages 0 and 2p - 1, so it holds
the embedding, the final norm, the LM head and the loss (torchtitan @b5bcd76c _get_pp_rank_to_stage_indices_mapping, style
'v'; deepseek-ai/DualPipe @3da1bbe examples/example_dualpipev.py: the loss comes out on rank 0), in memory, fit and the
search alike; before, only a --pipeline-layout placed it there."""

from __future__ import annotations

import pytest

from parcalc.core.choices import Schedule
from parcalc.core.fit import estimate
from parcalc.core.fit_search import search
from parcalc.results.fit_request import request

# Llama 3 8B: untied embedding and LM head of 128,256 x 4,096 = 525,336,576 parameters each, the final norm 4,096
# (meta-llama/Llama-3.1-8B config.json: vocab_size 128256, hidden_size 4096, tie_word_embeddings false)
EMBEDDING = HEAD = 128_256 * 4_096
NORM = 4_096


def _stages(run_json, schedule: str) -> list[dict]:
    doc = run_json("memory", "--model", "llama3-8b", "--pp", "4", "--schedule", schedule, "--seq-len", "4096", "--per-stage",
                   "--micro-batches", "8")  # DualPipeV: m >= 2p
    return doc["tables"]["stages"]["rows"]


@pytest.mark.parametrize("schedule", ["zb-v", "dualpipev"])
def test_memory_puts_the_head_on_rank_0(run_json, schedule: str) -> None:
    v = _stages(run_json, schedule)
    assert v[0]["parameters"] - v[1]["parameters"] == EMBEDDING + HEAD + NORM  # 1,050,677,248: both ends on rank 0
    assert v[-1]["parameters"] == v[1]["parameters"] and v[-1]["logits"] == 0 < v[0]["logits"]
    plain = _stages(run_json, "1f1b")  # 1F1B: the embedding on the first stage, the head and logits on the last
    assert plain[0]["parameters"] - plain[1]["parameters"] == EMBEDDING and plain[-1]["parameters"] - plain[1]["parameters"] == HEAD + NORM


def test_fit_shows_the_head_on_gpu_0(run_json) -> None:
    doc = run_json("fit", "--model", "llama3-8b", "--gpus", "32", "--gpu", "h100-sxm5", "--tp", "4", "--pp", "4", "--dp", "2",
                   "--batch", "64", "--seq-len", "4096", "--schedule", "zb-v")  # fmt: skip
    rows = doc["tables"]["stages"]["rows"]
    assert rows[0]["also"] == "embedding, LM head" and all(r["also"] == "" for r in rows[1:])


@pytest.mark.parametrize("schedule", [Schedule.ZB_V, Schedule.DUALPIPEV])
def test_the_search_counts_the_head_where_the_v_puts_it(schedule: Schedule) -> None:
    """Every pipelined row of a V search carries the memory and step fit gives its configuration (rank 0 with both ends)."""
    req = request(search=True, model="llama3-8b", gpus="16", gpu=["h100-sxm5"], seq_len="4096", batch="64", schedule=schedule.value,
                  pp="4")  # fmt: skip
    found = search(req.model, req.training, req.cluster, req.space)
    c = found.evaluated.columns
    rows = [i for i in range(len(found.evaluated)) if c["fits"][i]][::7][:10]
    assert rows
    for i in rows:
        config = found.evaluated.config(i)
        scalar = estimate(req.model, config, req.training, req.cluster)
        assert c["memory"][i] == pytest.approx(scalar.total_memory, rel=1e-9), config.label()
        assert c["t_step"][i] == pytest.approx(scalar.step.value, rel=1e-9), config.label()
