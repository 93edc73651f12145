"""Gradient clipping with PaddlePaddle's semantics, as MindSpore Cells.

Each class is a ``mindspore.nn.Cell`` mapping a tuple of gradients to the
clipped tuple, so it can be used on its own (GRAPH_MODE or PyNative), inside
any ``construct``; the ms_optim optimizers that take ``grad_clip`` accept
these classes (and only these) and may fuse the clipping into their native
kernels.

- ``ClipGradByGlobalNorm(c)``: ``gn = sqrt(sum_i ||g_i||^2)``; every ``g *= c / max(gn, c)``.
- ``ClipGradByNorm(c)``: per tensor, if ``||g|| > c`` then ``g *= c / ||g||``.
- ``ClipGradByValue(max, min=None)``: clamp to ``[min, max]``, ``min`` defaulting to ``-max``.
"""
import numbers

from mindspore import Tensor, nn, ops
from mindspore import dtype as mstype
from mindspore.ops import composite as C
from mindspore.ops import functional as F

from . import _checks

_sumsq = C.MultitypeFuncGraph("ms_optim_clip_sumsq")
_scale = C.MultitypeFuncGraph("ms_optim_clip_scale")
_norm_clip = C.MultitypeFuncGraph("ms_optim_clip_norm")
_value_clip = C.MultitypeFuncGraph("ms_optim_clip_value")


@_sumsq.register("Tensor")
def _tensor_sumsq(grad):
    g = F.cast(grad, mstype.float32)
    return ops.reduce_sum(g * g)


@_scale.register("Tensor", "Tensor")
def _tensor_scale(factor, grad):
    return grad * F.cast(factor, F.dtype(grad))


@_norm_clip.register("Tensor", "Tensor")
def _tensor_norm_clip(clip_norm, grad):
    g = F.cast(grad, mstype.float32)
    norm = ops.sqrt(ops.reduce_sum(g * g))
    factor = ops.select(norm > clip_norm, clip_norm / norm, ops.ones_like(norm))
    return grad * F.cast(factor, F.dtype(grad))


@_value_clip.register("Tensor", "Tensor", "Tensor")
def _tensor_value_clip(lo, hi, grad):
    return ops.clip_by_value(grad, F.cast(lo, F.dtype(grad)), F.cast(hi, F.dtype(grad)))


def _float32_number(cls, name, value):
    """A float or an int (not a bool), finite in float32 (the clip's tensors), as a float."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise TypeError(f"For '{cls}', the '{name}' must be a float or an int, but got "
                        f"{type(value).__name__}: {value!r}.")
    value = _checks.as_float(cls, name, value)
    return _checks.check_float32_finite(cls, name, value)


def _positive_number(cls, name, value):
    value = _float32_number(cls, name, value)
    if not value > 0:
        raise ValueError(f"For '{cls}', the '{name}' must be greater than 0, but got {value}.")
    return value


class ClipGradByGlobalNorm(nn.Cell):
    r"""Scales all gradients together so that their global L2 norm is at most `clip_norm`.

    PaddlePaddle's ``paddle.nn.ClipGradByGlobalNorm``.  With :math:`c` = `clip_norm`:

    .. math::
        gn = \sqrt{\sum_i \|g_i\|^2}, \qquad g_i \leftarrow g_i \cdot \frac{c}{\max(gn, c)}

    The norms are computed in float32; each gradient keeps its dtype.

    Args:
        clip_norm (Union[float, int]): The largest global norm, greater than 0.

    Inputs:
        - **grads** (tuple[Tensor]) - The gradients.

    Outputs:
        tuple[Tensor], the clipped gradients, of the same shapes and dtypes.

    Raises:
        TypeError: If `clip_norm` is not a float or an int (a bool included).
        ValueError: If `clip_norm` is not greater than 0, or not finite in float32.

    Supported Platforms:
        ``CPU`` ``GPU`` ``Ascend``

        Verified on CPU, as a Cell and as the `grad_clip` of the ms_optim optimizers.  It
        is built from plain MindSpore ops, which also run on GPU and Ascend; not tested on
        those devices.

    Examples:
        >>> import numpy as np
        >>> import mindspore as ms
        >>> from ms_optim.clip import ClipGradByGlobalNorm
        >>> clip = ClipGradByGlobalNorm(clip_norm=2.5)
        >>> grads = (ms.Tensor(np.array([3.0, 0.0], np.float32)),
        ...          ms.Tensor(np.array([4.0], np.float32)))
        >>> [g.asnumpy() for g in clip(grads)]  # global norm 5: every gradient halved
        [array([1.5, 0. ], dtype=float32), array([2.], dtype=float32)]
    """

    def __init__(self, clip_norm):
        super().__init__()
        self.clip_norm = _positive_number("ClipGradByGlobalNorm", "clip_norm", clip_norm)
        self._c = Tensor(self.clip_norm, mstype.float32)
        self._one = Tensor(1.0, mstype.float32)
        self.map_ = C.Map()

    def factor(self, sq_norms, norm_scale):
        """The factor ``c / max(gn, c)`` with ``gn = sqrt(sum(sq_norms)) * norm_scale``, from
        the gradients' squared norms (a tuple of float32 scalars) and a float32 scale."""
        gn = ops.sqrt(ops.addn(sq_norms)) * norm_scale
        return self._c / ops.maximum(gn, self._c)

    def construct(self, grads):
        factor = self.factor(self.map_(_sumsq, grads), self._one)
        return self.map_(F.partial(_scale, factor), grads)

    def extend_repr(self):
        return f"clip_norm={self.clip_norm}"


