"""DeepSeek-V3's published pre-training configuration in parcalc's memory and FLOPs (issue #13).

The run, quoted from DeepSeek-AI, 'DeepSeek-V3 Technical Report' (arXiv:2412.19437), read in the stored
conversion found with find_string (index id 60572378208; the sentences also in tests/published_modern_runs.py):
- sec. 3.1: '2048 NVIDIA H800 GPUs. Each node in the H800 cluster contains 8 GPUs connected by NVLink and
  NVSwitch within nodes'.
- sec. 3.2: '16-way Pipeline Layout (PP), 64-way Expert Layout (EP) spanning 8 nodes, and ZeRO-1
  Data Layout (DP)' ... 'without using costly Tensor Layout (TP)'. So dp = 2048 / 16 = 128 and
  the expert-data-parallel size 128 / 64 = 2 (Megatron-Core folding, parcalc.core.expert_parallel).
- sec. 4.2: 'The maximum sequence length is set to 4K during pre-training ... the batch size is gradually
  increased from 3072 to 15360 in the training of the first 469B tokens, and then keeps 15360'.
- sec. 3.3.3: 'We adopt the BF16 data format instead of FP32 to track the first and second moments in the
  AdamW ... However, the master weights (stored by the optimizer) and gradients (used for batch size
  accumulation) are still retained in FP32'.
- sec. 3.3.1 keeps 'the embedding module, the output head, MoE gating modules, normalization operators, and
  attention operators' in BF16/FP32; sec. 3.3.2 quantises online per 1x128 activation tile and 128x128
  weight block; sec. 3.3.3 caches linear inputs in FP8 (E5M6 for the input of the linear after attention).
- sec. 3.2.1: 'Although DualPipe requires keeping two copies of the model parameters, this does not
  significantly increase the memory consumption since we use a large EP size'; Table 2: DualPipe
  parameters 2x, activation PP + 1.
- sec. 3.2.3: 'We recompute all RMSNorm operations and MLA up-projections during back-propagation'.
- sec. 1 / 4.4.2: 'training DeepSeek-V3 on each trillion tokens requires only 180K H800 GPU hours'.

What parcalc does NOT model here, stated rather than hidden (each checked below where it can be):
- DualPipe: parcalc schedules it (--schedule dualpipe: dualpipe.py's order, both stages' states, p + 1 in flight;
  tests/test_schedule_step.py) for equal stages only (device d runs stage d one way and p - 1 - d the other), and this
  run's 61 layers over 16 stages are not equal (4 | 4 x 14 | 1 assumed), so the checks below run 1F1B (in flight p - i)
  and count the second parameter copy by hand (+weights of one more stage copy).
- The report's BF16 AdamW moments: parcalc's --precision fp8 (Transformer Engine's recipe) keeps FP32
  moments (K = 4 + 2 x 4 = 12 bytes per parameter); the report's K = 4 + 2 x 2 = 8. The difference is
  computed below; no flag expresses it.
- FP8: parcalc's recipe is TE's per-tensor one (cached FP8 weight and transpose per linear, counted with
  dense-layer shapes: for an MoE layer it counts a dense MLP, not the local experts); the report's
  block-wise online quantisation caches no FP8 weight copy that it states.
- Recomputation of RMSNorm and MLA up-projections: not expressible (--recompute is none/selective/full);
  MLA activations are counted as standard attention of head_dim 128 (Q, K, V as 2sbh each).
- MTP (depth 1, the report's 14B module): not modelled (the 671B main model only), nor micro-batch size
  (not published: 1 assumed) nor the layer split over 16 stages (not published: 4 | 4 x 14 | 1 assumed).
"""

from __future__ import annotations

import pytest

from parcalc.core.choices import Precision
from parcalc.core.flops import training_flops
from parcalc.core.layout import Layout
from parcalc.core.memory import memory_breakdown
from parcalc.core.training_setup import TrainingSetup
from parcalc.presets import load_gpu, load_model

H, HEADS, S, L = 7168, 128, 4096, 61  # sec. 4.2 / Hugging Face config.json (presets/models/deepseek-v3.yaml)
EXPERT = 3 * H * 2048  # one routed expert: gate, up, down of moe_intermediate_size 2048 = 44,040,192
# MLA of one layer (transformers DeepseekV3Attention): q_a 7168x1536, q_a_norm 1536, q_b 1536 x 128 x (128+64),
# kv_a 7168 x (512+64), kv_a_norm 512, kv_b 512 x 128 x (128+128), o 128 x 128 x 7168
MLA = H * 1536 + 1536 + 1536 * HEADS * 192 + H * 576 + 512 + 512 * HEADS * 256 + HEADS * 128 * H
ROUTER = 256 * H + 256  # weight (experts x hidden) and the e_score_correction_bias
MOE_DENSE = MLA + 2 * H + ROUTER + EXPERT  # attention, 2 RMSNorms, router, 1 shared expert


