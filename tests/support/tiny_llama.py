"""The tests' tiny Llama's config.json (tests/support/real_vllm/make_tiny_model.py writes the same
shape with dummy weights), for tests that read a real recording of it without the model."""

from __future__ import annotations

TINY_LLAMA = {  # tests/support/real_vllm/make_tiny_model.py's
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
    "intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 4096,
    "max_position_embeddings": 4096, "torch_dtype": "bfloat16",
}  # fmt: skip
