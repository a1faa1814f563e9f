"""Published kernel measurements of AMD Instinct GPUs (MI300X, MI325X, MI355X), as plain data.

No tests live here and nothing from parcalc is imported (tests/test_amd_kernels.py holds the presets against these
rows). Every number was read from the file named with it, at the commit named; the CSV blocks are the files' own lines.

Conventions (the sources' own, which are parcalc's): a GEMM of an M x K operand and a K x N one is 2 M N K FLOP, its
backward (dgrad and wgrad) twice that; fused attention's forward counts 4 b s^2 h_q d FLOP (2 b s^2 h_q (d_qk + d_v)),
halved under a causal mask, its backward 2.5 times the forward.

Sources
-------
- AMD-AGI/Primus-Turbo (AMD's training kernel library) output/baseline_gemm.csv and output/baseline_attention.csv at
  commit 221d75f157bb35d46f718056212e93da56e85cd2 (2026-04-03, 'Round 8-9: tl.assume hints + NN backward disable
  async_copy'; the baseline files of its blockwise-FP8 campaign, which does not touch BF16 GEMMs or attention), written by
  benchmark/ops/bench_gemm_turbo.py and bench_attention_turbo.py at that commit on an 'MI300X' (the GPU column).
  GEMMs: turbo.ops.gemm(a, b, trans_b=True), a (M, K) and b (N, K) in bf16, whose default backend is hipBLASLt
  (primus_turbo/pytorch/ops/gemm.py: default_backend=BackendType.HIPBLASLT); 'Forward' one GEMM (M x N output, inner K),
  'Backward' out.backward(grad_out): dgrad and wgrad, 2 x 2 M N K FLOP; 20 warm-up passes, then
  torch.utils.benchmark.Timer(...).timeit(100) of each, back to back (a GEMM loop at the board's power limit, 750 W).
  The M, N, K of each model's four linears (QKV, output, gate+up, down) at micro-batches 1, 2 and 4 of its sequence
  (benchmark/ops/config.py DenseModelConfigs: Llama-3.1-8B hidden 4096, intermediate 14336, seqlen 8192; ...).
  Attention: turbo.ops.flash_attn_func, which runs AITER's kernels (AiterFlashAttnFunc in
  primus_turbo/pytorch/ops/attention/flash_attn_interface.py: attention_aiter_forward_impl / _backward_impl), bf16,
  layout (batch, seq, heads, dim), FLOPs 2 b s^2 h_q (d_qk + d_v), halved when causal, backward 2.5x; Timer.timeit(100).
  Only the causal rows of head dims 128 and 64 are copied (the 192 / 128 rows are MLA's, which parcalc's dense-attention
  presets do not time).
  FP8 GEMMs: benchmark/results_optimized/gemm_fp8_tensorwise_optimized.csv at the same commit, the same GPU and run (its
  BF16 twin, results_optimized/gemm_bf16_optimized.csv, repeats output/baseline_gemm.csv's backward times within 1 %),
  written by bench_gemm_turbo.py's profile_gemm_fp8: turbo.ops.gemm_fp8(a, b, trans_b=True, config=Float8QuantConfig(
  format=E4M3, granularity=TENSORWISE)) on the same 84 shapes, a and b in bf16. The timed call quantises its inputs
  (primus_turbo/pytorch/ops/gemm_fp8.py FP8GemmTensorFunction.forward: quantize_fp8(a), quantize_fp8(b), then
  gemm_fp8_impl(..., default_backend=BackendType.HIPBLASLT); csrc/pytorch/quantization/quantization.cpp
  quantize_fp8_tensorwise: reduce_row REDUCE_ABS_MAX over the tensor, compute_scale_from_amax, quantize_tensorwise_impl),
  'Forward' the two quantisations and one FP8 GEMM, 'Backward' the quantisation of grad_out and the dgrad and wgrad GEMMs
  (a and b stay quantised from the forward); FLOPs counted as for BF16.
- HazyResearch/HipKittens (Hu et al. 2025, 'HipKittens: Fast and Furious AMD Kernels', arXiv:2511.08083) at commit
  f09e9685c4c6aaa41fb3ebd4fe4ca664938589e1 (2025-11-20), analysis/*: the baselines its paper compares against, measured
  by its scripts: square BF16 torch.matmul (PyTorch's hipBLASLt) on an MI325X (analysis/bf16_gemm/mi325x/
  mi325x_bf16_gemm.json, 'tflops_pytorch') and an MI355X (analysis/bf16_gemm/mi350x/mi355x_bf16_gemm.json), square FP8
  hipBLASLt on an MI355X (analysis/fp8_gemm/mi350x/mi355x_fp8_gemm.json, 'tflops_hipblaslt'); 500 warm-up calls, then
  100 calls each timed with CUDA (HIP) events. Attention on an MI355X: AITER's aiter.flash_attn_func ('tflops_ref',
  analysis/attn/fwd/benchmark/test_python.py prints it as 'AITER (AMD) reference performance'), bf16, head dim 128,
  causal, MHA b 16 x 16 heads and GQA b 16 x 64 query / 8 KV heads (b 15 at 16,384 tokens), forward
  (mi355x_{mha,gqa}_causal_fwd.json) and backward (out.backward(dO) alone timed, mi355x_{mha,gqa}_bkwd_causal.json;
  analysis/attn/bkwd/benchmark/test_python.py flops(..., mode='bwd') = 2.5 x the causal forward count).
"""

from __future__ import annotations

from typing import NamedTuple

PRIMUS_TURBO = "AMD-AGI/Primus-Turbo @221d75f157bb35d46f718056212e93da56e85cd2"
HIPKITTENS = "HazyResearch/HipKittens @f09e9685c4c6aaa41fb3ebd4fe4ca664938589e1"

