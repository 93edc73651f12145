"""Weight-decay regularizers with PaddlePaddle's names, for ms_optim.DGCMomentum.

``L2Decay(c)`` adds ``c * p`` to the gradient, ``L1Decay(c)`` adds
``c * sign(p)``; DGCMomentum applies them to each worker's local gradient,
before momentum and compression.
"""
import math
import numbers


class _Decay:
    _KIND = ""

    def __init__(self, coeff=0.0):
        name = type(self).__name__
        if not isinstance(coeff, numbers.Real) or isinstance(coeff, bool):
            raise TypeError(f"For '{name}', the 'coeff' must be a float or an int, but got "
                            f"{type(coeff).__name__}: {coeff!r}.")
        if not math.isfinite(coeff) or coeff < 0:
            raise ValueError(f"For '{name}', the 'coeff' must be finite and >= 0, but got "
                             f"{coeff}.")
        self.coeff = float(coeff)

    def __repr__(self):
        return f"{type(self).__name__}(coeff={self.coeff})"


class L1Decay(_Decay):
    r"""L1 regularization for ``ms_optim.DGCMomentum``: :math:`g = g + c \cdot \mathrm{sign}(w)`.

    PaddlePaddle's ``paddle.regularizer.L1Decay``.  Given as DGCMomentum's
    `regularization`, it is added to every parameter's local gradient (after the loss
    scale is divided out and the gradient clipped, before momentum and compression).

    Args:
        coeff (Union[float, int], optional): The coefficient :math:`c`, finite and >= 0.
            Default: ``0.0``.

    Raises:
        TypeError: If `coeff` is not a float or an int (a bool included).
        ValueError: If `coeff` is negative, NaN or infinite.

    Supported Platforms:
        ``CPU`` ``GPU`` ``Ascend``

        A plain Python settings object; DGCMomentum applies it with MindSpore ops
        (verified on CPU, not tested on GPU/Ascend).

    Examples:
        >>> from mindspore import nn
        >>> import ms_optim
        >>> from ms_optim.regularizer import L1Decay
        >>> reg = L1Decay(1e-4)
        >>> reg
        L1Decay(coeff=0.0001)
        >>> net = nn.Dense(256, 128)  # a weight of 32,768 elements: compressed
        >>> opt = ms_optim.DGCMomentum(net.trainable_params(), learning_rate=0.1,
        ...                            momentum=0.9, rampup_begin_step=0, regularization=reg)
    """
    _KIND = "l1"


class L2Decay(_Decay):
    r"""L2 regularization for ``ms_optim.DGCMomentum``: :math:`g = g + c \cdot w`.

    PaddlePaddle's ``paddle.regularizer.L2Decay``.  Given as DGCMomentum's
    `regularization`, it is added to every parameter's local gradient (after the loss
    scale is divided out and the gradient clipped, before momentum and compression).
    Unlike DGCMomentum's `weight_decay`, it applies to every parameter, whatever its name.

    Args:
        coeff (Union[float, int], optional): The coefficient :math:`c`, finite and >= 0.
            Default: ``0.0``.

    Raises:
        TypeError: If `coeff` is not a float or an int (a bool included).
        ValueError: If `coeff` is negative, NaN or infinite.

    Supported Platforms:
        ``CPU`` ``GPU`` ``Ascend``

        A plain Python settings object; DGCMomentum applies it with MindSpore ops
        (verified on CPU, not tested on GPU/Ascend).

    Examples:
        >>> from mindspore import nn
        >>> import ms_optim
        >>> from ms_optim.regularizer import L2Decay
        >>> reg = L2Decay(1e-4)
        >>> reg
        L2Decay(coeff=0.0001)
        >>> net = nn.Dense(256, 128)  # a weight of 32,768 elements: compressed
        >>> opt = ms_optim.DGCMomentum(net.trainable_params(), learning_rate=0.1,
        ...                            momentum=0.9, rampup_begin_step=0, regularization=reg)
    """
    _KIND = "l2"
