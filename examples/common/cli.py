"""argparse value types of the examples, benchmarks and tools: a bad value is a usage error
(exit status 2, no traceback)."""
import argparse


def _number(text, kind):
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a{'n integer' if kind is int else ' number'}: "
                                         f"{text!r}") from None


def positive_int(text):
    """An integer >= 1."""
    value = _number(text, int)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def nonnegative_int(text):
    """An integer >= 0 (seeds)."""
    value = _number(text, int)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text}")
    return value


def positive_float(text):
    """A finite number > 0 (learning rates)."""
    value = _number(text, float)
    if not 0.0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def parameter_count(text):
    """A whole number >= 1, also written in exponent form (1e6, 2.5e7): parameter counts."""
    value = _number(text, float)
    if not (1 <= value < float("inf")) or value != int(value):
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text}")
    return int(value)