PRIMUS_TURBO_MI300X_BF16_GEMMS = """\
TestID,Platform,GPU,Case,MBS,M,N,K,Dtype,Check,Forward Time (ms),Forward TFLOPS,Backward Time (ms),Backward TFLOPS
1,ROCm,MI300X,Llama-2-7B,1,4096,12288,4096,bf16,PASS,0.67,615.33,1.43,575.91
2,ROCm,MI300X,Llama-2-7B,1,4096,4096,4096,bf16,PASS,0.22,614.68,0.51,541.07
3,ROCm,MI300X,Llama-2-7B,1,4096,22016,4096,bf16,PASS,1.25,592.68,2.53,584.31
4,ROCm,MI300X,Llama-2-7B,1,4096,4096,11008,bf16,PASS,0.58,640.47,1.42,519.50
5,ROCm,MI300X,Llama-2-7B,2,8192,12288,4096,bf16,PASS,1.29,638.59,2.76,596.53
6,ROCm,MI300X,Llama-2-7B,2,8192,4096,4096,bf16,PASS,0.43,631.97,0.97,569.43
7,ROCm,MI300X,Llama-2-7B,2,8192,22016,4096,bf16,PASS,2.35,629.75,4.89,604.47
8,ROCm,MI300X,Llama-2-7B,2,8192,4096,11008,bf16,PASS,1.15,645.13,2.64,560.65
9,ROCm,MI300X,Llama-2-7B,4,16384,12288,4096,bf16,PASS,2.58,638.85,5.42,608.44
10,ROCm,MI300X,Llama-2-7B,4,16384,4096,4096,bf16,PASS,0.87,635.35,1.88,583.60
11,ROCm,MI300X,Llama-2-7B,4,16384,22016,4096,bf16,PASS,4.68,631.69,9.60,615.30
12,ROCm,MI300X,Llama-2-7B,4,16384,4096,11008,bf16,PASS,2.39,617.19,5.19,569.10
13,ROCm,MI300X,Llama-2-70B,1,4096,10240,8192,bf16,PASS,1.07,643.94,2.39,574.71
14,ROCm,MI300X,Llama-2-70B,1,4096,8192,8192,bf16,PASS,0.86,635.93,1.90,578.61
15,ROCm,MI300X,Llama-2-70B,1,4096,57344,8192,bf16,PASS,6.23,617.81,13.17,584.28
16,ROCm,MI300X,Llama-2-70B,1,4096,8192,28672,bf16,PASS,3.32,578.81,6.95,553.60
17,ROCm,MI300X,Llama-2-70B,2,8192,10240,8192,bf16,PASS,2.14,640.78,4.56,602.65
18,ROCm,MI300X,Llama-2-70B,2,8192,8192,8192,bf16,PASS,1.68,655.93,3.66,601.22
19,ROCm,MI300X,Llama-2-70B,2,8192,57344,8192,bf16,PASS,12.63,609.19,25.05,614.53
20,ROCm,MI300X,Llama-2-70B,2,8192,8192,28672,bf16,PASS,6.65,579.12,13.34,576.89
21,ROCm,MI300X,Llama-2-70B,4,16384,10240,8192,bf16,PASS,4.33,634.16,9.08,605.49
22,ROCm,MI300X,Llama-2-70B,4,16384,8192,8192,bf16,PASS,3.45,636.72,7.19,611.86
23,ROCm,MI300X,Llama-2-70B,4,16384,57344,8192,bf16,PASS,25.48,604.20,50.48,609.85
24,ROCm,MI300X,Llama-2-70B,4,16384,8192,28672,bf16,PASS,13.40,574.38,26.58,579.14
25,ROCm,MI300X,Llama-3.1-8B,1,8192,6144,4096,bf16,PASS,0.66,621.04,1.47,559.63
26,ROCm,MI300X,Llama-3.1-8B,1,8192,4096,4096,bf16,PASS,0.44,621.98,0.98,560.45
27,ROCm,MI300X,Llama-3.1-8B,1,8192,28672,4096,bf16,PASS,3.06,628.88,6.28,612.37
28,ROCm,MI300X,Llama-3.1-8B,1,8192,4096,14336,bf16,PASS,1.54,624.23,3.30,583.11
29,ROCm,MI300X,Llama-3.1-8B,2,16384,6144,4096,bf16,PASS,1.32,623.13,2.87,573.73
30,ROCm,MI300X,Llama-3.1-8B,2,16384,4096,4096,bf16,PASS,0.88,622.43,1.92,571.70
31,ROCm,MI300X,Llama-3.1-8B,2,16384,28672,4096,bf16,PASS,6.19,622.17,12.30,625.55
32,ROCm,MI300X,Llama-3.1-8B,2,16384,4096,14336,bf16,PASS,3.17,606.13,6.47,594.92
33,ROCm,MI300X,Llama-3.1-8B,4,32768,6144,4096,bf16,PASS,2.61,632.00,5.80,568.70
34,ROCm,MI300X,Llama-3.1-8B,4,32768,4096,4096,bf16,PASS,1.77,621.97,3.80,579.30
35,ROCm,MI300X,Llama-3.1-8B,4,32768,28672,4096,bf16,PASS,12.38,621.92,24.83,619.93
36,ROCm,MI300X,Llama-3.1-8B,4,32768,4096,14336,bf16,PASS,6.15,625.32,13.11,587.20
37,ROCm,MI300X,Llama-3.1-405B,1,8192,18432,16384,bf16,PASS,8.75,565.40,17.26,573.40
38,ROCm,MI300X,Llama-3.1-405B,1,8192,16384,16384,bf16,PASS,7.88,558.48,15.02,585.49
39,ROCm,MI300X,Llama-3.1-405B,1,8192,106496,16384,bf16,PASS,48.14,593.82,97.12,588.69
40,ROCm,MI300X,Llama-3.1-405B,1,8192,16384,53248,bf16,PASS,25.33,564.37,50.38,567.47
41,ROCm,MI300X,Llama-3.1-405B,2,16384,18432,16384,bf16,PASS,17.15,576.90,34.94,566.43
42,ROCm,MI300X,Llama-3.1-405B,2,16384,16384,16384,bf16,PASS,14.52,605.89,30.01,586.25
43,ROCm,MI300X,Llama-3.1-405B,2,16384,106496,16384,bf16,PASS,97.24,587.98,191.33,597.64
44,ROCm,MI300X,Llama-3.1-405B,2,16384,16384,53248,bf16,PASS,48.02,595.30,97.70,585.19
45,ROCm,MI300X,Llama-3.1-405B,4,32768,18432,16384,bf16,PASS,34.27,577.55,68.71,576.06
46,ROCm,MI300X,Llama-3.1-405B,4,32768,16384,16384,bf16,PASS,29.05,605.68,60.01,586.32
47,ROCm,MI300X,Llama-3.1-405B,4,32768,106496,16384,bf16,PASS,195.04,586.28,378.06,604.93
48,ROCm,MI300X,Llama-3.1-405B,4,32768,16384,53248,bf16,PASS,96.27,593.90,190.59,599.97
49,ROCm,MI300X,Qwen2.5-7B,1,8192,4608,3584,bf16,PASS,0.46,587.22,0.99,544.84
50,ROCm,MI300X,Qwen2.5-7B,1,8192,3584,3584,bf16,PASS,0.34,616.45,0.80,526.82
51,ROCm,MI300X,Qwen2.5-7B,1,8192,37888,3584,bf16,PASS,3.77,590.66,7.49,594.23
52,ROCm,MI300X,Qwen2.5-7B,1,8192,3584,18944,bf16,PASS,1.86,599.57,4.17,533.29
53,ROCm,MI300X,Qwen2.5-7B,2,16384,4608,3584,bf16,PASS,0.91,592.32,1.92,564.36
54,ROCm,MI300X,Qwen2.5-7B,2,16384,3584,3584,bf16,PASS,0.68,615.36,1.55,544.66
55,ROCm,MI300X,Qwen2.5-7B,2,16384,37888,3584,bf16,PASS,7.57,587.85,14.50,613.94
56,ROCm,MI300X,Qwen2.5-7B,2,16384,3584,18944,bf16,PASS,3.74,595.60,8.47,525.60
57,ROCm,MI300X,Qwen2.5-7B,4,32768,4608,3584,bf16,PASS,1.79,605.50,3.82,565.94
58,ROCm,MI300X,Qwen2.5-7B,4,32768,3584,3584,bf16,PASS,1.36,617.12,3.07,547.94
59,ROCm,MI300X,Qwen2.5-7B,4,32768,37888,3584,bf16,PASS,15.33,580.47,29.05,612.68
60,ROCm,MI300X,Qwen2.5-7B,4,32768,3584,18944,bf16,PASS,7.45,597.34,16.71,532.68
61,ROCm,MI300X,Qwen2.5-72B,1,8192,10240,8192,bf16,PASS,2.20,625.47,4.70,585.19
62,ROCm,MI300X,Qwen2.5-72B,1,8192,8192,8192,bf16,PASS,1.74,630.43,3.77,582.53
63,ROCm,MI300X,Qwen2.5-72B,1,8192,59136,8192,bf16,PASS,13.36,594.22,26.90,590.09
64,ROCm,MI300X,Qwen2.5-72B,1,8192,8192,29568,bf16,PASS,6.90,575.18,14.27,556.23
65,ROCm,MI300X,Qwen2.5-72B,2,16384,10240,8192,bf16,PASS,4.44,619.48,9.32,590.12
66,ROCm,MI300X,Qwen2.5-72B,2,16384,8192,8192,bf16,PASS,3.51,626.02,7.39,595.39
67,ROCm,MI300X,Qwen2.5-72B,2,16384,59136,8192,bf16,PASS,26.97,588.65,53.90,589.06
68,ROCm,MI300X,Qwen2.5-72B,2,16384,8192,29568,bf16,PASS,14.23,557.92,28.75,552.08
69,ROCm,MI300X,Qwen2.5-72B,4,32768,10240,8192,bf16,PASS,12.27,448.16,18.63,590.12
70,ROCm,MI300X,Qwen2.5-72B,4,32768,8192,8192,bf16,PASS,6.95,632.94,14.45,608.76
71,ROCm,MI300X,Qwen2.5-72B,4,32768,59136,8192,bf16,PASS,53.56,592.72,105.64,601.08
72,ROCm,MI300X,Qwen2.5-72B,4,32768,8192,29568,bf16,PASS,26.07,608.99,56.64,560.54
73,ROCm,MI300X,Mistral-7B,1,4096,6144,4096,bf16,PASS,0.35,586.83,0.78,525.56
74,ROCm,MI300X,Mistral-7B,1,4096,4096,4096,bf16,PASS,0.23,594.57,0.53,520.81
75,ROCm,MI300X,Mistral-7B,1,4096,28672,4096,bf16,PASS,1.57,614.15,3.34,575.48
76,ROCm,MI300X,Mistral-7B,1,4096,4096,14336,bf16,PASS,0.78,618.74,1.75,549.27
77,ROCm,MI300X,Mistral-7B,2,8192,6144,4096,bf16,PASS,0.68,609.38,1.50,550.64
78,ROCm,MI300X,Mistral-7B,2,8192,4096,4096,bf16,PASS,0.45,611.27,1.00,552.07
79,ROCm,MI300X,Mistral-7B,2,8192,28672,4096,bf16,PASS,3.11,617.76,6.40,601.29
80,ROCm,MI300X,Mistral-7B,2,8192,4096,14336,bf16,PASS,1.56,618.25,3.35,573.89
81,ROCm,MI300X,Mistral-7B,4,16384,6144,4096,bf16,PASS,1.34,614.09,2.92,565.13
82,ROCm,MI300X,Mistral-7B,4,16384,4096,4096,bf16,PASS,0.90,614.11,1.95,564.81
83,ROCm,MI300X,Mistral-7B,4,16384,28672,4096,bf16,PASS,6.29,611.87,12.51,615.34
84,ROCm,MI300X,Mistral-7B,4,16384,4096,14336,bf16,PASS,3.23,596.19,6.57,585.62
"""

