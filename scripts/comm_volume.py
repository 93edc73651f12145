"""Bytes one DGCMomentum worker sends per step, against dense fp32 gradients.

    python scripts/comm_volume.py [--sparsity 0.999]

For the digits MLP of scripts/train.py and for ResNet-50's parameter shapes
(torchvision's resnet50: 161 tensors, 25,557,032 parameters), at the final
sparsity 0.999 (``--sparsity``).  The numbers are the sizes of the buffers DGCMomentum's
exchange (ms_optim/comm.py) builds: the fused float32 buffer of the dense
gradients, and the fused int32-index + float32-value buffers of the
selections.  (Their shapes are static in the compiled graph, so the sizes are
exact; tests/test_dgc_msrun.py checks them against a real 2-worker run.)
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def resnet50_shapes(width=1.0):
    """(name, shape) of resnet50's trainable parameters, torchvision's layout.

    width scales every channel count (rounded, at least 1); 1.0 is resnet50.
    """
    def ch(c):
        return max(1, round(c * width))

    shapes = [("conv1.weight", (ch(64), 3, 7, 7)), ("bn1.weight", (ch(64),)),
              ("bn1.bias", (ch(64),))]
    inplanes = ch(64)
    for layer, (planes, blocks) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3)), start=1):
        planes = ch(planes)
        for b in range(blocks):
            pre = f"layer{layer}.{b}"
            for c, (cin, cout, k) in enumerate([(inplanes, planes, 1), (planes, planes, 3),
                                                (planes, planes * 4, 1)], start=1):
                shapes += [(f"{pre}.conv{c}.weight", (cout, cin, k, k)),
                           (f"{pre}.bn{c}.weight", (cout,)), (f"{pre}.bn{c}.bias", (cout,))]
            if b == 0:
                shapes += [(f"{pre}.downsample.0.weight", (planes * 4, inplanes, 1, 1)),
                           (f"{pre}.downsample.1.weight", (planes * 4,)),
                           (f"{pre}.downsample.1.bias", (planes * 4,))]
            inplanes = planes * 4
    return shapes + [("fc.weight", (1000, inplanes)), ("fc.bias", (1000,))]


def stats_for(named_shapes, sparsity=0.999):
    """(exchange_stats, number of compressed tensors, number of tensors) of DGCMomentum."""
    from mindspore import Parameter, Tensor

    import ms_optim
    params = [Parameter(Tensor(np.zeros(s, np.float32)), name=n) for n, s in named_shapes]
    opt = ms_optim.DGCMomentum(params, learning_rate=0.1, momentum=0.9, rampup_begin_step=0,
                               sparsity=[sparsity])
    return opt.exchange_stats(step=1000), len(opt.compressed_params), len(params)


def sparsity_arg(text):
    """argparse type: a float in [0, 1)."""
    value = float(text)
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return value


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sparsity", type=sparsity_arg, default=0.999,
                        help="DGC's final sparsity: the fraction of gradient entries not sent "
                             "(default 0.999)")
    return parser


def parse_args(argv=None):
    return build_parser().parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    import mindspore as ms
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    import train
    digits = [(p.name, p.shape) for p in train.make_net().trainable_params()]
    resnet = resnet50_shapes()
    assert sum(int(np.prod(s)) for _, s in resnet) == 25_557_032 and len(resnet) == 161
    print(f"{'network':10s} {'tensors':>8s} {'compressed':>10s} {'dense fp32 bytes':>17s} "
          f"{'DGC bytes':>10s} {'of which dense':>15s} {'ratio':>7s}")
    for name, shapes in (("digits MLP", digits), ("ResNet-50", resnet)):
        st, ncomp, n = stats_for(shapes, args.sparsity)
        print(f"{name:10s} {n:8d} {ncomp:10d} {st['dense_bytes']:17,d} {st['bytes']:10,d} "
              f"{st['dense_part_bytes']:15,d} {st['compression']:6.1f}x")


if __name__ == "__main__":
    main()
