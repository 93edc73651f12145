"""AdamOffload's moments as the tests hold them: numpy's view of MindSpore's bfloat16, one
tensor's compact moments with the kernel's arguments and the reference's, and an optimizer's
moments as comparable bits."""
import numpy as np

import mindspore as ms

from ms_optim import reference

# numpy's view of MindSpore's bfloat16 (its dtype string is "bfloat16", as the kernels expect)
BF16 = ms.Tensor(np.zeros(1, np.float32)).astype(ms.bfloat16).asnumpy().dtype


class Moments:
    """One tensor's moments stored as `kind`, with the kernel's arguments and the reference's."""

    def __init__(self, kind, m, v):
        self.kind = kind
        if kind == "bfloat16":
            self.m = reference.bf16_bits(m).view(BF16)
            self.v = reference.bf16_bits(v).view(BF16)
            self.scales = []
        else:
            self.m, ms_ = reference.q8_quantize(m, True)
            self.v, vs = reference.q8_quantize(v, False)
            self.scales = [ms_, vs]

    def copy(self):
        other = Moments.__new__(Moments)
        other.kind, other.m, other.v = self.kind, self.m.copy(), self.v.copy()
        other.scales = [s.copy() for s in self.scales]
        return other

    def ref_args(self):
        """(m, v, m_scale, v_scale) as reference.adam_compact_step updates them in place."""
        m, v = self.m, self.v
        if self.kind == "bfloat16":
            m, v = m.view(np.uint16), v.view(np.uint16)
        return (m, v) + (tuple(self.scales) if self.scales else (None, None))

    def assert_equal(self, other):
        np.testing.assert_array_equal(self.m.view(np.uint8 if self.kind == "int8" else np.uint16),
                                      other.m.view(np.uint8 if self.kind == "int8" else np.uint16))
        np.testing.assert_array_equal(self.v.view(np.uint8 if self.kind == "int8" else np.uint16),
                                      other.v.view(np.uint8 if self.kind == "int8" else np.uint16))
        for a, b in zip(self.scales, other.scales):
            np.testing.assert_array_equal(a, b)


def bits(x):
    """Moment values as comparable integers (bfloat16 has no numpy comparison of its own)."""
    x = np.asarray(x)
    return x.view(np.uint16) if x.dtype == BF16 else x


def adam_state(opt):
    """An AdamOffload's moments and their int8 scales, as comparable arrays."""
    return [bits(p.asnumpy()) for p in tuple(opt.moment1) + tuple(opt.moment2)
            + tuple(opt.moment1_scale) + tuple(opt.moment2_scale)]