PRIMUS_TURBO_MI300X_CAUSAL_ATTENTION = """\
TestID,Platform,GPU,Batch,SeqLen,num_head_q,num_head_kv,head_dim_qk,head_dim_v,Causal,Deterministic,Check,Forward Time (ms),Forward TFLOPS,Backward Time (ms),Backward TFLOPS
40,ROCm,MI300X,1,4096,32,32,128,128,True,False,PASS,0.33,421.03,1.34,256.94
41,ROCm,MI300X,2,4096,32,32,128,128,True,False,PASS,0.63,433.77,2.28,301.32
42,ROCm,MI300X,4,4096,32,32,128,128,True,False,PASS,1.30,421.44,4.18,328.99
43,ROCm,MI300X,1,4096,64,8,128,128,True,False,PASS,0.63,435.23,2.23,307.86
44,ROCm,MI300X,2,4096,64,8,128,128,True,False,PASS,1.28,428.35,4.06,338.68
45,ROCm,MI300X,4,4096,64,8,128,128,True,False,PASS,2.45,449.69,8.69,316.22
46,ROCm,MI300X,1,8192,32,8,128,128,True,False,PASS,1.19,463.66,4.17,329.59
47,ROCm,MI300X,2,8192,32,8,128,128,True,False,PASS,2.41,456.82,7.57,363.10
48,ROCm,MI300X,4,8192,32,8,128,128,True,False,PASS,4.60,478.50,14.94,368.02
49,ROCm,MI300X,1,8192,128,8,128,128,True,False,PASS,4.57,481.63,14.84,370.57
50,ROCm,MI300X,2,8192,128,8,128,128,True,False,PASS,9.26,474.92,28.96,379.72
51,ROCm,MI300X,4,8192,128,8,128,128,True,False,PASS,18.16,484.27,57.76,380.75
52,ROCm,MI300X,1,8192,28,4,128,128,True,False,PASS,1.12,430.69,3.83,313.76
53,ROCm,MI300X,2,8192,28,4,128,128,True,False,PASS,1.98,486.24,7.10,338.59
54,ROCm,MI300X,4,8192,28,4,128,128,True,False,PASS,3.99,482.65,13.31,361.40
55,ROCm,MI300X,1,8192,64,8,128,128,True,False,PASS,2.41,455.34,7.54,364.45
56,ROCm,MI300X,2,8192,64,8,128,128,True,False,PASS,4.61,477.15,14.95,367.66
57,ROCm,MI300X,4,8192,64,8,128,128,True,False,PASS,9.35,470.43,29.23,376.10
58,ROCm,MI300X,1,4096,32,8,128,128,True,False,PASS,0.33,421.37,1.34,256.58
59,ROCm,MI300X,2,4096,32,8,128,128,True,False,PASS,0.64,431.27,2.24,307.08
60,ROCm,MI300X,4,4096,32,8,128,128,True,False,PASS,1.29,424.73,4.15,331.00
67,ROCm,MI300X,1,8192,32,4,64,64,True,False,PASS,0.75,367.74,2.10,327.31
68,ROCm,MI300X,2,8192,32,4,64,64,True,False,PASS,1.47,372.96,3.95,348.17
69,ROCm,MI300X,4,8192,32,4,64,64,True,False,PASS,2.95,373.11,7.95,345.60
70,ROCm,MI300X,1,8192,64,4,64,64,True,False,PASS,1.46,377.51,3.95,347.63
71,ROCm,MI300X,2,8192,64,4,64,64,True,False,PASS,2.91,377.28,7.93,346.43
72,ROCm,MI300X,4,8192,64,4,64,64,True,False,PASS,5.84,376.56,15.65,351.17
73,ROCm,MI300X,1,8192,48,8,128,128,True,False,PASS,1.73,475.93,5.72,360.20
74,ROCm,MI300X,2,8192,48,8,128,128,True,False,PASS,3.62,455.49,10.63,387.76
75,ROCm,MI300X,4,8192,48,8,128,128,True,False,PASS,7.03,469.53,21.49,383.68
"""


class ShapeGemm(NamedTuple):
    """One Primus-Turbo GEMM row: the model and micro-batch it stands for, the (M, K) . (K, N) product, its rates."""

    model: str
    micro_batch: int
    m: int
    n: int
    k: int
    forward_tflops: float  # one GEMM, 2 M N K FLOP
    backward_tflops: float  # dgrad + wgrad, 4 M N K FLOP
    quote: str


def _gemms(table: str) -> tuple[ShapeGemm, ...]:
    """The rows of one Primus-Turbo GEMM CSV, read by its header (the FP8 files have a Granularity column more)."""
    lines = table.splitlines()
    header = lines[0].split(",")
    rows = []
    for line in lines[1:]:
        cell = dict(zip(header, line.split(","), strict=True))
        rows.append(ShapeGemm(cell["Case"], int(cell["MBS"]), int(cell["M"]), int(cell["N"]), int(cell["K"]),
                              float(cell["Forward TFLOPS"]), float(cell["Backward TFLOPS"]), line))  # fmt: skip
    return tuple(rows)


