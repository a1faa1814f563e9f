"""torchtitan's cross-entropy loss under torch.compile in the step walk: what Inductor's forward and backward of
`cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))` allocate and free.

Which torchtitan compiles its loss (LOSS_SOURCES['versions']): the loss was compiled with --training.compile from 2024-10-22
(e10cb9494) until 2024-12-18 (e8977b007: "compiling loss function causes CUDA errors, turning off for now"), so at 9dec370
(the Dec 2024 benchmark page, the commit parcalc's torchtitan walk follows) it is eager; from 2025-04-02 (bbb1b616e,
components/loss.py build_cross_entropy_loss) it is compiled again whenever the model is (e7c0cae, the June 2025 Trainy H200
page's commit, does so; from 2025-10-02, 177b050ca, `compile.components` lists "loss" by default). `memory --compile-loss`
says which (default: 9dec370's eager loss).

What the compiled loss keeps, read from the code Inductor generates for it (TORCH_LOGS=output_code, torch 2.13.0, inductor
backend on the CPU; tests/ground_truth/test_torch_memory_compiled_loss.py):
- forward: one fused kernel reads the bf16 logits, upcasts each value in registers and reduces each row to its maximum
  and log(sum(exp(x - max))) (two fp32 values a token), the label's term and the mean; no fp32 copy of the logits exists.
  The min-cut partitioner saves the bf16 logits themselves (the graph's input), the labels, the two per-row fp32 values and
  the count of labels as a float, so `del pred` in the training loop frees nothing: the graph holds the logits until backward;
- backward: one fused kernel writes the logits' gradient in bf16 (exp(x - max - log) minus the label's one-hot, times the
  loss's gradient over the count) beside a per-row fp32 buffer, then every saved tensor goes. Eager holds three fp32
  tokens x vocabulary tensors at once here (parcalc.core.memory_walk.cross_entropy_backward); the compiled loss holds two
  bf16 ones, the logits and their gradient.
The CPU's program is what is replayed: the saved set is the partitioner's choice on the joint graph, before any device's
code is generated, and Inductor's CUDA code fuses the same nodes into Triton kernels with the same outputs (its per-row
buffers may differ by a few fp32 values a token: 4 B against the vocabulary's bf16 row; not read here: no GPU).
"""

from __future__ import annotations

from parcalc.core.memory_walk import StepShapes, Walk

LOSS_SOURCES = {
    "versions": ("pytorch/torchtitan e10cb9494 (2024-10-22, train.py: 'Move output .float() to loss fn and compile it if "
                 "compiling'); e8977b007 (2024-12-18, 'turning off compile on loss function'), so at 9dec370 train.py:136-138 "
                 "keeps `# if job_config.training.compile: loss_fn = torch.compile(loss_fn)` commented out; bbb1b616e "
                 "(2025-04-02, torchtitan/components/loss.py build_cross_entropy_loss: 'Enable compiling the loss function'); "
                 "e7c0cae torchtitan/components/loss.py:18-30: cross_entropy_loss = cross_entropy(pred.flatten(0, 1).float(), "
                 "labels.flatten(0, 1)), torch.compile(loss_fn) if job_config.training.compile; 177b050ca (2025-10-02) "
                 "Compile.components default ['model', 'loss']"),
    "program": ("pytorch/pytorch v2.13.0 Inductor's generated code for that loss (TORCH_LOGS=output_code, CPU): forward "
                "empty_strided (T, 1) fp32 amax and log(sum(exp(x - amax))), int64 and fp32 scalars, one fused kernel, returning (loss, "
                "pred, labels, amax, log, count) for backward; backward empty_strided (T, 1) fp32 and (T, V) bf16, one fused "
                "kernel, then del of every saved tensor; torch/_functorch/partitioners.py min_cut_rematerialization_partition"),
}

# what `memory --compile-loss` says in the walk's assumptions
COMPILED_LOSS_WALK = ("the loss under torch.compile (torchtitan's build_cross_entropy_loss from 2025-04-02): one fused kernel "
                      "reduces the bf16 logits without an fp32 copy and the compiled graph keeps the logits for its backward, "
                      "which writes their bf16 gradient at once (parcalc.core.memory_compiled_loss, checked on the CPU against "
                      "every allocation of a compiled step)")

_LOSS = "logits and loss"


def compiled_loss_forward(walk: Walk, x: StepShapes, pred: str) -> None:
    """The compiled loss's forward over the live logits `pred` (T x V, bf16); the caller's `del pred` frees nothing after it
    (the graph saved them), so `pred` is relabelled as held for the backward."""
    T = x.T
    walk.alloc("loss.amax", T * 4, _LOSS, "compiled loss: each row's max (fp32, saved)")
    walk.alloc("loss.lse", T * 4, _LOSS, "compiled loss: each row's log(sum(exp(x - max))) (fp32, saved)")
    walk.alloc("loss.valid", 8, "temporaries", "compiled loss: the count of labels (int64)")
    walk.alloc("loss.value", 4, _LOSS, "loss")
    walk.alloc("loss.count", 4, _LOSS, "compiled loss: the count of labels (fp32, saved)")
    walk.free("loss.valid", "loss.value")  # the kernel has run; the loss scalar is the caller's (4 B, as the eager walk's)
    walk.relabel(pred, "pred (bf16), saved by the compiled loss for its backward")


def compiled_loss_backward(walk: Walk, x: StepShapes, pred: str, into: str) -> None:
    """The compiled loss's backward: the logits' bf16 gradient as `into`, then the saved tensors (and `pred`) freed."""
    walk.alloc("loss.g_rows", x.T * 4, "temporaries", "compiled loss backward: a per-row fp32 buffer")
    walk.alloc(into, x.T * x.V * x.c, _LOSS, "pred's gradient (bf16, the compiled loss's one kernel)")
    walk.free("loss.amax", "loss.g_rows", "loss.count", "loss.lse", pred)