@pytest.fixture(scope="module")
def run():  # type: ignore[no-untyped-def]
    model = load_model("deepseek-v3")
    par = Layout(tp=1, pp=16, dp=128, zero=1, first_stage_layers=4, last_stage_layers=1, ep=64)
    # 15360 sequences / 128 DP ranks = 120 micro-batches of 1 sequence per pipeline (micro-batch size not published)
    setup = TrainingSetup(micro_batch=1, seq_len=S, precision=Precision.FP8, fp32_grads=True, flash_attention=True, micro_batches=120)
    return model, par, memory_breakdown(model, par, setup)


def test_hand_counted_mla_and_moe_layer() -> None:
    assert MLA == 187_107_328  # hand sum of the seven tensors above
    assert MOE_DENSE == 232_997_120
    model = load_model("deepseek-v3")
    assert model.attention_params_per_layer == MLA
    assert model.moe_layer_params == MOE_DENSE + 256 * EXPERT


def test_parameters_on_one_gpu_of_a_middle_stage(run) -> None:  # type: ignore[no-untyped-def]
    """Stage 2 of 16: 4 MoE layers; each GPU holds the MLA, norms, router and shared expert of each (no TP)
    and 256 / 64 = 4 routed experts per layer (sec. 4.2: 'routed experts ... uniformly deployed on 64 GPUs')."""
    _, _, b = run
    stage = b.stages[1]
    dense, experts = 4 * MOE_DENSE, 4 * (256 // 64) * EXPERT
    assert (dense, experts) == (931_988_480, 704_643_072)
    assert stage.parameters.value == dense + experts == 1_636_631_552


def test_model_states_of_a_middle_stage_gpu(run) -> None:  # type: ignore[no-untyped-def]
    """Weights bf16 (2 B), gradients fp32 (4 B, sec. 3.3.3: 'gradients ... retained in FP32'), ZeRO-1 shards the
    optimizer: dense part over the 128 DP ranks, experts over the 2 expert-DP ranks."""
    _, _, b = run
    st = b.stages[1].states
    dense, experts = 931_988_480, 704_643_072
    assert st.weights.value == 2 * (dense + experts) == 3_273_263_104
    assert st.gradients.value == 4 * (dense + experts) == 6_546_526_208
    sharded = dense / 128 + experts / 2  # 7,281,160 + 352,321,536
    assert st.optimizer.value == pytest.approx(12 * sharded) == pytest.approx(4_315_232_352)
    # The report's recipe: fp32 master (4) + BF16 moments (2 x 2) = 8 bytes: 1.44e9 bytes (1.34 GiB) less per GPU
    report_optimizer = 8 * sharded
    assert report_optimizer == pytest.approx(2_876_821_568)
    assert st.optimizer.value - report_optimizer == pytest.approx(1_438_410_784)
    # DualPipe's second parameter copy (not counted by parcalc): one more stage of bf16 weights, 3.27e9 bytes
    assert 2 * (dense + experts) / 2**30 == pytest.approx(3.0485, abs=1e-4)


def test_activations_and_total_of_the_first_stage(run) -> None:  # type: ignore[no-untyped-def]
    """1F1B keeps p - i micro-batches in flight (stage 1: 16). An MoE layer's saved tensors include its top_k = 8
    permuted token copies and 8 expert outputs, each 8 s h x 2 bytes (parcalc.core.activations.moe_tensors)."""
    model, _, b = run
    first = b.stages[0]
    assert first.in_flight.value == 16
    assert b.stages[1].in_flight.value == 15
    copies = 8 * S * H * 2
    assert copies == 469_762_048
    from parcalc.core.activations import layer_activations

    moe = layer_activations(model, b.layer.config, moe_layer=True).per_layer.value
    assert first.activations.value == pytest.approx((3 * b.layer.per_layer.value + 1 * moe) * 16)
    # parcalc's verdict on this configuration: without the report's recomputation of norms and MLA
    # up-projections, its FP8 activation caching and DualPipe, 1F1B with micro-batch 1 does not fit 80 GiB
    # on stage 2 (the fullest): activations alone are 4 layers x 15 x A_moe.
    assert b.stages[1].activations.value == pytest.approx(4 * 15 * moe)
    capacity = load_gpu("h800-sxm5").memory_capacity.value
    assert capacity == 80 * 2**30
    assert b.worst.total.value > capacity


def test_flops_per_token_against_6n_active() -> None:
    """Model FLOPs per token, causal attention halved, no recomputation, no MTP.

    6 N_active counts every active parameter (37,552,297,472, the report's '37B') twice in the forward and
    four times in the backward. parcalc's exact count differs by (a) the attention core that holds no
    parameters: scores 2 n_h (d_nope + d_rope) s/2 and context 2 n_h d_v s/2 per token and layer forward,
    x 3 for forward + backward; (b) the word embedding (a lookup, no matmul) and the norm and router-bias
    vectors that 6N counts and no matmul uses."""
    import dataclasses

    model = dataclasses.replace(load_model("deepseek-v3"), mtp_layers=0)  # the main model (the preset trains one MTP module)
    counted = training_flops(model, 15360, S, causal=True)
    six_n = 6 * model.active_params
    assert six_n == 225_313_784_832
    attention = 3 * L * (2 * HEADS * 192 * S // 2 + 2 * HEADS * 128 * S // 2)  # 30,702,305,280
    embedding = 129280 * H  # 926,679,040
    vectors = L * (2 * H + 1536 + 512) + H + 58 * 256  # RMSNorms, latent norms, final norm, router biases: 1,021,440
    expected = six_n + attention - 6 * (embedding + vectors)
    assert expected == 250_449_887_232
    assert counted.model_per_token.value == expected
    assert counted.model_per_token.value / six_n == pytest.approx(1.1116, abs=1e-4)


def test_mtp_adds_one_module_per_token() -> None:
    """The run trained with MTP depth 1 (report sec. 4.2; config.json num_nextn_predict_layers 1): per token one more
    MoE block (2 x its 11.5B-parameter active share: MLA, router, 8 + 1 experts, and its attention core), eh_proj
    (2 x 2h x h) and the shared head (2 h V), forward and backward (x 3): 250.45 -> 260.64 GFLOP per token (+4.07 %)."""
    model = load_model("deepseek-v3")
    assert model.mtp_layers == 1
    counted = training_flops(model, 15360, S, causal=True)
    mla = 2 * (H * 1536 + 1536 * HEADS * 192 + H * 576 + 512 * HEADS * 256 + HEADS * 128 * H) + 2 * S * HEADS * (192 + 128) / 2
    moe_block = mla + 2 * H * 256 + 2 * 3 * H * 2048 * (8 + 1)
    module = 2 * 2 * H * H + moe_block + 2 * H * 129280
    assert counted.model_per_token.value == pytest.approx(250_449_887_232 + 3 * module, rel=1e-12)
    assert counted.model_per_token.value == 260_641_652_736


def test_what_the_report_throughput_implies() -> None:
    """sec. 1: 180K H800 GPU-hours per trillion tokens. With parcalc's 250.45 GFLOP per token that is
    2.5045e23 FLOP / (180,000 x 3600 s) = 386.5 TFLOP/s per GPU: 19.5 % of the FP8 dense peak (1978.9) and 39.1 %
    of the BF16 one (989.4) (MTP's extra layer and the recomputation not counted: a lower bound on work done)."""
    per_gpu = 250_449_887_232 * 1e12 / (180_000 * 3600)
    assert per_gpu == pytest.approx(386.5e12, rel=1e-3)
    h800 = load_gpu("h800-sxm5")
    assert per_gpu / h800.dtypes["fp8"].dense_peak.value == pytest.approx(0.1953, abs=1e-4)
    assert per_gpu / h800.dtypes["bf16"].dense_peak.value == pytest.approx(0.3906, abs=1e-4)


def test_h800_preset_values() -> None:
    """presets/gpus/h800-sxm5.yaml: NVLink 400 GB/s both directions = 200 GB/s each way; 80 GiB; 3.35 TB/s."""
    gpu = load_gpu("h800-sxm5")
    assert gpu.nvlink_bandwidth is not None and gpu.nvlink_bandwidth.value == 200e9
    assert gpu.memory_bandwidth.value == 3.35e12
    assert gpu.dtypes["fp64"].dense_peak.value == 1e12
    assert gpu.sms is None  # no H800 datasheet found: not copied from the H100