MI300X_BF16_GEMMS = _gemms(PRIMUS_TURBO_MI300X_BF16_GEMMS)

# benchmark/results_optimized/gemm_fp8_tensorwise_optimized.csv @221d75f1, the file's own lines (module docstring): each
# row's time holds its quantisation kernels besides the FP8 GEMMs.
PRIMUS_TURBO_MI300X_FP8_TENSORWISE_GEMMS = """\
TestID,Platform,GPU,Case,MBS,M,N,K,Dtype,Granularity,Check,Forward Time (ms),Forward TFLOPS,Backward Time (ms),Backward TFLOPS
1,ROCm,MI300X,Llama-2-7B,1,4096,12288,4096,fp8,tensorwise,PASS,0.48,866.12,1.03,800.27
2,ROCm,MI300X,Llama-2-7B,1,4096,4096,4096,fp8,tensorwise,PASS,0.21,648.47,0.40,694.72
3,ROCm,MI300X,Llama-2-7B,1,4096,22016,4096,fp8,tensorwise,PASS,0.88,840.17,1.79,824.96
4,ROCm,MI300X,Llama-2-7B,1,4096,4096,11008,fp8,tensorwise,PASS,0.46,807.28,1.09,678.44
5,ROCm,MI300X,Llama-2-7B,2,8192,12288,4096,fp8,tensorwise,PASS,0.87,944.48,1.94,850.43
6,ROCm,MI300X,Llama-2-7B,2,8192,4096,4096,fp8,tensorwise,PASS,0.35,780.02,0.72,761.95
7,ROCm,MI300X,Llama-2-7B,2,8192,22016,4096,fp8,tensorwise,PASS,1.55,950.15,3.38,873.55
8,ROCm,MI300X,Llama-2-7B,2,8192,4096,11008,fp8,tensorwise,PASS,0.85,869.13,1.84,801.30
9,ROCm,MI300X,Llama-2-7B,4,16384,12288,4096,fp8,tensorwise,PASS,1.76,935.33,3.78,872.55
10,ROCm,MI300X,Llama-2-7B,4,16384,4096,4096,fp8,tensorwise,PASS,0.62,884.78,1.37,803.34
11,ROCm,MI300X,Llama-2-7B,4,16384,22016,4096,fp8,tensorwise,PASS,2.96,998.54,6.73,878.03
12,ROCm,MI300X,Llama-2-7B,4,16384,4096,11008,fp8,tensorwise,PASS,1.61,917.53,3.63,814.51
13,ROCm,MI300X,Llama-2-70B,1,4096,10240,8192,fp8,tensorwise,PASS,0.80,858.57,1.72,796.86
14,ROCm,MI300X,Llama-2-70B,1,4096,8192,8192,fp8,tensorwise,PASS,0.63,877.54,1.40,786.86
15,ROCm,MI300X,Llama-2-70B,1,4096,57344,8192,fp8,tensorwise,PASS,4.25,905.64,9.18,838.26
16,ROCm,MI300X,Llama-2-70B,1,4096,8192,28672,fp8,tensorwise,PASS,2.29,841.20,4.57,842.36
17,ROCm,MI300X,Llama-2-70B,2,8192,10240,8192,fp8,tensorwise,PASS,1.43,961.20,3.13,879.05
18,ROCm,MI300X,Llama-2-70B,2,8192,8192,8192,fp8,tensorwise,PASS,1.15,954.41,2.52,872.34
19,ROCm,MI300X,Llama-2-70B,2,8192,57344,8192,fp8,tensorwise,PASS,7.72,997.44,17.01,904.91
20,ROCm,MI300X,Llama-2-70B,2,8192,8192,28672,fp8,tensorwise,PASS,4.59,838.85,8.76,878.12
21,ROCm,MI300X,Llama-2-70B,4,16384,10240,8192,fp8,tensorwise,PASS,2.83,972.86,6.44,854.04
22,ROCm,MI300X,Llama-2-70B,4,16384,8192,8192,fp8,tensorwise,PASS,2.18,1007.42,5.09,863.81
23,ROCm,MI300X,Llama-2-70B,4,16384,57344,8192,fp8,tensorwise,PASS,15.03,1023.85,33.09,930.50
24,ROCm,MI300X,Llama-2-70B,4,16384,8192,28672,fp8,tensorwise,PASS,8.22,936.25,17.41,884.37
25,ROCm,MI300X,Llama-3.1-8B,1,8192,6144,4096,fp8,tensorwise,PASS,0.47,870.86,1.07,770.44
26,ROCm,MI300X,Llama-3.1-8B,1,8192,4096,4096,fp8,tensorwise,PASS,0.35,775.82,0.73,757.67
27,ROCm,MI300X,Llama-3.1-8B,1,8192,28672,4096,fp8,tensorwise,PASS,1.98,973.07,4.35,885.30
28,ROCm,MI300X,Llama-3.1-8B,1,8192,4096,14336,fp8,tensorwise,PASS,1.14,843.36,2.23,861.87
29,ROCm,MI300X,Llama-3.1-8B,2,16384,6144,4096,fp8,tensorwise,PASS,0.90,915.59,2.05,803.44
30,ROCm,MI300X,Llama-3.1-8B,2,16384,4096,4096,fp8,tensorwise,PASS,0.63,874.20,1.37,801.86
31,ROCm,MI300X,Llama-3.1-8B,2,16384,28672,4096,fp8,tensorwise,PASS,3.79,1014.29,8.54,900.88
32,ROCm,MI300X,Llama-3.1-8B,2,16384,4096,14336,fp8,tensorwise,PASS,2.11,911.66,4.39,875.68
33,ROCm,MI300X,Llama-3.1-8B,4,32768,6144,4096,fp8,tensorwise,PASS,1.77,933.20,4.16,793.05
34,ROCm,MI300X,Llama-3.1-8B,4,32768,4096,4096,fp8,tensorwise,PASS,1.25,880.69,2.72,807.91
35,ROCm,MI300X,Llama-3.1-8B,4,32768,28672,4096,fp8,tensorwise,PASS,7.43,1036.53,17.39,885.28
36,ROCm,MI300X,Llama-3.1-8B,4,32768,4096,14336,fp8,tensorwise,PASS,4.20,916.15,8.91,863.64
37,ROCm,MI300X,Llama-3.1-405B,1,8192,18432,16384,fp8,tensorwise,PASS,4.98,994.07,11.03,896.84
38,ROCm,MI300X,Llama-3.1-405B,1,8192,16384,16384,fp8,tensorwise,PASS,4.49,979.15,9.86,892.05
39,ROCm,MI300X,Llama-3.1-405B,1,8192,106496,16384,fp8,tensorwise,PASS,28.49,1003.42,61.52,929.31
40,ROCm,MI300X,Llama-3.1-405B,1,8192,16384,53248,fp8,tensorwise,PASS,15.23,938.81,31.88,896.61
41,ROCm,MI300X,Llama-3.1-405B,2,16384,18432,16384,fp8,tensorwise,PASS,9.80,1009.61,22.04,897.92
42,ROCm,MI300X,Llama-3.1-405B,2,16384,16384,16384,fp8,tensorwise,PASS,9.01,975.73,19.50,901.98
43,ROCm,MI300X,Llama-3.1-405B,2,16384,106496,16384,fp8,tensorwise,PASS,53.46,1069.46,120.25,950.89
44,ROCm,MI300X,Llama-3.1-405B,2,16384,16384,53248,fp8,tensorwise,PASS,29.49,969.32,60.36,947.27
45,ROCm,MI300X,Llama-3.1-405B,4,32768,18432,16384,fp8,tensorwise,PASS,19.48,1015.98,43.51,909.65
46,ROCm,MI300X,Llama-3.1-405B,4,32768,16384,16384,fp8,tensorwise,PASS,17.49,1005.74,38.93,903.74
47,ROCm,MI300X,Llama-3.1-405B,4,32768,106496,16384,fp8,tensorwise,PASS,102.42,1116.52,232.56,983.39
48,ROCm,MI300X,Llama-3.1-405B,4,32768,16384,53248,fp8,tensorwise,PASS,55.85,1023.72,117.47,973.46
49,ROCm,MI300X,Qwen2.5-7B,1,8192,4608,3584,fp8,tensorwise,PASS,0.34,793.10,0.71,760.51
50,ROCm,MI300X,Qwen2.5-7B,1,8192,3584,3584,fp8,tensorwise,PASS,0.28,761.07,0.60,701.37
51,ROCm,MI300X,Qwen2.5-7B,1,8192,37888,3584,fp8,tensorwise,PASS,2.41,922.77,5.21,853.95
52,ROCm,MI300X,Qwen2.5-7B,1,8192,3584,18944,fp8,tensorwise,PASS,1.30,855.47,2.75,809.08
53,ROCm,MI300X,Qwen2.5-7B,2,16384,4608,3584,fp8,tensorwise,PASS,0.63,862.79,1.36,796.49
54,ROCm,MI300X,Qwen2.5-7B,2,16384,3584,3584,fp8,tensorwise,PASS,0.50,837.71,1.13,743.95
55,ROCm,MI300X,Qwen2.5-7B,2,16384,37888,3584,fp8,tensorwise,PASS,4.49,990.44,10.11,879.91
56,ROCm,MI300X,Qwen2.5-7B,2,16384,3584,18944,fp8,tensorwise,PASS,2.51,888.01,5.48,811.68
57,ROCm,MI300X,Qwen2.5-7B,4,32768,4608,3584,fp8,tensorwise,PASS,1.24,873.20,2.65,818.37
58,ROCm,MI300X,Qwen2.5-7B,4,32768,3584,3584,fp8,tensorwise,PASS,1.00,839.52,2.21,762.55
59,ROCm,MI300X,Qwen2.5-7B,4,32768,37888,3584,fp8,tensorwise,PASS,8.69,1024.15,20.40,872.34
60,ROCm,MI300X,Qwen2.5-7B,4,32768,3584,18944,fp8,tensorwise,PASS,4.95,898.85,11.22,793.33
61,ROCm,MI300X,Qwen2.5-72B,1,8192,10240,8192,fp8,tensorwise,PASS,1.44,953.29,3.16,870.34
62,ROCm,MI300X,Qwen2.5-72B,1,8192,8192,8192,fp8,tensorwise,PASS,1.17,943.71,2.53,868.48
63,ROCm,MI300X,Qwen2.5-72B,1,8192,59136,8192,fp8,tensorwise,PASS,8.03,987.92,17.79,892.11
64,ROCm,MI300X,Qwen2.5-72B,1,8192,8192,29568,fp8,tensorwise,PASS,4.40,901.47,9.40,844.38
65,ROCm,MI300X,Qwen2.5-72B,2,16384,10240,8192,fp8,tensorwise,PASS,2.85,964.50,6.46,851.35
66,ROCm,MI300X,Qwen2.5-72B,2,16384,8192,8192,fp8,tensorwise,PASS,2.20,1000.66,5.12,859.01
67,ROCm,MI300X,Qwen2.5-72B,2,16384,59136,8192,fp8,tensorwise,PASS,15.19,1044.90,34.33,924.70
68,ROCm,MI300X,Qwen2.5-72B,2,16384,8192,29568,fp8,tensorwise,PASS,8.51,933.02,18.52,856.91
69,ROCm,MI300X,Qwen2.5-72B,4,32768,10240,8192,fp8,tensorwise,PASS,5.34,1029.36,13.04,842.88
70,ROCm,MI300X,Qwen2.5-72B,4,32768,8192,8192,fp8,tensorwise,PASS,4.30,1021.75,10.39,846.89
71,ROCm,MI300X,Qwen2.5-72B,4,32768,59136,8192,fp8,tensorwise,PASS,30.18,1052.10,67.38,942.33
72,ROCm,MI300X,Qwen2.5-72B,4,32768,8192,29568,fp8,tensorwise,PASS,16.53,960.56,36.58,867.93
73,ROCm,MI300X,Mistral-7B,1,4096,6144,4096,fp8,tensorwise,PASS,0.29,719.73,0.59,699.44
74,ROCm,MI300X,Mistral-7B,1,4096,4096,4096,fp8,tensorwise,PASS,0.21,654.24,0.40,683.72
75,ROCm,MI300X,Mistral-7B,1,4096,28672,4096,fp8,tensorwise,PASS,1.10,873.64,2.32,828.64
76,ROCm,MI300X,Mistral-7B,1,4096,4096,14336,fp8,tensorwise,PASS,0.60,806.26,1.22,788.47
77,ROCm,MI300X,Mistral-7B,2,8192,6144,4096,fp8,tensorwise,PASS,0.47,869.34,1.07,768.41
78,ROCm,MI300X,Mistral-7B,2,8192,4096,4096,fp8,tensorwise,PASS,0.36,772.38,0.73,756.11
79,ROCm,MI300X,Mistral-7B,2,8192,28672,4096,fp8,tensorwise,PASS,2.00,964.00,4.37,880.84
80,ROCm,MI300X,Mistral-7B,2,8192,4096,14336,fp8,tensorwise,PASS,1.14,840.34,2.24,858.23
81,ROCm,MI300X,Mistral-7B,4,16384,6144,4096,fp8,tensorwise,PASS,0.91,909.03,2.06,798.94
82,ROCm,MI300X,Mistral-7B,4,16384,4096,4096,fp8,tensorwise,PASS,0.63,875.99,1.37,801.41
83,ROCm,MI300X,Mistral-7B,4,16384,28672,4096,fp8,tensorwise,PASS,3.82,1008.07,8.59,895.60
84,ROCm,MI300X,Mistral-7B,4,16384,4096,14336,fp8,tensorwise,PASS,2.12,908.38,4.42,870.30
"""

