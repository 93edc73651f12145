"""The digits task: scikit-learn's digits and a small MLP, in MindSpore.

The 1797 8x8 digit images bundled with scikit-learn (no download) are split
75/25 (stratified, by seed) and standardized with statistics of the training
split (``load_data``); the network is a 64 -> 256 -> 128 -> 10 ReLU MLP
(``make_net``).  ``examples.train`` compares the optimizers on it,
``examples.train_dist`` trains it under msrun, ``benchmarks.comm_volume``
counts its exchange, and ``tools.fidelity`` and ``tools.link_worker`` train on
it too.

scikit-learn is imported by ``load_data`` alone, so that the network and the
helpers work without it.
"""
import mindspore as ms
import numpy as np
from mindspore import nn


def load_data(seed):
    """Digits as float32 features (standardized on the train split) and int32 labels:
    (x_train, y_train, x_test, y_test)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        x.astype(np.float32), y.astype(np.int32), test_size=0.25, stratify=y, random_state=seed)
    scaler = StandardScaler().fit(x_train)
    x_train = scaler.transform(x_train).astype(np.float32)
    x_test = scaler.transform(x_test).astype(np.float32)
    return x_train, y_train, x_test, y_test


def make_net(init_weights=None):
    """The MLP; with `init_weights` ({name: numpy array}) its parameters are set to those."""
    net = nn.SequentialCell([
        nn.Dense(64, 256), nn.ReLU(),   # 16384 weights: DGC compresses it
        nn.Dense(256, 128), nn.ReLU(),  # 32768 weights: compressed
        nn.Dense(128, 10),
    ])
    if init_weights is not None:
        set_weights(net, init_weights)
    return net


def set_weights(net, weights):
    """Sets the parameters of `net` to `weights` ({name: numpy array}), through numpy:
    Tensor.copy() is unreliable in MindSpore 2.10.  RuntimeError naming any parameter of
    `net` left unset."""
    params = {name: ms.Parameter(ms.Tensor(arr), name) for name, arr in weights.items()}
    not_loaded, _ = ms.load_param_into_net(net, params, strict_load=True)
    if not_loaded:
        raise RuntimeError(f"initial weights not loaded for: {not_loaded}")


def evaluate(net, x, y):
    """Accuracy of `net` on the whole of (x, y)."""
    net.set_train(False)
    logits = net(ms.Tensor(x)).asnumpy()
    net.set_train(True)
    return float((logits.argmax(axis=1) == y).mean())


def batches(n, batch_size, rng):
    """Shuffled index batches of one epoch; the last partial batch is dropped so that
    every step has the same shape and the graph is compiled once."""
    order = rng.permutation(n)
    for start in range(0, n - batch_size + 1, batch_size):
        yield order[start:start + batch_size]
