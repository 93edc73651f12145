"""argparse value types shared by the scripts: they reject bad values with a usage error."""
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