MI300X_FP8_GEMMS = _gemms(PRIMUS_TURBO_MI300X_FP8_TENSORWISE_GEMMS)


class AttentionRow(NamedTuple):
    """One fused-attention measurement: batch, tokens, query / KV heads, head dim, causal, forward / backward TFLOP/s."""

    gpu: str
    batch: int
    seq: int
    heads: int
    kv_heads: int
    head_dim: int
    causal: bool
    forward_tflops: float
    backward_tflops: float
    source: str


def _attention() -> tuple[AttentionRow, ...]:
    rows = []
    for line in PRIMUS_TURBO_MI300X_CAUSAL_ATTENTION.splitlines()[1:]:
        c = line.split(",")
        rows.append(AttentionRow("mi300x", int(c[3]), int(c[4]), int(c[5]), int(c[6]), int(c[7]), c[9] == "True",
                                 float(c[13]), float(c[15]), f"{PRIMUS_TURBO} output/baseline_attention.csv: '{line}'"))  # fmt: skip
    return tuple(rows)


MI300X_CAUSAL_ATTENTION = _attention()

# AMD's max-achievable BF16 GEMM rates (TFLOP/s) at each board's power limit: ROCm blogs, 'Measuring Max-Achievable FLOPs
# - Part 2' (ROCm/rocm-blogs blogs/software-tools-optimization/measuring-max-achievable-flops-part2/README.md @8e011952),
# Table 1 rows 'AMD Instinct MI300X | 654 TFLOPs (1115 MHz) | 708 TFLOPs (1207 MHz) | 1273 TFLOPs (1230 MHz)' and
# 'AMD Instinct MI325X | 794 TFLOPs (1354 MHz) | 843 TFLOPs (1447 MHz) | 1519 TFLOPs (1464 MHz)' (FP16 | BF16 | FP8):
# hipBLASLt-bench loops on the same 304-CU gfx942 dies, at 750 W and 1,000 W.
AMD_MAF_BF16 = {"mi300x": 708.0, "mi325x": 843.0}

