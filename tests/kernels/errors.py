"""How the tests check that a native kernel rejects its arguments: the code, by cause, and the
message, which names the entry and the slot (and tensor) at fault."""
import re

import pytest

from ms_optim import capi, testing


def rejects(entry, code, message, slot=None, arrays=None, **tensors):
    """Runs native kernel `entry` on its tensors by slot name (or the flat list `arrays`, for
    a malformed tensor count) and checks that it fails: with error `code` (its name, as
    ms_optim.capi.ERROR_NAMES gives it) and a message "<entry>: <what>" whose <what> matches
    the regular expression `message` and names `slot` (a slot of one tensor per parameter may
    carry the tensor's index: m1).  Returns <what>."""
    with pytest.raises(RuntimeError) as err:
        testing.call_kernel(entry, arrays=arrays, **tensors)
    text = str(err.value)
    got = re.fullmatch(rf"{entry} failed with code (-?\d+): {entry}: (.*)", text, re.S)
    assert got, text
    assert capi.ERROR_NAMES.get(int(got[1])) == code, text
    what = got[2]
    assert re.search(message, what), text
    if slot is not None:
        assert re.search(rf"\b{re.escape(slot)}\d*\b", what), text
    return what


def rejects_one_bad(entry, make_call, slot, index, bad, code, message):
    """A well-formed call of `entry` (``make_call()``: its tensors by slot name) runs; the same
    call with `bad` for slot `slot` (for its tensor `index` when not None) fails as
    ``rejects`` checks."""
    testing.call_kernel(entry, **make_call())
    call = make_call()
    if index is None:
        call[slot] = bad
    else:
        call[slot][index] = bad
    return rejects(entry, code, message, slot=slot, **call)
