"""Loading checkpoints: configs, tokenizers, LoRA adapters and the transformers seam."""
