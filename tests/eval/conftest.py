import pytest
import torch

from mhar.eval.adapter import wrap_decoder
from mhar.model import Decoder, ModelConfig, StreamConfig


def byte_encode(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def byte_decode(ids) -> str:
    return bytes(int(i) for i in ids if int(i) < 256).decode("utf-8", errors="replace")


def tiny_decoder(method: str = "routed", heads: int = 2, max_seq_len: int = 512, seed: int = 0) -> Decoder:
    torch.manual_seed(seed)
    cfg = ModelConfig(vocab_size=257, d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=64,
                      max_seq_len=max_seq_len, stream=StreamConfig(method=method, heads=heads if method != "standard" else 1))
    return Decoder(cfg).eval()


@pytest.fixture
def tiny_model():
    """A tiny random MHAR decoder over bytes (EOS = 256)."""
    return wrap_decoder(tiny_decoder(), byte_encode, byte_decode, name="tiny", eos_id=256)


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models run faster on one thread (and leave the other core to the machine)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