# HBM copy rates (GB/s, bytes read and written over the kernel time). AMD's ROCm Compute Profiler test suite,
# ROCm/rocm-systems projects/rocprofiler-compute/tests/test_metric_validation.py @117d8704, the 'HBM Bandwidth' metric
# (4.1.9: DRAM bytes from the L2's EA request counters over End_Timestamp - Start_Timestamp, analysis_configs/gfx942/
# 0400_roofline.yaml) expected of its memcopy workload within 5 %: '# MI 300X: 3910.62 GB/s', '# MI 325X: 4287.31 GB/s'.
# The workload (projects/rocprofiler-compute/sample/memcopy.cpp, read at the fork seanthegeek/rocm-systems @7fc037a1):
# Y[idx] = X[idx] over 268,435,456 doubles (2 GiB each way, 8x the 256 MB Infinity Cache), 256-thread blocks, 1,000 runs.
# The same file's 'MI350' entry (metric 4.1.10, gfx950), "expected_values": [5690.42], names no board: the MI350X and the
# MI355X share the SoC and its eight 8 TB/s HBM3E stacks; it is entered for the MI355X (presets/gpus/mi355x.yaml).
ROCPROF_MEMCOPY_GBPS = {"mi300x": 3910.62, "mi325x": 4287.31, "mi355x": 5690.42}
# BabelStream's Copy on an Azure ND MI300X v5 (TB/s), two runs: Azure/AI-benchmarking-guide Azure_Results/
# ND_MI300X_v5_results.md, read at the forks yosoyjay/AI-benchmarking-guide @a8263ef1 ('| Copy  | 4.15 |', ROCm 6.8.5) and
# samuel-bohman/AI-benchmarking-guide @3de0c294 ('| Copy  | 4.11 |', ROCm 6.8.1).
BABELSTREAM_MI300X_COPY_TBPS = (4.11, 4.15)

# AITER's own table of its assembly (v3) attention kernels on an MI300X, ROCm/aiter op_tests/cpp/mha/README.md @0403bcdf
# ('More performance test results', added by ROCm/aiter pull request #1270, 2025-10-28; benchmark_mha_fwd / _bwd, C++,
# bf16, BSHD, batch mode, head dim 128), the causal rows at 8,192 tokens: {(batch, query heads, KV heads): (FWD,
# BWD-a32) TFLOP/s}, e.g. '| 4 | 32 | 8 | 8192 | 8192 | 128 | 1 | 547.09 | 1318.92 | 468.205 | 1069.935 | 422.835 |
# 775.46 |' (MI300X | MI355X per column pair; BWD-a32: dq accumulated in fp32 atomics, as Primus-Turbo's default
# PRIMUS_TURBO_ATTN_V3_ATOMIC_FP32=1 and Primus's gfx942 recipes run it).
AITER_README_MI300X_CAUSAL_8192 = {
    (1, 32, 8): (522.68, 388.235),
    (4, 32, 8): (547.09, 422.835),
    (8, 32, 8): (537.36, 441.4),
    (1, 64, 8): (518.29, 433.285),
    (4, 64, 8): (540.515, 434.645),
    (8, 64, 8): (550.67, 432.715),
    (1, 64, 4): (519.32, 442.955),
    (4, 64, 4): (540.935, 430.95),
    (8, 64, 4): (552.78, 434.51),
}

