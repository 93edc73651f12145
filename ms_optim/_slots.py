"""A native kernel's tensors by slot name, without MindSpore.

The library reports each AOT kernel's declaration (``ops/core/contract.h``) as
text, e.g. ``"param:each m:each lr wd -> done"``.  ``parse`` reads it into
``Slot`` tuples; ``flat_arrays`` turns tensors given by slot name into the flat
list a direct call takes (inputs, then outputs).  ``ms_optim.aot`` builds
MindSpore ops from the same slots; ``ms_optim.testing`` and ``ms_optim._cuda``
call kernels directly with them.
"""
from typing import NamedTuple


class Slot(NamedTuple):
    """One slot of a kernel's declaration: its name, its arity (``"one"``; ``"each"``, one
    tensor per parameter; ``"count"``, one tensor of K elements; ``"rest"``, as many as
    remain) and whether it is an output."""
    name: str
    arity: str
    output: bool

    @property
    def multi(self):
        """True for a slot of several tensors (given as a sequence)."""
        return self.arity in ("each", "rest")


def parse(text):
    """The slots of a declaration as the library reports it, in call order."""
    inputs, _, outputs = text.partition(" -> ")
    return tuple(Slot(*(word.split(":") + ["one"])[:2], output)
                 for part, output in ((inputs, False), (outputs, True)) for word in part.split())


def check_names(entry, given, want):
    """ValueError naming the missing and unknown names of `given` against `want`."""
    missing = [n for n in want if n not in given]
    unknown = [n for n in given if n not in want]
    if missing or unknown:
        raise ValueError(f"native kernel {entry}: missing {missing}, unknown {unknown}; it "
                         f"takes {list(want)}")


def flat_arrays(entry, slots, named):
    """The flat tensor list (inputs, then outputs) of a direct call of `entry`, whose
    declaration is `slots`, from its tensors given by slot name (a sequence for a slot of
    several); ValueError naming a missing or unknown slot, or slots of one tensor per
    parameter whose lengths differ."""
    check_names(entry, named, [s.name for s in slots])
    counts = {s.name: len(named[s.name]) for s in slots if s.arity == "each"}
    if len(set(counts.values())) > 1:
        raise ValueError(f"native kernel {entry}: the per-parameter slots differ in length: "
                         f"{counts}")
    out = []
    for s in slots:
        out.extend(named[s.name] if s.multi else [named[s.name]])
    return out
