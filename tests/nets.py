"""The networks of the tests, declared once: imported by tests/helpers.py, the test files and
the msrun worker script tests/distributed/dgc_worker.py, as tests.nets."""
import mindspore as ms
from mindspore import nn


class SmallNet(nn.Cell):
    """Dense -> BatchNorm (parameters named gamma/beta) -> Dense, all parameters trainable.

    The first Dense has no bias: BatchNorm would cancel it, leaving it a
    gradient of pure rounding noise that Adam magnifies to full-size steps.
    """

    def __init__(self, n_in=6, hidden=10, n_out=3, dtype=ms.float32):
        super().__init__()
        self.fc1 = nn.Dense(n_in, hidden, has_bias=dtype != ms.float32, dtype=dtype)
        self.bn = nn.BatchNorm1d(hidden, dtype=dtype) if dtype == ms.float32 else None
        self.relu = nn.ReLU()
        self.fc2 = nn.Dense(hidden, n_out, dtype=dtype)

    def construct(self, x):
        x = self.fc1(x)
        if self.bn is not None:
            x = self.bn(x)
        return self.fc2(self.relu(x))


class WideNet(nn.Cell):
    """Dense -> ReLU -> Dense with a first weight of at least 16384 elements, so that
    DGCMomentum compresses it (64 x 300 = 19200 by default)."""

    def __init__(self, dtype=ms.float32, n_in=64, hidden=300, n_out=3):
        super().__init__()
        self.fc1 = nn.Dense(n_in, hidden, dtype=dtype)
        self.fc2 = nn.Dense(hidden, n_out, dtype=dtype)
        self.relu = nn.ReLU()

    def construct(self, x):
        return self.fc2(self.relu(self.fc1(x)))
