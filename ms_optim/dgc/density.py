"""How dense DGC's selection can be on a given link: ``choose_sparsity``.

Denser selections (a lower sparsity) train in fewer steps: the residuals hold
less gradient back.  Sparser ones send fewer bytes.  The recommended sparsity is
the densest one whose modeled exchange takes at most a share (`budget`, 0.5) of
a step's compute time, which depends on the link, the model and the step.
``choose_sparsity`` reads that off DGCMomentum's wire model
(``wire.exchange_stats``: the bytes MindSpore's CPU collectives send per host) and
the link's rate, for the parameters DGCMomentum would compress (float32 or
float16, at least 16384 elements).

Examples:
    >>> from ms_optim.dgc import choose_sparsity
    >>> sizes = [64 * 4096, 4096, 4096 * 4096, 4096, 4096 * 10, 10]   # a 17.1M MLP
    >>> choose_sparsity(sizes, workers=2, link_gbit_s=1.0, step_s=0.09)
    0.98
    >>> choose_sparsity(sizes, workers=2, link_gbit_s=0.1, step_s=0.09)
    0.999
"""
import numbers

from .. import _checks
from .schedule import DGCPlan
from . import checks, wire
from .plan import applied_entries

# the sparsities choose_sparsity picks from, densest first
SPARSITY_CHOICES = (0.9, 0.95, 0.98, 0.99, 0.995, 0.999)
_NAME = "choose_sparsity"


def exchange_seconds(sizes, sparsity, *, workers, link_gbit_s, exchange="auto",
                     compressible=None, bucket_sparsity=None):
    """Seconds one host needs to send its share of a DGC step's exchange at `sparsity`
    among `workers` hosts, on a link of `link_gbit_s` Gbit/s per direction: the wire
    bytes of ``wire.exchange_stats`` over the rate (a lower bound: no latency, headers
    or compute).  `sizes` are the parameters' numbers of elements, `compressible` per
    parameter whether its dtype can be compressed (default: every one); DGCMomentum's
    plan (``DGCPlan``) says which are, and which go in the bucket of `bucket_sparsity`."""
    compressible = [True] * len(sizes) if compressible is None else list(compressible)
    plan = DGCPlan(sizes, compressible, [sparsity], rampup_begin_step=0, rampup_step=1,
                   bucket_sparsity=bucket_sparsity)
    comp = sum(sizes[i] for i in plan.comp_ids)
    small = sum(sizes[i] for i in plan.dense_ids)
    ks = plan.stage_k[0]
    how = wire.stage_exchange(exchange, sum(ks), comp, workers)
    selected = applied_entries(ks, how, workers)
    bucket = {}
    if plan.bucket_ids:
        bucket_how = wire.stage_exchange(exchange, plan.bucket_k[0], plan.bucket_numel, workers)
        bucket = dict(bucket_elements=plan.bucket_numel, bucket_exchange=bucket_how,
                      bucket_selected=applied_entries((plan.bucket_k[0],), bucket_how, workers))
    stats = wire.exchange_stats(step=0, stage=0, sparsity=sparsity, workers=workers,
                                exchange=how, selected=selected, small_elements=small,
                                compressed_elements=comp, signature_bytes=0, **bucket)
    return stats["wire_bytes"] * 8 / (link_gbit_s * 1e9)


def _sizes(params, dense_params=None):
    """(elements, compressible) per parameter, from Parameters (their ``size`` and
    ``dtype``) or ints (compressible); those `dense_params` names are not compressible."""
    if isinstance(params, (str, bytes)) or not hasattr(params, "__iter__"):
        raise TypeError(f"For '{_NAME}', the 'params' must be a list of Parameters or of "
                        f"element counts, but got {type(params).__name__}.")
    params = list(params)   # read twice: sizes, then names
    sizes, compressible = [], []
    for p in params:
        n = getattr(p, "size", p)
        if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 1:
            raise TypeError(f"For '{_NAME}', every entry of 'params' must be a Parameter or a "
                            f"positive int, but got {type(p).__name__}: {p!r}.")
        sizes.append(int(n))
        dtype = getattr(p, "dtype", checks.COMPRESSED_DTYPES[0])
        compressible.append(dtype in checks.COMPRESSED_DTYPES)
    if not sizes:
        raise ValueError(f"For '{_NAME}', the 'params' must not be empty.")
    asked = checks.dense_mask(_NAME, dense_params, [getattr(p, "name", None) for p in params])
    return sizes, [c and not d for c, d in zip(compressible, asked)]


