"""Bytes one DGCMomentum worker sends per step, against dense fp32 gradients.

    python -m benchmarks.comm_volume [--sparsity 0.999] [--bucket-sparsity 0.9]

For the digits MLP of examples/common/digits.py and for ResNet-50's parameter
shapes (torchvision's resnet50, as benchmarks/layouts.py has them: 161 tensors,
25,557,032 parameters), at the final sparsity 0.999 (``--sparsity``), with the
small tensors sent dense and compressed as one bucket (``--bucket-sparsity``).  The
numbers are the sizes of the buffers DGCMomentum's exchange (ms_optim/dgc/exchange.py)
builds: the fused float32 buffer of the dense gradients, and the fused
int32-index + float32-value buffers of the selections (and the bucket's).  (Their shapes are
static in the compiled graph, so the sizes are exact; tests/distributed/test_dgc_msrun.py
checks them against a real 2-worker run.)
"""
import argparse

import mindspore as ms
import numpy as np
from mindspore import Parameter, Tensor

import ms_optim
from benchmarks.layouts import RESNET50_PARAMS, RESNET50_TENSORS, resnet50_shapes
from examples.common import digits


def stats_for(named_shapes, sparsity=0.999, bucket_sparsity=None):
    """(exchange_stats, number of compressed tensors, number of tensors) of DGCMomentum."""
    params = [Parameter(Tensor(np.zeros(s, np.float32)), name=n) for n, s in named_shapes]
    opt = ms_optim.DGCMomentum(params, learning_rate=0.1, momentum=0.9, rampup_begin_step=0,
                               sparsity=[sparsity], bucket_sparsity=bucket_sparsity)
    return opt.exchange_stats(step=1000), len(opt.compressed_params), len(params)


def sparsity_arg(text):
    """argparse type: a float in [0, 1)."""
    value = float(text)
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return value


def build_parser():
    parser = argparse.ArgumentParser(prog="python -m benchmarks.comm_volume",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--sparsity", type=sparsity_arg, default=0.999,
                        help="DGC's final sparsity: the fraction of gradient entries not sent "
                             "(default 0.999)")
    parser.add_argument("--bucket-sparsity", type=sparsity_arg, default=0.9,
                        help="the sparsity of the bucket of small tensors, in the second row "
                             "of each network (default 0.9)")
    return parser


def parse_args(argv=None):
    return build_parser().parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    mlp = [(p.name, p.shape) for p in digits.make_net().trainable_params()]
    resnet = resnet50_shapes()
    assert sum(int(np.prod(s)) for _, s in resnet) == RESNET50_PARAMS
    assert len(resnet) == RESNET50_TENSORS
    print(f"{'network':10s} {'small tensors':>14s} {'tensors':>8s} {'compressed':>10s} "
          f"{'dense fp32 bytes':>17s} {'DGC bytes':>10s} {'of which small':>15s} {'ratio':>7s}")
    for name, shapes in (("digits MLP", mlp), ("ResNet-50", resnet)):
        for bucket in (None, args.bucket_sparsity):
            st, ncomp, n = stats_for(shapes, args.sparsity, bucket)
            how = "dense" if bucket is None else f"bucket {bucket:g}"
            print(f"{name:10s} {how:>14s} {n:8d} {ncomp:10d} {st['dense_bytes']:17,d} "
                  f"{st['bytes']:10,d} {st['dense_part_bytes'] + st['bucket_bytes']:15,d} "
                  f"{st['compression']:6.1f}x")


if __name__ == "__main__":
    main()
