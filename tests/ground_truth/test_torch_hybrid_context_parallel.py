"""Ground truth: a hybrid model's recurrent mixers under context parallelism in real PyTorch (CPU, gloo) against
parcalc.core.hybrid_context.

tests/ground_truth/hybrid_cp_worker.py runs a Mamba-2 mixer (4 heads of 2, state 3, ONE group: at cp 2 and 4 its B and C
are repeated, MambaContextParallel.group_repeat_count) and a gated-DeltaNet mixer (4 key heads, 8 value heads, dims 2 and
3) from in_proj's output to out_proj's input, b 2, s 16, fp64, split over 2 and 4 ranks as Megatron-Core does: the
all-to-alls around the conv1d and the scan, no state between ranks. The test asks that (1) every rank's output and input
gradient equal the unsplit mixer's (the head split over whole sequences is the whole exchange) and (2) the bytes each
rank sends, call by call, forward and backward, equal parcalc's.

Needs torch (CPU wheel); about 10 s.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from parcalc.core.hybrid_context import mixer_a2a_buffers, mixer_cp_sent
from parcalc.core.linear_attention import GatedDeltaNet
from parcalc.core.mamba import Mamba2
from parcalc.core.model import Mlp, Norm, Position, TransformerModel

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("hybrid_cp_worker.py")
BATCH, SEQ, FP64 = 2, 16, 8.0  # hybrid_cp_worker.py's shapes
MIXERS = {
    "mamba": {"mamba": Mamba2(heads=4, head_dim=2, state=3, groups=1, conv_kernel=3, chunk=8, pattern="M")},
    "gdn": {"linear_attention": GatedDeltaNet(key_heads=4, value_heads=8, key_head_dim=2, value_head_dim=3, conv_kernel=3)},
}


def model_of(mixer: str) -> TransformerModel:
    return TransformerModel(key=f"hybrid-cp-{mixer}", name="hybrid cp ground truth", layers=1, hidden=8, heads=4, kv_heads=4,
                            head_dim=2, ffn_hidden=16, mlp=Mlp.GELU, vocab=0, max_seq_len=SEQ, tied_embeddings=False,
                            position=Position.ROPE, norm=Norm.RMSNORM, bias=False, source=str(WORKER), **MIXERS[mixer])  # fmt: skip


@pytest.fixture(scope="module", params=[("mamba", 2), ("mamba", 4), ("gdn", 2), ("gdn", 4)], ids=["mamba-cp2", "mamba-cp4", "gdn-cp2", "gdn-cp4"])
def measured(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, int, list[dict]]:
    mixer, world = request.param
    for attempt in range(2):  # the free port can be taken before rank 0 binds it: retry once
        out = tmp_path_factory.mktemp(f"hybrid-cp-{mixer}-{world}-")
        process = subprocess.run([sys.executable, str(WORKER), "--mixer", mixer, "--world", str(world), "--out", str(out)],
                                 capture_output=True, text=True, timeout=300)  # fmt: skip
        if process.returncode == 0 or "address already in use" not in process.stderr.lower() or attempt:
            break
    assert process.returncode == 0, process.stderr[-4000:]
    return mixer, world, [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]


def test_split_mixer_equals_unsplit_mixer(measured: tuple[str, int, list[dict]]) -> None:
    """No state passes between the ranks, yet every rank's output and input gradient equal the unsplit mixer's (fp64)."""
    _, _, ranks = measured
    for rank in ranks:
        for name, error in rank["errors"].items():
            assert error < 1e-12, (name, error)


def test_bytes_each_rank_sends(measured: tuple[str, int, list[dict]]) -> None:
    """Per call, forward: (cp - 1)/cp of each buffer b (s/cp) w e in Megatron-Core's order (Mamba-2: z, x, B, C, dt, then the
    output back; gated DeltaNet: in_proj's output, then the gated norm's output back); backward the same calls transposed.
    By hand at cp 2, Mamba-2: z and x 1/2 x 2 x 8 x 8 x 8 B = 512, B and C (3 x 2 repeats) 384, dt (4) 256."""
    mixer, cp, ranks = measured
    model = model_of(mixer)
    expected = [(cp - 1) / cp * size for _, size in mixer_a2a_buffers(model, BATCH, SEQ, 1, cp, FP64)]
    if (mixer, cp) == ("mamba", 2):
        assert expected == [512, 512, 384, 384, 256, 512]
    for rank in ranks:
        assert rank["sent"]["forward"] == expected
        assert sorted(rank["sent"]["backward"]) == sorted(expected)
        assert sum(rank["sent"]["forward"]) == mixer_cp_sent(model, BATCH, SEQ, 1, cp, FP64)
