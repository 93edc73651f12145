"""Parameter layouts of the benchmarks: the tensor sizes an optimizer is stepped on.

  resnet50  the 161 parameter tensors of ResNet-50 (torchvision's layout,
            25,557,032 parameters) for N = 25M; for smaller N the channel
            widths are scaled so the total is closest to N (width 0.166 at 1M,
            0.61 at 10M): the tensor sizes of a real network.
  equal4    4 equal tensors summing to N (6.25M elements each at 25M): few
            kernel launches, and every tensor several times the CPU's
            last-level cache.

benchmarks.bench_optimizers, benchmarks.kernel_alone_dgc, benchmarks.profile_step
and benchmarks.comm_volume build their parameters from these.  Run from the
repository root, it prints each layout's tensor count and parameter count for
about N parameters:

    python -m benchmarks.layouts [--size 2.5e7]
"""
import argparse

import numpy as np

from examples.common.cli import parameter_count

LAYOUTS = ("resnet50", "equal4")
RESNET50_PARAMS, RESNET50_TENSORS = 25_557_032, 161


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


def resnet50_sizes(n):
    """Tensor sizes of ResNet-50 with its channel width scaled so the total is closest to n,
    and that width."""
    def total(width):
        return sum(int(np.prod(s)) for _, s in resnet50_shapes(width))

    width = 1.0  # ResNet-50 itself (25.56M) stands for 25M
    if total(width) > 1.03 * n:
        lo, hi = 0.0, 1.0
        for _ in range(40):  # total() grows with the width
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if total(mid) < n else (lo, mid)
        width = min((lo, hi), key=lambda w: abs(total(w) - n))
    return [int(np.prod(s)) for _, s in resnet50_shapes(width)], width


def layout_sizes(layout, n):
    """(tensor sizes, description) of a layout for about n parameters."""
    if layout == "equal4":
        parts = max(1, min(4, n))
        base = n // parts
        return [base] * (parts - 1) + [n - base * (parts - 1)], f"{parts} equal tensors"
    if layout != "resnet50":
        raise ValueError(f"unknown layout {layout!r}; have {', '.join(LAYOUTS)}")
    sizes, width = resnet50_sizes(n)
    return sizes, f"ResNet-50 tensors at width {width:.3f}, largest {max(sizes):,}"


def build_parser():
    parser = argparse.ArgumentParser(prog="python -m benchmarks.layouts",
                                     description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n")[1])
    parser.add_argument("--size", type=parameter_count, default=25_000_000, metavar="N",
                        help="total float32 parameters (e.g. 1e6, 2.5e7; default 2.5e7)")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    print(f"{'layout':10s} {'tensors':>8s} {'parameters':>12s}  description")
    for layout in LAYOUTS:
        sizes, described = layout_sizes(layout, args.size)
        print(f"{layout:10s} {len(sizes):8d} {sum(sizes):12,d}  {described}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
