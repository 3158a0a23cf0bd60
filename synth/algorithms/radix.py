"""Mixed-radix AllReduce, ReduceScatter and AllGather for any n: recursive halving-doubling generalised to
n's prime factors.

Source: Thakur, Rabenseifner & Gropp, "Optimization of collective communication operations in MPICH",
IJHPCA 2005, section 4 (recursive halving), generalised to mixed radix with a ring inside each stage (our
arrangement, the steps of ``composition.radix_steps``, which the hierarchical rail AllReduce also uses).
With n = f_1 f_2 ... f_k (primes, ascending) a rank and a chunk are written in that mixed radix; stage l of
the ReduceScatter is a ring ReduceScatter among the f_l ranks that differ only in digit l, over the part
of the buffer they still share; after the k stages rank r holds chunk r reduced over every rank. The
AllGather runs the stages back. Cost: 2 sum(f_l - 1) alpha + 2 (n-1)/n s beta, so the ring's bytes
(bandwidth-optimal) in far fewer steps when n is composite: 72 GPUs (2^3 3^2) 14 steps against the
ring's 142; 12 GPUs 8 against 22. On n = 2^k it is recursive halving-doubling (rhd's steps), on a prime n
the ring. Where it differs from both (n composite and not a power of two: ``composition.radix_applies``)
``compare`` runs it.
"""

from __future__ import annotations

import numpy as np

from collsynth.errors import CollsynthError
from collsynth.synth.composition import radix_factors, radix_steps
from collsynth.synth.ir import Schedule, ScheduleBuilder

COLLECTIVES = ("allreduce", "reducescatter", "allgather")


def build(n: int, collective: str = "allreduce") -> Schedule:
    """The mixed-radix schedule on n ranks, n chunks (module docstring)."""
    if collective not in COLLECTIVES:
        raise CollsynthError(f"radix builds {', '.join(COLLECTIVES)}, not {collective!r}")
    steps = radix_steps(n)
    half = len(steps) // 2  # the ReduceScatter's steps, then the AllGather's
    chosen = steps[:half] if collective == "reducescatter" else steps[half:] if collective == "allgather" else steps
    b = ScheduleBuilder(collective, n, n, name=f"radix_{collective}_n{n}",
                        meta={"algorithm": "radix", "factors": radix_factors(n)})
    ranks = np.arange(n, dtype=np.int64)
    for to, first, count, reduce in chosen:
        b.new_step()
        b.add_many(ranks, to, first, count, reduce)
    return b.build()