# AITER's own table of its v3 (assembly) attention kernels, the causal rows of both GPUs' columns: ROCm/aiter
# op_tests/cpp/mha/README.md @0403bcdf ('the asm kernel performance of the attention forwards and attention backwards. the
# performance data was tested under the conditions of BF16 and BSHD in batch mode'; added by ROCm/aiter pull request
# #1270, @a83421be, 2025-10-31, with an MI308 column since dropped, the other values unchanged), the table's own lines
# with their runs of spaces collapsed. Columns: batch | q_nheads | kv_nheads | seqlen_q | seqlen_kv | hdim | causal |
# FWD MI300X | FWD MI355X | BWD-a16 MI300X | BWD-a16 MI355X | BWD-a32 MI300X | BWD-a32 MI355X (TFLOP/s). Written by
# op_tests/cpp/mha/benchmark_mha_fwd / _bwd (@a83421be): ck_tile::launch_kernel times the whole launch sequence, forward
# the one kernel, backward dot(dO, O), the main kernel and the dq conversion (a32) or shuffle (a16) (hsa/gfx950/
# fmha_v3_bwd/codegen.py fmha_bwd_v3_*); dK / dV are written per query head (dk_host has nhead heads) and summed over the
# group on the host, outside the timing. FLOPs: forward 4 b s^2 h_q d, backward 10 b s^2 h_q d (benchmark_mha_bwd.cpp:
# '3 * 2 * ... hdim_q + 2 * 2 * ... hdim_v'); the causal rows are those counts halved (their values end in .xx5: the
# benchmark's printed rate over 2). BWD-a16: dq accumulated with bf16 atomics, what gfx950 runs in Primus
# (NVTE_CK_IS_V3_ATOMIC_FP32=0; presets/gpus/mi355x.yaml primus_gfx950_atomics); BWD-a32: fp32 atomics, gfx942's setting.
AITER_README_CAUSAL = """\
| 1 | 32 | 8 | 1024 | 1024 | 128 | 1 | 130.62 | 233.12 | 177.565 | 211.91 | 166.78 | 210.315 |
| 1 | 32 | 8 | 2048 | 2048 | 128 | 1 | 255.105 | 577.28 | 317.3 | 506.615 | 295.865 | 479.925 |
| 1 | 32 | 8 | 4096 | 4096 | 128 | 1 | 467.805 | 949.325 | 317.685 | 922.385 | 296.025 | 713.075 |
| 1 | 32 | 8 | 8192 | 8192 | 128 | 1 | 522.68 | 1247.73 | 436.13 | 1062.76 | 388.235 | 765.75 |
| 1 | 32 | 8 | 10240 | 10240 | 128 | 1 | 440.12 | 1200.645 | 513.85 | 1002.585 | 244.705 | 759.32 |
| 4 | 32 | 8 | 1024 | 1024 | 128 | 1 | 334.005 | 720.995 | 257.115 | 547.555 | 226.39 | 465.04 |
| 4 | 32 | 8 | 2048 | 2048 | 128 | 1 | 419.435 | 809.835 | 377.51 | 783.305 | 330.23 | 431.525 |
| 4 | 32 | 8 | 4096 | 4096 | 128 | 1 | 486.73 | 1130.115 | 464.83 | 957.41 | 416.54 | 723.945 |
| 4 | 32 | 8 | 8192 | 8192 | 128 | 1 | 547.09 | 1318.92 | 468.205 | 1069.935 | 422.835 | 775.46 |
| 4 | 32 | 8 | 10240 | 10240 | 128 | 1 | 527.705 | 1342.995 | 474.205 | 1088.865 | 432.545 | 767.995 |
| 8 | 32 | 8 | 1024 | 1024 | 128 | 1 | 311.385 | 623.93 | 301.495 | 545.225 | 258.26 | 457.025 |
| 8 | 32 | 8 | 2048 | 2048 | 128 | 1 | 412.99 | 894.45 | 374.255 | 806.96 | 326.355 | 620.48 |
| 8 | 32 | 8 | 4096 | 4096 | 128 | 1 | 513.1 | 1166.875 | 454.36 | 967.905 | 409.05 | 726.06 |
| 8 | 32 | 8 | 8192 | 8192 | 128 | 1 | 537.36 | 1316.805 | 491.78 | 1066.705 | 441.4 | 772.67 |
| 8 | 32 | 8 | 10240 | 10240 | 128 | 1 | 556.045 | 1334.865 | 495.15 | 1087.61 | 443.78 | 794.245 |
| 1 | 64 | 8 | 1024 | 1024 | 128 | 1 | 228.54 | 432.565 | 283.58 | 386.805 | 242.43 | 370.42 |
| 1 | 64 | 8 | 2048 | 2048 | 128 | 1 | 392.425 | 936.435 | 279.72 | 725.61 | 257.855 | 598.985 |
| 1 | 64 | 8 | 4096 | 4096 | 128 | 1 | 474.385 | 1046.085 | 420.265 | 941.16 | 378.155 | 694.125 |
| 1 | 64 | 8 | 8192 | 8192 | 128 | 1 | 518.29 | 1300.105 | 481.895 | 1064.56 | 433.285 | 765.21 |
| 1 | 64 | 8 | 10240 | 10240 | 128 | 1 | 510.895 | 1338.005 | 501.055 | 1092.475 | 447.995 | 788.92 |
| 4 | 64 | 8 | 1024 | 1024 | 128 | 1 | 326.51 | 638.705 | 311.005 | 571.615 | 266.9 | 470.95 |
| 4 | 64 | 8 | 2048 | 2048 | 128 | 1 | 425.735 | 899.845 | 377.225 | 796.81 | 326.805 | 621.295 |
| 4 | 64 | 8 | 4096 | 4096 | 128 | 1 | 513.79 | 1174.92 | 449 | 971.395 | 391.235 | 722.205 |
| 4 | 64 | 8 | 8192 | 8192 | 128 | 1 | 540.515 | 1319.225 | 482.505 | 1067.805 | 434.645 | 774.25 |
| 4 | 64 | 8 | 10240 | 10240 | 128 | 1 | 557.475 | 1337.965 | 493.745 | 1090.925 | 442.51 | 792.12 |
| 8 | 64 | 8 | 1024 | 1024 | 128 | 1 | 321.865 | 626.57 | 324.22 | 576.345 | 265.08 | 484.34 |
| 8 | 64 | 8 | 2048 | 2048 | 128 | 1 | 452.03 | 963.165 | 382.1 | 817.49 | 347.89 | 630.43 |
| 8 | 64 | 8 | 4096 | 4096 | 128 | 1 | 509.255 | 1190.295 | 457.05 | 972.25 | 402.18 | 710.905 |
| 8 | 64 | 8 | 8192 | 8192 | 128 | 1 | 550.67 | 1311.955 | 474.02 | 1067.89 | 432.715 | 772.605 |
| 8 | 64 | 8 | 10240 | 10240 | 128 | 1 | 547.05 | 1313.695 | 489.075 | 1084.75 | 439.785 | 792.91 |
| 1 | 64 | 4 | 1024 | 1024 | 128 | 1 | 229.09 | 421.615 | 265.11 | 385.735 | 238.755 | 376.975 |
| 1 | 64 | 4 | 2048 | 2048 | 128 | 1 | 407.525 | 949.635 | 277.86 | 725.085 | 254.375 | 580.43 |
| 1 | 64 | 4 | 4096 | 4096 | 128 | 1 | 476.26 | 1058.9 | 418.73 | 937.725 | 384.585 | 705.6 |
| 1 | 64 | 4 | 8192 | 8192 | 128 | 1 | 519.32 | 1318.15 | 480.06 | 1062.725 | 442.955 | 768.16 |
| 1 | 64 | 4 | 10240 | 10240 | 128 | 1 | 515.275 | 1348.155 | 499.72 | 1087.905 | 459.745 | 785.905 |
| 4 | 64 | 4 | 1024 | 1024 | 128 | 1 | 314.82 | 661.045 | 324.22 | 580 | 264.795 | 470.865 |
| 4 | 64 | 4 | 2048 | 2048 | 128 | 1 | 426.77 | 896.095 | 374.96 | 813.51 | 331.95 | 620.01 |
| 4 | 64 | 4 | 4096 | 4096 | 128 | 1 | 524.585 | 1182.87 | 453.97 | 968.96 | 405.02 | 713.075 |
| 4 | 64 | 4 | 8192 | 8192 | 128 | 1 | 540.935 | 1324.275 | 478.735 | 1067.48 | 430.95 | 749.805 |
| 4 | 64 | 4 | 10240 | 10240 | 128 | 1 | 560.63 | 1346.46 | 491.435 | 1091.17 | 441.345 | 780.665 |
| 8 | 64 | 4 | 1024 | 1024 | 128 | 1 | 348.76 | 663.48 | 315.035 | 589.73 | 267.48 | 493.61 |
| 8 | 64 | 4 | 2048 | 2048 | 128 | 1 | 461.89 | 983.355 | 400.31 | 823.795 | 352.7 | 626.72 |
| 8 | 64 | 4 | 4096 | 4096 | 128 | 1 | 513.795 | 1196.675 | 456.415 | 976.635 | 402.68 | 701.24 |
| 8 | 64 | 4 | 8192 | 8192 | 128 | 1 | 552.78 | 1318.92 | 473.41 | 1065.225 | 434.51 | 774.87 |
| 8 | 64 | 4 | 10240 | 10240 | 128 | 1 | 548.65 | 1313.945 | 488.145 | 1087.4 | 435.745 | 793.095 |
| 1 | 64 | 8 | 16384 | 16384 | 128 | 1 | 541.55 | 1392.485 | 458.075 | 1162.805 | 412.04 | 808.93 |
| 1 | 64 | 4 | 16384 | 16384 | 128 | 1 | 544.1 | 1398.14 | 458.065 | 1131.305 | 419.975 | 809.685 |
"""


class AiterTableRow(NamedTuple):
    """One causal row of AITER's table: layout and (forward, backward a16, backward a32) TFLOP/s on each GPU."""

    batch: int
    heads: int
    kv_heads: int
    seq: int
    mi300x: tuple[float, float, float]
    mi355x: tuple[float, float, float]
    line: str


def _aiter_table() -> tuple[AiterTableRow, ...]:
    rows = []
    for line in AITER_README_CAUSAL.splitlines():
        c = [cell.strip() for cell in line.strip().strip("|").split("|")]
        assert c[3] == c[4] and c[5] == "128" and c[6] == "1", line  # self-attention, head dim 128, causal
        rates = [float(x) for x in c[7:13]]
        rows.append(AiterTableRow(int(c[0]), int(c[1]), int(c[2]), int(c[3]), (rates[0], rates[2], rates[4]),
                                  (rates[1], rates[3], rates[5]), line))  # fmt: skip
    return tuple(rows)


AITER_CAUSAL = _aiter_table()

