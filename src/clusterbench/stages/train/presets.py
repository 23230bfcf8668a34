"""The model presets: one small declarative entry each. Plain data, so that listing them (in a
command's help) imports neither torch nor transformers."""

from __future__ import annotations

from typing import Any

# Llama-architecture shapes as LlamaConfig keyword arguments.
PRESETS: dict[str, dict[str, Any]] = {
    # ~2.1M parameters over the shipped 4096-token vocabulary: trains on two CPU cores in seconds.
    "tiny": {"vocab_size": 4096, "hidden_size": 128, "intermediate_size": 512, "num_hidden_layers": 4,
             "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 1024,
             "rope_theta": 10000.0, "tie_word_embeddings": False},
    # GPT-3 Small width and depth with a Llama-2-sized vocabulary: ~134M parameters.
    "125m": {"vocab_size": 32000, "hidden_size": 768, "intermediate_size": 2048, "num_hidden_layers": 12,
             "num_attention_heads": 12, "num_key_value_heads": 12, "max_position_embeddings": 2048,
             "rope_theta": 10000.0, "tie_word_embeddings": False},
    # Llama-3.2-1B shape.
    "llama-1b": {"vocab_size": 128256, "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
             "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 8192,
             "rope_theta": 500000.0, "tie_word_embeddings": True},
    # Llama-3-8B shape.
    "llama-8b": {"vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
             "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 8192,
             "rope_theta": 500000.0, "tie_word_embeddings": False},
}