def choose_sparsity(params, *, workers, link_gbit_s, step_s, budget=0.5,
                    exchange="auto", choices=SPARSITY_CHOICES, bucket_sparsity=None,
                    dense_params=None):
    """The densest sparsity of `choices` whose exchange takes at most `budget` times the
    step's compute time on the given link (the sparsest of them when none does).

    Args:
        params (list): The parameters DGCMomentum will step (``net.trainable_params()``), or
            their numbers of elements.
        workers (int): The number of workers exchanging, one per host.
        link_gbit_s (float): What each host sends per second over the link, in Gbit/s
            (measured, or the lowest rate expected: a lower one gives a sparser pick).
        step_s (float): One step's compute time on one worker, in seconds: forward,
            backward and the optimizer, without the exchange (the median of about 20
            steps of the model in one process, leaving out the first few, which compile).
        budget (float): The share of `step_s` the exchange may take.  Default: ``0.5``.
        exchange (str): DGCMomentum's `exchange`, whose bytes are modeled.  Default:
            ``"auto"``.
        choices (tuple[float]): The sparsities to pick from.  Default:
            ``SPARSITY_CHOICES``, 0.9 to 0.999.
        bucket_sparsity (float): DGCMomentum's `bucket_sparsity`, whose bucket of small
            parameters is modeled (None: they are sent dense).  Default: ``None``.
        dense_params (Union[list, tuple]): DGCMomentum's `dense_params`, Parameters of
            `params` or their names, modeled as sent dense.  Default: ``None``.

    Returns:
        float, an entry of `choices`, to pass as ``DGCMomentum(sparsity=[...])``.

    Raises:
        TypeError: If an argument has the wrong type.
        ValueError: If `workers` < 1, `link_gbit_s`, `step_s` or `budget` is not
            positive, `exchange` is not one of ``wire.EXCHANGES``, `choices` is empty
            or holds a value outside [0, 1), `bucket_sparsity` is outside [0, 1), or
            `dense_params` names a parameter that is not among `params` (or one twice).
    """
    sizes, compressible = _sizes(params, dense_params)
    workers = _checks.check_int(_NAME, "workers", workers)
    if workers < 1:
        raise ValueError(f"For '{_NAME}', the 'workers' must be >= 1, but got {workers}.")
    for name, value in (("link_gbit_s", link_gbit_s), ("step_s", step_s), ("budget", budget)):
        _checks.check_finite(_NAME, name, _checks.check_float(_NAME, name, value,
                                                             allow_int=True))
        _checks.check_positive(_NAME, name, value)
    _checks.check_choice(_NAME, "exchange", exchange, wire.EXCHANGES)
    if isinstance(choices, (str, bytes)) or not isinstance(choices, (list, tuple)) \
            or not choices:
        raise ValueError(f"For '{_NAME}', the 'choices' must be a non-empty list or tuple "
                         f"of sparsities, but got {choices!r}.")
    for s in choices:
        _checks.check_open_unit(_NAME, "choices", _checks.check_float(
            _NAME, "choices", s, allow_int=True), include_zero=True)
    if bucket_sparsity is not None:
        bucket_sparsity = _checks.check_open_unit(_NAME, "bucket_sparsity", _checks.check_float(
            _NAME, "bucket_sparsity", bucket_sparsity, allow_int=True), include_zero=True)
    ordered = sorted(float(s) for s in choices)
    for s in ordered:
        if exchange_seconds(sizes, s, workers=workers, link_gbit_s=link_gbit_s,
                            exchange=exchange, compressible=compressible,
                            bucket_sparsity=bucket_sparsity) <= budget * step_s:
            return s
    return ordered[-1]