# HipKittens' AITER baselines on an MI355X, causal, head dim 128: {tokens: (forward TFLOP/s, backward TFLOP/s)} as the
# JSON files print them ('tflops_ref'), forward and backward from the files named in the module docstring.
MI355X_AITER_MHA = {  # b 16, 16 heads (b 15 at 16,384)
    1024: (554.6333485657686, 388.74790209336874),
    2048: (876.3253686429246, 673.1495223109977),
    4096: (1069.0151966793617, 876.7761210473827),
    8192: (1173.2294583211096, 1034.0649936399525),
    16384: (1247.4281948254054, 1108.6798513320139),
}
MI355X_AITER_GQA = {  # b 16, 64 query heads, 8 KV heads (b 15 at 16,384)
    1024: (715.1307981602785, 150.7754043352189),
    2048: (941.1122269779355, 177.4283062517722),
    4096: (1100.8769758688138, 196.79961807016375),
    8192: (1204.655347177133, 271.74010966304377),
    16384: (1246.1417528329102, 333.8232327576917),
}

# Square GEMMs n x n x n, TFLOP/s as the JSON files print them
MI325X_TORCH_BF16 = {1024: 79.10224797464866, 2048: 324.95860243914075, 4096: 752.5373166782649, 8192: 785.3037036419687,
                     16384: 749.753740002519}  # fmt: skip
MI355X_TORCH_BF16 = {1024: 56.90949163947867, 2048: 327.9246818830567, 4096: 1138.526846403435, 8192: 1521.2544125131246,
                     16384: 1559.8110939913774}  # fmt: skip
MI355X_HIPBLASLT_FP8 = {1024: 204.913, 2048: 1172.69, 4096: 2748.78, 8192: 3233.19, 16384: 3293.23}

# DeepEP on 8 MI355X in Primus's Qwen3-30B-A3B FP8 campaign (the published rows primus-mi355x-qwen3-30b-a3b-*:
# tests/published_blackwell_amd_runs.py), AMD-AGI/Primus agent/workspace/qwen3_fp8_tw_gfx950_20261010/logs/optimize.md
# @cbff2387, 'Item 3 - DeepEP': 'num_cu sweep (even): 160 CUs best, dispatch 920 -> 612 us, combine 536 -> 484 us'
# (32,768 tokens a rank, hidden 2048, bf16: 'FP8 dispatch: not adopted'; the baseline ran turbo_deepep_num_cu 80) and
# 'get_dispatch_layout 340 -> 44-46 us, 384 calls/iter' (48 MoE layers x 8 micro-batches); 'R3 profile (rank 0, one step):
# kernels 6941 ms of 6987 ms; attention 1583, grouped GEMM 1268, hipBLASLt 1003, DeepEP 876, quant chain 739 (amax 253),
# permute/unpermute 346, SwiGLU 262' (R3: 160 CUs, the per-token layout). {CUs: (dispatch, combine) us per call}.
PRIMUS_MI355X_DEEPEP_US = {80: (920.0, 536.0), 160: (612.0, 484.0)}
PRIMUS_MI355X_DISPATCH_LAYOUT_US = {"baseline": 340.0, "per-token": 45.0}
PRIMUS_MI355X_R3_PROFILE_MS = {"attention": 1583.0, "grouped GEMM": 1268.0, "hipBLASLt": 1003.0, "DeepEP": 876.0,
                               "quant chain": 739.0, "permute/unpermute": 346.0, "SwiGLU": 262.0}  # fmt: skip

# Transformer Engine's CK attention in the same campaign: a CHECK of the MI355X's attention shares, never their source
# (these runs are the held-out rows). Qwen3-30B-A3B, b 8, s 4096, 32 query / 4 KV heads, head dim 128, causal, sbhd,
# NVTE_CK_USES_FWD_V3=1, NVTE_CK_USES_BWD_V3=1, NVTE_CK_IS_V3_ATOMIC_FP32=0; 384 calls a step (48 layers x 8
# micro-batches). optimize.md @cbff2387 'Item 4 - attention bwd': 'TE bwd per call: main 2680 us, dk_dv_reduce 216,
# odo 152, fill 107, dq_shuffle 94' (us a call). The baseline's profile (rank 0, one step), agent/workspace/
# qwen3_fp8_tw_gfx950_20261010/prompt.md @fb0603b6: '| attention | 1578 ms | 18% |
# `aiter::fmha_bwd_hd128_bf16_causal_a16` 1014 ms; fwd 390 ms; `ck_fused_attn::dk_dv_reduce` 81 ms |' (ms a step; its
# semicolons are full-width). dk_dv_reduce is TE's own GQA sum of the per-query-head dK / dV the kernel writes
# (ROCm/TransformerEngine @0053b2bb transformer_engine/common/ck_fused_attn/src/ck_fused_attn_bwd.cpp, dk_dv_reduce over
# dk_expanded / dv_expanded when h > hg); AITER's table (above) does not time it.
PRIMUS_MI355X_TE_ATTENTION_BWD_US = {"main": 2680.0, "dk_dv_reduce": 216.0, "odo": 152.0, "fill": 107.0, "dq_shuffle": 94.0}
PRIMUS_MI355X_BASELINE_ATTENTION_MS = {"attention": 1578.0, "backward main": 1014.0, "forward": 390.0, "dk_dv_reduce": 81.0}
# The campaign's baseline profile (rank 0, one step of 8 micro-batches x 48 layers, before any of its changes), AMD-AGI/Primus
# agent/workspace/qwen3_fp8_tw_gfx950_20261010/prompt.md @fb0603b6 ('profile 结论' table, ms a step): attention 1578, FP8
# quantisation 1310, grouped GEMM 1267, DeepEP 1248 (intranode::dispatch 591, intranode::combine 351, get_dispatch_layout 132),
# hipBLASLt 987, norm / RoPE 529 (TE fused_rope fwd + bwd 204), permute 404 (unpermute 189, permute 157); and 'about 1.1 s of
# elementwise overhead (SwiGLU split into silu, mul, cat, plus the probs multiply), which use_turbo_fused_act_with_probs on the
# Primus side removes' (translated from the Chinese; the line begins '另外有约 1.1 s 的 elementwise 开销').
PRIMUS_MI355X_BASELINE_PROFILE_MS = {"attention": 1578.0, "FP8 quantisation": 1310.0, "grouped GEMM": 1267.0, "DeepEP": 1248.0,
                                     "DeepEP dispatch": 591.0, "DeepEP combine": 351.0, "get_dispatch_layout": 132.0,
                                     "hipBLASLt": 987.0, "norm / RoPE": 529.0, "TE fused_rope": 204.0, "permute": 404.0,
                                     "elementwise act with probs": 1100.0}  # fmt: skip
# The campaign's end-to-end rows (README.md @31c71fa8, ms an iteration and peak memory as printed, 'GB'): the baseline, then
# + use_turbo_fused_act_with_probs; and the log's per-call kernel times (logs/optimize.md @cbff2387): 'qk RMSNorm + RoPE head_dim
# 128 ... fwd+bwd 1243.6 -> 369.9 us', '#455 TRITON default slower than HIP at every measured shape (Qwen3 even permute fwd 390
# vs 255 us)', 'flat no-pad kernel for rows < 4 KB. 262144x768 quant: 156.5 -> 95.3 us'.
PRIMUS_MI355X_FUSED_ACT_ROW = {"baseline": (8894.0, 277.0), "+ fused act with probs": (7915.6, 223.0)}
PRIMUS_MI355X_QK_NORM_ROPE_US = {"unfused": 1243.6, "fused": 369.9}
PRIMUS_MI355X_PERMUTE_FWD_US = {"triton": 390.0, "hip": 255.0}
PRIMUS_MI355X_QUANT_262144X768_US = {"padded rows": 156.5, "flat": 95.3}
