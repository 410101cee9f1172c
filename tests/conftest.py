import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("SCALERL_CACHE", os.path.join(os.path.dirname(__file__), "..", ".pytest_cache", "scalerl"))


@pytest.fixture(scope="module")
def one_thread():
    """Torch on one thread for a module (``pytestmark = pytest.mark.usefixtures("one_thread")``): tiny models are
    per-op-overhead bound, one thread avoids OpenMP spin-waits on a busy machine, and reductions run in one order."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