class ClipGradByNorm(nn.Cell):
    r"""Scales each gradient tensor whose L2 norm exceeds `clip_norm` down to that norm.

    PaddlePaddle's ``paddle.nn.ClipGradByNorm``.  With :math:`c` = `clip_norm`, per tensor:

    .. math::
        g \leftarrow g \cdot \frac{c}{\|g\|} \quad \text{if } \|g\| > c,
        \text{ else unchanged}

    The norm is computed in float32; each gradient keeps its dtype.

    Args:
        clip_norm (Union[float, int]): The largest norm of each tensor, greater than 0.

    Inputs:
        - **grads** (tuple[Tensor]) - The gradients.

    Outputs:
        tuple[Tensor], the clipped gradients, of the same shapes and dtypes.

    Raises:
        TypeError: If `clip_norm` is not a float or an int (a bool included).
        ValueError: If `clip_norm` is not greater than 0, or not finite in float32.

    Supported Platforms:
        ``CPU`` ``GPU`` ``Ascend``

        Verified on CPU, as a Cell and as the `grad_clip` of the ms_optim optimizers.  It
        is built from plain MindSpore ops, which also run on GPU and Ascend; not tested on
        those devices.

    Examples:
        >>> import numpy as np
        >>> import mindspore as ms
        >>> from ms_optim.clip import ClipGradByNorm
        >>> clip = ClipGradByNorm(clip_norm=2.5)
        >>> grads = (ms.Tensor(np.array([3.0, 4.0], np.float32)),
        ...          ms.Tensor(np.array([0.5], np.float32)))
        >>> [g.asnumpy() for g in clip(grads)]  # norms 5 (halved) and 0.5 (kept)
        [array([1.5, 2. ], dtype=float32), array([0.5], dtype=float32)]
    """

    def __init__(self, clip_norm):
        super().__init__()
        self.clip_norm = _positive_number("ClipGradByNorm", "clip_norm", clip_norm)
        self._c = Tensor(self.clip_norm, mstype.float32)
        self.map_ = C.Map()

    def construct(self, grads):
        return self.map_(F.partial(_norm_clip, self._c), grads)

    def extend_repr(self):
        return f"clip_norm={self.clip_norm}"


class ClipGradByValue(nn.Cell):
    """Clamps every gradient element to ``[min, max]``.

    PaddlePaddle's ``paddle.nn.ClipGradByValue``: ``g = clip(g, min, max)`` element-wise,
    in each gradient's dtype.

    Args:
        max (Union[float, int]): The upper bound.  Without `min` it must be greater than 0.
        min (Union[float, int], optional): The lower bound, not greater than `max`.
            ``None`` means ``-max``.  Default: ``None``.

    Inputs:
        - **grads** (tuple[Tensor]) - The gradients.

    Outputs:
        tuple[Tensor], the clipped gradients, of the same shapes and dtypes.

    Raises:
        TypeError: If `max` or `min` (when given) is not a float or an int (a bool
            included).
        ValueError: If `min` is not given and `max` is not greater than 0.
        ValueError: If `min` is greater than `max`.
        ValueError: If `max` or `min` is NaN or not finite in float32.

    Supported Platforms:
        ``CPU`` ``GPU`` ``Ascend``

        Verified on CPU, as a Cell and as the `grad_clip` of the ms_optim optimizers.  It
        is built from plain MindSpore ops, which also run on GPU and Ascend; not tested on
        those devices.

    Examples:
        >>> import numpy as np
        >>> import mindspore as ms
        >>> from ms_optim.clip import ClipGradByValue
        >>> grads = (ms.Tensor(np.array([-2.0, 0.5, 3.0], np.float32)),)
        >>> [g.asnumpy() for g in ClipGradByValue(1.0)(grads)]  # to [-1, 1]
        [array([-1. ,  0.5,  1. ], dtype=float32)]
        >>> [g.asnumpy() for g in ClipGradByValue(1.0, min=0.0)(grads)]
        [array([0. , 0.5, 1. ], dtype=float32)]
    """

    def __init__(self, max, min=None):  # pylint: disable=redefined-builtin
        super().__init__()
        cls = "ClipGradByValue"
        max = _float32_number(cls, "max", max)
        if min is not None:
            min = _float32_number(cls, "min", min)
        if min is None:
            if not max > 0:
                raise ValueError(f"For '{cls}', the 'max' must be greater than 0 when 'min' is not "
                                 f"given, but got {max}.")
            min = -max
        if min > max:
            raise ValueError(f"For '{cls}', the 'min' ({min}) must not be greater than 'max' ({max}).")
        self.max, self.min = float(max), float(min)
        self._lo = Tensor(self.min, mstype.float32)
        self._hi = Tensor(self.max, mstype.float32)
        self.map_ = C.Map()

    def construct(self, grads):
        return self.map_(F.partial(_value_clip, self._lo, self._hi), grads)

    def extend_repr(self):
        return f"min={self.min}, max={self.max}"


CLIP_TYPES = (ClipGradByGlobalNorm, ClipGradByNorm, ClipGradByValue)


def check_grad_clip(cls, grad_clip, allowed=CLIP_TYPES):
    """None, or an instance of one of `allowed`; anything else is a TypeError."""
    if grad_clip is not None and not isinstance(grad_clip, allowed):
        names = ", ".join(f"ms_optim.clip.{t.__name__}" for t in allowed)
        raise TypeError(f"For '{cls}', the 'grad_clip' must be None or one of {names}, but got "
                        f"{type(grad_clip).__name__}.")
    return grad_clip
