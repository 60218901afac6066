import pytest
import torch


@pytest.fixture
def seeded():
    torch.manual_seed(0)
    yield
