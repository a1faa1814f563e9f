"""transformers' causal LMs of a given shape, built as the FakeTensor memory trackers' ground truth needs them:
SDPA attention, no KV cache, and the two decisions transformers takes from real tensors (no padding: the causal mask
is SDPA's is_causal; no packed sequences) patched in, because a FakeTensor cannot answer them
(transformers masking_utils._ignore_causal_mask_sdpa, find_packed_sequence_indices). One helper for every memory
ground truth (test_torch_memory_hf.py, test_torch_memory_fsdp.py, test_torch_memory_hf_architectures.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

# the model classes: Llama's decoder, Qwen3's (q/k norms over head_dim), and two MoE blocks (Mixtral's router keeps its
# top-k weights in fp32, Qwen3-MoE's casts them to bf16) and Qwen2-MoE's (Qwen3-MoE's router beside a shared expert
# scaled by a sigmoid gate, and no q/k norms); the experts run transformers' default grouped_mm
ARCHITECTURES = ("llama", "qwen3", "mixtral", "qwen3_moe", "qwen2_moe")


@contextlib.contextmanager
def hf_causal_lm(layers: int, hidden: int, heads: int, ffn: int, vocab: int, *, tied: bool = True, fake: bool = True,
                 bf16: bool = False, architecture: str = "llama", experts: tuple[int, int] | None = None) -> Iterator[Any]:  # fmt: skip
    """The model, inside FakeTensorMode while the block runs (fake=False: real tensors); bf16: built in bf16 (model.to()
    cannot swap fake parameters), else in the default dtype (fp32). MHA: as many KV heads as heads. experts: (how many,
    top k) for the MoE architectures, each expert `ffn` wide."""
    import torch
    import transformers
    import transformers.masking_utils as masking
    from torch._subclasses.fake_tensor import FakeTensorMode

    shared = dict(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                  num_key_value_heads=heads, max_position_embeddings=8192, tie_word_embeddings=tied, use_cache=False)  # fmt: skip
    if architecture == "llama":
        config, model_class = transformers.LlamaConfig(**shared, intermediate_size=ffn), transformers.LlamaForCausalLM
    elif architecture == "qwen3":
        config = transformers.Qwen3Config(**shared, intermediate_size=ffn, head_dim=hidden // heads, use_sliding_window=False)
        model_class = transformers.Qwen3ForCausalLM
    elif architecture == "mixtral":
        assert experts is not None
        config = transformers.MixtralConfig(**shared, intermediate_size=ffn, num_local_experts=experts[0],
                                            num_experts_per_tok=experts[1], sliding_window=None)  # fmt: skip
        model_class = transformers.MixtralForCausalLM
    elif architecture == "qwen2_moe":  # shared: (experts, top k, shared expert width, renormalise the top k)
        assert experts is not None
        config = transformers.Qwen2MoeConfig(**shared, moe_intermediate_size=ffn, num_experts=experts[0], num_experts_per_tok=experts[1],
                                             shared_expert_intermediate_size=experts[2], norm_topk_prob=experts[3],
                                             decoder_sparse_step=1, mlp_only_layers=[], use_sliding_window=False)  # fmt: skip
        model_class = transformers.Qwen2MoeForCausalLM
    else:
        assert architecture == "qwen3_moe" and experts is not None
        config = transformers.Qwen3MoeConfig(**shared, head_dim=hidden // heads, moe_intermediate_size=ffn, num_experts=experts[0],
                                             num_experts_per_tok=experts[1], decoder_sparse_step=1, mlp_only_layers=[],
                                             norm_topk_prob=True)  # fmt: skip
        model_class = transformers.Qwen3MoeForCausalLM
    config._attn_implementation = "sdpa"
    saved = masking._ignore_causal_mask_sdpa, masking.find_packed_sequence_indices
    masking._ignore_causal_mask_sdpa = lambda padding_mask, q_length, kv_length, *a, **k: padding_mask is None and q_length == kv_length
    masking.find_packed_sequence_indices = lambda position_ids: None
    try:
        with FakeTensorMode() if fake else contextlib.nullcontext():
            default = torch.get_default_dtype()
            torch.set_default_dtype(torch.bfloat16 if bf16 else default)
            try:
                model = model_class(config)
            finally:
                torch.set_default_dtype(default)
            if experts is not None:
                assert model.config._experts_implementation == "grouped_mm"  # transformers' default
            yield model
    finally:
        masking._ignore_causal_mask_sdpa, masking.find_packed_sequence_indices = saved
