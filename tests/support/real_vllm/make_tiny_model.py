"""Write a tiny Llama with no weights (served with --load-format dummy) and a word-level
tokenizer into a folder. Run with the vLLM environment's python (it has `tokenizers`):

    python make_tiny_model.py DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers

VOCAB = 4096


def main(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
        "vocab_size": VOCAB, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2,
    }  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, VOCAB)}}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "model_max_length": 4096,
        "chat_template": "{% for m in messages %}{{ m['content'] }} {% endfor %}",
    }))  # fmt: skip


if __name__ == "__main__":
    main(Path(sys.argv[1]))
