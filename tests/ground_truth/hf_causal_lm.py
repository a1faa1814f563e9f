"""transformers' LlamaForCausalLM of a given shape, built as the FakeTensor memory trackers' ground truth needs it:
SDPA attention, no KV cache, and the two decisions transformers takes from real tensors (no padding: the causal mask
is SDPA's is_causal; no packed sequences) patched in, because a FakeTensor cannot answer them
(transformers masking_utils._ignore_causal_mask_sdpa, find_packed_sequence_indices). One helper for
test_torch_memory_hf.py and test_torch_memory_fsdp.py, which built it each their own way."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def llama_for_causal_lm(layers: int, hidden: int, heads: int, ffn: int, vocab: int, *, tied: bool = True, fake: bool = True,
                        bf16: bool = False) -> Iterator[Any]:  # fmt: skip
    """The model, inside FakeTensorMode while the block runs (fake=False: real tensors); bf16: built in bf16 (model.to()
    cannot swap fake parameters), else in the default dtype (fp32). MHA: as many KV heads as heads."""
    import torch
    import transformers.masking_utils as masking
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers import LlamaConfig, LlamaForCausalLM

    saved = masking._ignore_causal_mask_sdpa, masking.find_packed_sequence_indices
    masking._ignore_causal_mask_sdpa = lambda padding_mask, q_length, kv_length, *a, **k: padding_mask is None and q_length == kv_length
    masking.find_packed_sequence_indices = lambda position_ids: None
    try:
        config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
                             num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=8192,
                             tie_word_embeddings=tied, use_cache=False)  # fmt: skip
        config._attn_implementation = "sdpa"
        with FakeTensorMode() if fake else contextlib.nullcontext():
            default = torch.get_default_dtype()
            torch.set_default_dtype(torch.bfloat16 if bf16 else default)
            try:
                model = LlamaForCausalLM(config)
            finally:
                torch.set_default_dtype(default)
            yield model
    finally:
        masking._ignore_causal_mask_sdpa, masking.find_packed_sequence_indices = saved
