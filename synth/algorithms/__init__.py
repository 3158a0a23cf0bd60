"""Constructive algorithms: one module each (StragglAR is a package), each a pure function
``build(n, collective="allreduce", **params) -> Schedule``, listed in ``CONSTRUCTIVE`` in a fixed order.

The full table the CLI and the Python API use (these plus the solver) is ``synth.registry``; the
solver itself takes its warm starts from ``CONSTRUCTIVE``. Adding an algorithm: write the module
(docstring with the source and the cost), add one line here, add its tests; see docs/architecture.md.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

from collsynth.synth.algorithms import direct, hierarchical, multiring, radix, rhd, ring, tree, twoshot
from collsynth.synth.algorithms.stragglar import build as stragglar
from collsynth.synth.algorithms.stragglar import choose as clusterstraggler
from collsynth.synth.algorithms.stragglar import multi as multistraggler
from collsynth.synth.ir import Schedule


@dataclass(frozen=True)
class Algorithm:
    """One row of the algorithm table."""

    name: str
    description: str
    build: Callable[..., Schedule]
    collectives: tuple[str, ...] = ("allreduce",)
    own_budget: bool = False  # build checks the memory budget itself (registry skips the generic n^2 estimate)

    def params(self) -> tuple[str, ...]:
        """The keyword parameters ``build`` accepts besides n and collective."""
        params = list(inspect.signature(self.build).parameters.values())[1:]
        kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        return tuple(p.name for p in params if p.name != "collective" and p.kind in kinds)


ALL_COLLECTIVES = ("allreduce", "reducescatter", "allgather")

CONSTRUCTIVE: tuple[Algorithm, ...] = (
    Algorithm("ring", "ring ReduceScatter + AllGather, 2(n-1) steps, bandwidth-optimal; along the "
              "topology's best ring", ring.build,
              ALL_COLLECTIVES),
    Algorithm("rhd", "recursive halving-doubling (Rabenseifner), 2 log2 n steps; MPICH fold for other n", rhd.build),
    Algorithm("radix", "mixed-radix halving-doubling over n's prime factors, a ring per stage: 2 sum(f-1) steps, "
              "the ring's bytes (72 GPUs: 14 steps, not 142); rhd on 2^k, the ring on a prime", radix.build,
              ALL_COLLECTIVES),
    Algorithm("direct", "one-shot: every rank sends its whole buffer to all others in one step", direct.build,
              ALL_COLLECTIVES),
    Algorithm("twoshot", "direct ReduceScatter then direct AllGather, 2 steps", twoshot.build),
    Algorithm("stragglar", "straggler-aware two-phase AllReduce: ReduceScatter among punctual ranks, then "
              "n-2+log2 n completion rounds once the straggler arrives (K(n-1)-1+log2 n rounds of smaller "
              "chunks with --pipeline K)", stragglar.build),
    Algorithm("multiring", "C rings at once, each with its share of the buffer: one per rail across nodes, "
              "link-disjoint NVLink cycles inside a node", multiring.build),
    Algorithm("hierarchical", "multi-node: ReduceScatter in each node, AllReduce per rail across nodes (ring or "
              "halving-doubling), AllGather in each node; K pipelined slices overlap NVLink and network",
              hierarchical.build, own_budget=True),
    Algorithm("tree", "NCCL's double binary tree: two trees with half the buffer each, pipelined reduce and "
              "broadcast", tree.build),
    Algorithm("multistraggler", "several late ranks, any arrival times: the punctual ranks keep a reduced state, "
              "each late rank streams its buffer in as it arrives, StragglAR's completion with the last one",
              multistraggler.build),
    Algorithm("clusterstraggler", "a late GPU or a late node on a cluster: the others AllReduce first, then the "
              "late buffer streams out over NVLink and every NIC along the rails, pipelined; in one NVLink domain the "
              "last GPU's buffer by a pipelined broadcast, or StragglAR's schedule", clusterstraggler.build),
)
