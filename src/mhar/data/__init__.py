"""Data: the built-in corpus and user corpora, tokenizers, token shards and a
deterministic, resumable loader. See docs/data.md."""

from .build import (BUILTIN_DEFAULT_MB, build_dataset, builtin_dataset_name, default_dataset_dir,
                    ensure_builtin_dataset)
from .dataset import TokenDataset
from .loader import TokenLoader, validation_windows
from .tokenizer import qwen_tokenizer, train_bpe

__all__ = [
    "BUILTIN_DEFAULT_MB", "build_dataset", "builtin_dataset_name", "default_dataset_dir", "ensure_builtin_dataset",
    "TokenDataset", "TokenLoader", "validation_windows", "qwen_tokenizer", "train_bpe",
]
