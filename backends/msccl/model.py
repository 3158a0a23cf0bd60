"""Data model and runtime constants for MSCCL algorithm XML (shared by the reader, checker and emitter).

Every rule here comes from docs/msccl-xml.md (the MSCCL executor / RCCL parser and interpreter, and
the older microsoft/msccl runtime). Two levels:

- ``XAlgo`` / ``XGpu`` / ``XTb`` / ``XStep``: the file as written (one object per element).
- ``Program`` / ``PTb`` / ``Tx``: what the runtime's parser builds from it: ``nop`` steps folded into
  the next real step's dependency list, consecutive compatible ``re`` steps fused, and the step
  counter the interpreter publishes after each transmission recomputed exactly as the kernel counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from collsynth.errors import ScheduleFileError

DIALECTS = ("executor", "legacy")
PROTOCOLS = ("Simple", "LL", "LL128")
EXECUTOR_COLLS = ("allreduce", "allgather", "reducescatter", "alltoall", "alltoallv", "reduce", "broadcast",
                  "send", "recv", "gather", "scatter")
LEGACY_COLLS = ("allreduce", "allgather", "reduce", "broadcast", "alltoall", "reduce_scatter", "custom")
BUFFERS = ("i", "o", "s")

# limits (docs/msccl-xml.md 2.1 and 1.5)
MAX_STEPS = {"executor": 64, "legacy": 256}  # s < MAX_STEPS
MAX_TBS = {"executor": 64, "legacy": 216}  # thread blocks per GPU (RCCL: 64; co-residency)
MAX_CHANNELS = 32  # chan < 32
MAX_COUNT = 72  # 0 <= cnt < 72
MAX_DEPID = 127  # stored as int8
MAX_INT16 = 32767  # offsets and deps are int16
MAX_FUSED_RE = 16
MAX_TB_PER_CHANNEL = 32  # thread blocks per channel that send (or receive)
MAX_NODES_PER_RANK = 4096
MAX_CHILDREN = 1024
MAX_ATTRS = 16
MAX_TOKEN = 255


class XmlFormatError(ScheduleFileError):
    """An MSCCL XML file that the runtime would refuse to load (or that cannot be read at all)."""


@dataclass(frozen=True)
class StepType:
    """What a step type does (interpreter semantics, docs/msccl-xml.md 1.2)."""

    send: bool
    recv: bool
    reads_src: bool
    writes_dst: bool
    reduce: bool
    check_src: bool  # the parser bounds-checks srcoff
    check_dst: bool  # the parser bounds-checks dstoff


STEP_TYPES: dict[str, StepType] = {
    "s": StepType(True, False, True, False, False, True, False),
    "r": StepType(False, True, False, True, False, False, True),
    "rcs": StepType(True, True, False, True, False, False, True),
    "rrs": StepType(True, True, True, False, True, True, False),
    "rrc": StepType(False, True, True, True, True, False, False),
    "rrcs": StepType(True, True, True, True, True, True, True),
    "cpy": StepType(False, False, True, True, False, True, True),
    "re": StepType(False, False, True, True, True, True, True),
    "nop": StepType(False, False, False, False, False, False, False),
}


@dataclass
class XStep:
    s: int
    type: str
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    depid: int
    deps: int
    hasdep: int
    line: int = 0


@dataclass
class XTb:
    id: int
    send: int
    recv: int
    chan: int
    steps: list[XStep] = field(default_factory=list)
    line: int = 0


@dataclass
class XGpu:
    id: int
    i_chunks: int
    o_chunks: int
    s_chunks: int
    tbs: list[XTb] = field(default_factory=list)
    line: int = 0


@dataclass
class XAlgo:
    """One MSCCL algorithm file. ``outofplace``/``min_bytes``/``max_bytes`` are None when absent."""

    name: str | None
    proto: str
    nchannels: int
    nchunksperloop: int
    ngpus: int
    coll: str
    inplace: int
    outofplace: int | None
    min_bytes: int | None
    max_bytes: int | None
    dialect: str
    gpus: list[XGpu] = field(default_factory=list)
    extra: dict[str, str] = field(default_factory=dict)  # other <algo> attributes, in file order
    comments: list[str] = field(default_factory=list)  # comments before <algo> (collsynth writes its phases)

    @property
    def collective(self) -> str:
        """The collective in executor spelling (reduce_scatter -> reducescatter)."""
        return "reducescatter" if self.coll == "reduce_scatter" else self.coll

    def modes(self) -> tuple[str, ...]:
        """The call modes this file serves: 'inplace' and/or 'outofplace'."""
        if self.dialect == "legacy":
            return ("inplace",) if self.inplace else ("outofplace",)
        out = []
        if self.inplace:
            out.append("inplace")
        if self.outofplace:
            out.append("outofplace")
        return tuple(out)


def size_multiplier(coll: str, ngpus: int) -> int:
    """The runtime's sizeMultiplier: ngpus for allgather, reducescatter and alltoall (1.3)."""
    return ngpus if coll in ("allgather", "reducescatter", "reduce_scatter", "alltoall") else 1


@dataclass
class Tx:
    """One transmission as the interpreter runs it (nops folded, ``re`` chains fused)."""

    type: str
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    deps: list[tuple[int, int]]  # (thread block id on the same GPU, counter value to wait for)
    hasdep: bool
    counter: int  # the step value the kernel publishes after this transmission
    s_first: int  # XML step index of the first step folded into this one (its first nop, if any)
    s: int  # XML step index of the real step (the last one of a fused re chain)
    line: int
    extra_srcs: list[int] = field(default_factory=list)  # more srcoffs of a fused re chain
    dep_lines: list[int] = field(default_factory=list)

    @property
    def kind(self) -> StepType:
        return STEP_TYPES[self.type]


@dataclass
class PTb:
    gpu: int
    id: int
    send: int
    recv: int
    chan: int
    txs: list[Tx]
    nsteps: int  # XML steps, nops included
    line: int = 0


@dataclass
class Program:
    """Per-rank thread-block programs of one file, as the runtime builds them."""

    algo: XAlgo
    tbs: list[list[PTb]]  # tbs[gpu][tb id]

    @property
    def ngpus(self) -> int:
        return self.algo.ngpus

    def all_tbs(self) -> list[PTb]:
        return [tb for g in self.tbs for tb in g]


def where(gpu: int, tb: int | None = None, step: int | None = None, line: int | None = None) -> str:
    """'gpu 3 tb 2 step 5' (the element a message is about)."""
    out = f"gpu {gpu}"
    if tb is not None:
        out += f" tb {tb}"
    if step is not None:
        out += f" step {step}"
    if line:
        out += f" (line {line})"
    return out
