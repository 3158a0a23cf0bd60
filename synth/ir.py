"""The Schedule IR: the one data structure every stage shares.

A Schedule is a collective, a rank count, the number of chunks each rank's buffer is cut into, and
an ordered list of steps. A step is a set of transfers that may run at the same time; a transfer moves
a run of ``count`` chunks starting at ``chunk`` from rank ``src`` to rank ``dst`` and either overwrites
(copy) or accumulates (reduce) at the destination. Chunk indices are the same on every rank.

Step semantics (what the verifier proves and the backends implement): a step reads all its sources,
then applies its writes. A copy is received straight into its destination, so no other transfer of
the same step may read or write that location. A reduce is received into scratch and added when the
step's transfers are done, so its destination may be sent by another transfer of the same step (the
two-way exchange of StragglAR), but not written by one.

Phases label contiguous step ranges with the ranks they wait for (StragglAR: the ReduceScatter among
the punctual ranks, then the completion collective). Steps outside every phase wait for all ranks.

Storage is columnar (read-only numpy arrays sorted by step) so that schedules with millions of
transfers stay cheap; per-transfer objects, per-rank programs and the dependency DAG are derived views.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias, TypedDict

import numpy as np

from collsynth import budget
from collsynth.apitypes import Column, Ints
from collsynth.errors import CollsynthError, ScheduleFileError, quoted
from collsynth.fileio import json_loads, read_text, write_text_atomic

if TYPE_CHECKING:
    import networkx as nx

COLLECTIVES = ("allreduce", "reducescatter", "allgather")
FORMAT = "collsynth-schedule"
VERSION = 1
_COLUMNS = ("step", "src", "dst", "chunk", "count", "reduce")


class Transfer(NamedTuple):
    """One transfer: chunks [chunk, chunk+count) from src to dst, copied or reduced."""

    step: int
    src: int
    dst: int
    chunk: int
    count: int  # type: ignore[assignment]  # shadows tuple.count on purpose: the field's name is public API
    reduce: bool


@dataclass(frozen=True)
class Phase:
    """Steps [start, stop) that may begin once every rank in ``waits_for`` has arrived."""

    name: str
    start: int
    stop: int
    waits_for: tuple[int, ...]

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "start": self.start, "stop": self.stop, "waits_for": list(self.waits_for)}


def default_owner(nranks: int, nchunks: int) -> tuple[int, ...]:
    """Contiguous ownership for ReduceScatter/AllGather: chunk c belongs to rank c*n//C."""
    return tuple(c * nranks // nchunks for c in range(nchunks))


def _frozen(a: Any, dtype: Any) -> np.ndarray:
    arr = np.ascontiguousarray(np.asarray(a, dtype=dtype))
    if arr.ndim != 1:
        arr = arr.reshape(-1)
    arr.flags.writeable = False
    return arr


class ScheduleSummary(TypedDict):
    """What ``Schedule.summary()`` returns (`collsynth info --json`)."""

    name: str
    collective: str
    ranks: int
    chunks: int
    steps: int
    transfers: int
    ports: int
    steps_per_phase: dict[str, int]
    phases: list[dict[str, object]]
    bytes_sent_per_buffer_byte: list[float]
    meta: dict[str, object]


FieldValue: TypeAlias = str | int | Column | tuple[Phase, ...] | Mapping[str, object] | None
"""The value of one Schedule field (``Schedule.replace(**changes)``)."""


@dataclass(frozen=True, eq=False)
class Schedule:
    """A collective schedule; see the module docstring. Build with ScheduleBuilder or from_arrays."""

    collective: str
    nranks: int
    nchunks: int
    nsteps: int
    step: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    chunk: np.ndarray
    count: np.ndarray
    reduce: np.ndarray
    phases: tuple[Phase, ...] = ()
    owner: tuple[int, ...] | None = None
    ports: int = 1
    name: str = ""
    meta: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.collective not in COLLECTIVES:
            raise CollsynthError(f"unknown collective {self.collective!r}: use one of {', '.join(COLLECTIVES)}")
        if self.nranks < 2:
            raise CollsynthError(f"a schedule needs at least 2 ranks, got {self.nranks}")
        if self.nchunks < 1:
            raise CollsynthError(f"a schedule needs at least 1 chunk, got {self.nchunks}")
        if self.ports < 1:
            raise CollsynthError(f"ports must be at least 1, got {self.ports}")
        for name in _COLUMNS:
            dtype = np.bool_ if name == "reduce" else np.int64
            object.__setattr__(self, name, _frozen(getattr(self, name), dtype))
        sizes = {len(getattr(self, name)) for name in _COLUMNS}
        if len(sizes) != 1:
            raise CollsynthError("schedule columns have different lengths")
        if len(self.step):
            if np.any(np.diff(self.step) < 0):
                raise CollsynthError("schedule transfers must be sorted by step")
            if self.step[0] < 0 or self.step[-1] >= self.nsteps:
                raise CollsynthError(f"a transfer names a step outside 0..{self.nsteps - 1}")
        if self.collective != "allreduce":
            owner = self.owner if self.owner is not None else default_owner(self.nranks, self.nchunks)
            if len(owner) != self.nchunks:
                raise CollsynthError(f"owner map has {len(owner)} entries for {self.nchunks} chunks")
            bad = next((o for o in owner if not 0 <= int(o) < self.nranks), None)
            if bad is not None:
                raise CollsynthError(f"owner map names rank {bad}; ranks are 0..{self.nranks - 1}")
            object.__setattr__(self, "owner", tuple(int(o) for o in owner))
        else:  # an AllReduce has no owner map, but one given must still name ranks that exist
            bad = next((o for o in self.owner or () if not 0 <= int(o) < self.nranks), None)
            if bad is not None:
                raise CollsynthError(f"owner map names rank {bad}; ranks are 0..{self.nranks - 1}")
            object.__setattr__(self, "owner", None)
        for ph in self.phases:
            if not (0 <= ph.start <= ph.stop <= self.nsteps):
                raise CollsynthError(f"phase {ph.name!r} covers steps {ph.start}..{ph.stop} outside 0..{self.nsteps}")
        object.__setattr__(self, "meta", dict(self.meta))

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_arrays(cls, collective: str, nranks: int, nchunks: int, *, step: Column, src: Column, dst: Column,
                    chunk: Column, count: Column | None = None, reduce: Sequence[bool] | np.ndarray | None = None,
                    nsteps: int | None = None, phases: tuple[Phase, ...] = (), owner: tuple[int, ...] | None = None,
                    ports: int = 1, name: str = "", meta: Mapping[str, object] | None = None) -> Schedule:
        """Build from parallel arrays; sorts stably by step."""
        steps = np.asarray(step, dtype=np.int64)
        m = len(steps)
        counts = np.ones(m, np.int64) if count is None else np.asarray(count, np.int64)
        reduces = np.zeros(m, np.bool_) if reduce is None else np.asarray(reduce, np.bool_)
        order = np.argsort(steps, kind="stable")
        if nsteps is None:
            nsteps = int(steps.max()) + 1 if m else 0
        return cls(collective, nranks, nchunks, nsteps, steps[order], np.asarray(src)[order], np.asarray(dst)[order],
                   np.asarray(chunk)[order], counts[order], reduces[order], phases=phases, owner=owner, ports=ports,
                   name=name, meta=dict(meta or {}))

    def replace(self, **changes: FieldValue) -> Schedule:
        """A copy with some fields changed (passes never mutate)."""
        fields = {k: getattr(self, k) for k in ("collective", "nranks", "nchunks", "nsteps", *_COLUMNS,
                                                "phases", "owner", "ports", "name", "meta")}
        fields.update(changes)
        return Schedule(**fields)

    # ------------------------------------------------------------------ views
    @property
    def ntransfers(self) -> int:
        return len(self.step)

    def __len__(self) -> int:
        return self.ntransfers

    @cached_property
    def step_bounds(self) -> np.ndarray:
        """bounds[k]..bounds[k+1] are the indices of step k's transfers."""
        b = np.searchsorted(self.step, np.arange(self.nsteps + 1), side="left")
        b.flags.writeable = False
        return b

    def transfers(self, step: int | None = None) -> Iterator[Transfer]:
        """Transfers as named tuples, all or of one step."""
        lo, hi = (0, self.ntransfers) if step is None else (self.step_bounds[step], self.step_bounds[step + 1])
        cols = [getattr(self, k)[lo:hi].tolist() for k in _COLUMNS]
        for row in zip(*cols):
            yield Transfer(*row)

    def phase_of_step(self) -> np.ndarray:
        """Index into ``phases`` for every step, -1 where no phase covers it."""
        out = np.full(self.nsteps, -1, np.int64)
        for i, ph in enumerate(self.phases):
            out[ph.start:ph.stop] = i
        return out

    def phase_waits(self) -> list[tuple[int, ...]]:
        """The ranks each step waits for (all ranks outside every phase)."""
        everyone = tuple(range(self.nranks))
        idx = self.phase_of_step()
        return [self.phases[i].waits_for if i >= 0 else everyone for i in idx.tolist()]

    def rank_programs(self) -> dict[int, list[tuple[str, int, int, int, int, bool]]]:
        """Per-rank ordered programs: (op 'send'|'recv', step, peer, chunk, count, reduce)."""
        progs: dict[int, list[tuple[str, int, int, int, int, bool]]] = {r: [] for r in range(self.nranks)}
        for t in self.transfers():
            progs[t.src].append(("send", t.step, t.dst, t.chunk, t.count, t.reduce))
            progs[t.dst].append(("recv", t.step, t.src, t.chunk, t.count, t.reduce))
        return progs

    def dependency_dag(self) -> nx.DiGraph:
        """networkx DiGraph over transfer indices: RAW, WAW and WAR edges between steps."""
        import networkx as nx

        g = nx.DiGraph()
        g.add_nodes_from(range(self.ntransfers))
        last_write: dict[tuple[int, int], int] = {}
        readers: dict[tuple[int, int], list[int]] = {}
        for k in range(self.nsteps):
            lo, hi = int(self.step_bounds[k]), int(self.step_bounds[k + 1])
            edges = []
            for i in range(lo, hi):
                s, d, c, n = int(self.src[i]), int(self.dst[i]), int(self.chunk[i]), int(self.count[i])
                for cc in range(c, c + n):
                    w = last_write.get((s, cc))
                    if w is not None:
                        edges.append((w, i))
                    w = last_write.get((d, cc))
                    if w is not None:
                        edges.append((w, i))
                    for r in readers.get((d, cc), ()):
                        edges.append((r, i))
            g.add_edges_from(edges)
            for i in range(lo, hi):
                s, d, c, n = int(self.src[i]), int(self.dst[i]), int(self.chunk[i]), int(self.count[i])
                for cc in range(c, c + n):
                    readers.setdefault((s, cc), []).append(i)
                for cc in range(c, c + n):
                    last_write[(d, cc)] = i
                    readers[(d, cc)] = []
        return g

    def steps_per_phase(self) -> dict[str, int]:
        out: dict[str, int] = {}
        covered = 0
        for ph in self.phases:
            out[ph.name] = ph.stop - ph.start
            covered += ph.stop - ph.start
        if covered < self.nsteps:
            out["(all ranks)"] = self.nsteps - covered
        return out

    def summary(self) -> ScheduleSummary:
        """The facts `collsynth info` prints (JSON-ready)."""
        budget.check(48 * (self.nranks + self.nsteps + len(self.phases)), f"summarizing {self.nranks} ranks and "
                     f"{self.nsteps} steps")
        sent = self.bytes_sent_per_rank()
        return {"name": self.name, "collective": self.collective, "ranks": self.nranks, "chunks": self.nchunks,
                "steps": self.nsteps, "transfers": self.ntransfers, "ports": self.ports,
                "steps_per_phase": self.steps_per_phase(), "phases": [ph.to_json() for ph in self.phases],
                "bytes_sent_per_buffer_byte": [round(float(x), 12) for x in sent], "meta": self.meta}

    def bytes_sent_per_rank(self) -> np.ndarray:
        """Bytes each rank sends per byte of its buffer (CollsynthError naming the transfer when a rank is
        out of range: `collsynth info` on a schedule that `verify` would fail)."""
        for name in ("src", "dst"):
            col = getattr(self, name)
            bad = np.flatnonzero((col < 0) | (col >= self.nranks))
            if len(bad):
                i = int(bad[0])
                raise CollsynthError(f"transfer #{i} has {name} {int(col[i])}, not a rank (0..{self.nranks - 1}): "
                                     "`collsynth verify` reports every problem")
        sent = np.bincount(self.src, weights=self.count, minlength=self.nranks)[: self.nranks]
        return sent / self.nchunks

    def units(self, transfers: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(transfer index, chunk) of every chunk the given transfers (indices; default all) move, a run of
        ``count`` chunks as ``count`` units, in the order given."""
        idx = np.arange(self.ntransfers, dtype=np.int64) if transfers is None else np.asarray(transfers, np.int64)
        cnt = self.count[idx].astype(np.int64)
        rep = np.repeat(idx, cnt)
        return rep, self.chunk[rep] + np.arange(len(rep), dtype=np.int64) - np.repeat(np.cumsum(cnt) - cnt, cnt)

    def relabel(self, perm: Sequence[int]) -> Schedule:
        """Rename ranks: old rank r becomes perm[r]. Chunks keep their indices."""
        p = np.asarray(perm, dtype=np.int64)
        if sorted(p.tolist()) != list(range(self.nranks)):
            raise CollsynthError(f"relabel needs a permutation of 0..{self.nranks - 1}")
        phases = tuple(Phase(ph.name, ph.start, ph.stop, tuple(sorted(int(p[r]) for r in ph.waits_for)))
                       for ph in self.phases)
        owner = None if self.owner is None else tuple(int(p[o]) for o in self.owner)
        return self.replace(src=p[self.src], dst=p[self.dst], phases=phases, owner=owner)

    # ------------------------------------------------------------------ JSON
    def to_json_dict(self, columns: bool = True) -> dict[str, object]:
        d: dict[str, object] = {
            "format": FORMAT,
            "version": VERSION,
            "name": self.name,
            "collective": self.collective,
            "nranks": self.nranks,
            "nchunks": self.nchunks,
            "nsteps": self.nsteps,
            "ports": self.ports,
            "owner": None if self.owner is None else list(self.owner),
            "phases": [ph.to_json() for ph in self.phases],
            "meta": self.meta,
        }
        if columns:
            d["transfers"] = {k: getattr(self, k).astype(np.int64).tolist() for k in _COLUMNS}
        return d

    def to_json(self) -> str:
        """Deterministic JSON text (columns on one line each)."""
        d = self.to_json_dict(columns=False)
        head = json.dumps(d, indent=1, sort_keys=False)
        body = ",\n".join(f'  "{k}": [' + _csv_ints(getattr(self, k)) + "]" for k in _COLUMNS)
        return head[:-2] + ',\n "transfers": {\n' + body + "\n }\n}\n"

    def digest(self) -> str:
        """sha256 of the JSON form: equal schedules have equal digests."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()

    @classmethod
    def from_json_dict(cls, d: object, source: str = "schedule") -> Schedule:
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise ScheduleFileError(f"{source}: not a collsynth schedule (missing \"format\": \"{FORMAT}\")")
        if d.get("version") != VERSION:
            raise ScheduleFileError(f"{source}: schedule version {d.get('version')!r} is not supported; "
                                    f"this collsynth reads version {VERSION}: regenerate the file")
        try:
            cols = d["transfers"]
            if not isinstance(cols, dict):
                raise ValueError("field 'transfers' must be an object of equal-length columns "
                                 f"({', '.join(_COLUMNS)}), got {quoted(cols)}")
            lacking = [k for k in _COLUMNS if k not in cols]
            if lacking:
                raise ValueError(f"field 'transfers' lacks the column(s) {', '.join(lacking)} (a schedule has all "
                                 f"of {', '.join(_COLUMNS)})")
            arrays = {}
            for k in _COLUMNS:
                a = np.asarray(cols[k])
                if a.ndim != 1 or (len(a) and a.dtype.kind not in "iub"):
                    raise ValueError(f"column {k!r} must be a list of integers")
                if len(a) and a.dtype.kind != "b" and (int(a.min()) < -INT_FIELD_MAX or int(a.max()) > INT_FIELD_MAX):
                    bad = int(a.max()) if int(a.max()) > INT_FIELD_MAX else int(a.min())
                    raise ValueError(f"column {k!r} holds {bad}, outside -{INT_FIELD_MAX}..{INT_FIELD_MAX}")
                if k == "reduce" and len(a) and a.dtype.kind != "b" and (int(a.min()) < 0 or int(a.max()) > 1):
                    raise ValueError("column 'reduce' must hold true/false (or 1/0), got "
                                     f"{int(a.max()) if int(a.max()) > 1 else int(a.min())}")
                arrays[k] = a
            phases = _read_phases(d.get("phases", []))
            owner = d.get("owner")
            if owner is not None and (not isinstance(owner, list) or not all(_is_index(o) for o in owner)):
                raise ValueError(f"field 'owner' must be a list of rank numbers (integers), got {quoted(owner)}")
            if not isinstance(d.get("meta", {}), dict):
                raise ValueError(f"field 'meta' must be an object, got {quoted(d.get('meta'))}")
            if not isinstance(d.get("collective"), str):
                raise ValueError(f"field 'collective' must be a string such as \"allreduce\", "
                                 f"got {quoted(d.get('collective'))}")
            for key in ("nranks", "nchunks", "nsteps", "ports"):
                v = d.get(key, 1)
                if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= INT_FIELD_MAX:
                    raise ValueError(f"{key!r} must be an integer in 0..{INT_FIELD_MAX}, got {v!r}")
            return cls(str(d["collective"]), int(d["nranks"]), int(d["nchunks"]), int(d["nsteps"]),
                       **arrays, phases=phases,
                       owner=None if owner is None else tuple(int(o) for o in owner),
                       ports=int(d.get("ports", 1)), name=str(d.get("name", "")), meta=dict(d.get("meta", {})))
        except ScheduleFileError:
            raise
        except CollsynthError as e:
            raise ScheduleFileError(f"{source}: {e}") from None
        except KeyError as e:
            raise ScheduleFileError(f"{source}: malformed schedule: missing field {e} (the format is in "
                                    "docs/commands.md; regenerate the file with `collsynth synth`)") from None
        except (TypeError, ValueError, AttributeError, OverflowError) as e:  # OverflowError: int(1e400)
            text = str(e)
            if text.startswith(("invalid literal", "could not convert", "int() argument", "'", "unhashable")) or \
                    isinstance(e, (TypeError, AttributeError, OverflowError)):
                text = f"a field has the wrong type ({text}): counts and indices are integers, names are strings"
            raise ScheduleFileError(f"{source}: malformed schedule: {text}") from None

    @classmethod
    def from_json(cls, text: str, source: str = "schedule") -> Schedule:
        try:
            d = json_loads(text)
        except json.JSONDecodeError as e:
            raise ScheduleFileError(f"{source}: not valid JSON ({e.msg} at line {e.lineno})") from None
        return cls.from_json_dict(d, source)


def _is_index(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= INT_FIELD_MAX


def _read_phases(raw: object) -> tuple[Phase, ...]:
    """The "phases" list of a schedule file, each field's type checked; a wrong one names the phase, the
    field and what it expects (docs/commands.md, schedule format)."""
    if not isinstance(raw, list):
        raise ValueError(f"field 'phases' must be a list of phase objects, got {quoted(raw)}")
    out = []
    for i, p in enumerate(raw):
        if not isinstance(p, dict):
            raise ValueError(f"phases[{i}] must be an object with name, start, stop and waits_for, got {quoted(p)}")
        for key in ("name", "start", "stop", "waits_for"):
            if key not in p:
                raise ValueError(f"phases[{i}] has no field {key!r} (a phase has name, start, stop and waits_for)")
        if not isinstance(p["name"], str):
            raise ValueError(f"phases[{i}] field 'name' must be a string, got {quoted(p['name'])}")
        for key in ("start", "stop"):
            if not _is_index(p[key]):
                raise ValueError(f"phases[{i}] field {key!r} must be a step index, an integer in "
                                 f"0..{INT_FIELD_MAX}, got {quoted(p[key])}")
        waits = p["waits_for"]
        if not isinstance(waits, list) or not all(_is_index(r) for r in waits):
            raise ValueError(f"phases[{i}] field 'waits_for' must be a list of rank numbers (integers), "
                             f"got {quoted(waits)}")
        out.append(Phase(p["name"], p["start"], p["stop"], tuple(waits)))
    return tuple(out)


INT_FIELD_MAX = 2**53  # every count and index in a schedule file: exact as a float, and a sum of two never wraps int64


def _digit_grid(mag: np.ndarray, neg: np.ndarray) -> np.ndarray:
    """One row of ASCII per value: right-aligned sign and digits, then a comma; 0 marks padding."""
    ndig = np.ones(len(mag), np.int64)
    p = 10
    while len(mag) and p <= int(mag.max()):
        ndig += mag >= p
        p *= 10
    width = int(ndig.max(initial=1)) + 2
    grid = np.zeros((len(mag), width), np.uint8)
    for k in range(width - 2):
        grid[:, width - 2 - k] = np.where(k < ndig, 48 + (mag // (10 ** k)) % 10, 0)
    rows = np.flatnonzero(neg)
    grid[rows, width - 2 - ndig[rows]] = ord("-")
    grid[:, width - 1] = ord(",")
    return grid


def _csv_ints(values: np.ndarray) -> str:
    """Comma-separated decimal integers, vectorised (json.dumps is the bottleneck for big schedules)."""
    a = np.asarray(values, dtype=np.int64)
    if len(a) == 0:
        return ""
    lo, hi = int(a.min()), int(a.max())
    if lo >= 0 and hi < 1 << 20:  # small non-negative values: format each distinct value once
        table = np.arange(hi + 1, dtype=np.int64)
        grid = _digit_grid(table, np.zeros(hi + 1, np.bool_))[a]
    else:
        grid = _digit_grid(np.abs(a), a < 0)
    flat = grid.ravel()
    return flat[flat != 0][:-1].tobytes().decode("ascii")


def derived_phases(nranks: int, step: Column, src: Column, dst: Column, nsteps: int) -> tuple[Phase, ...]:
    """Phases of a schedule read back from a runtime's program: each step waits for the ranks that took part
    in it or in an earlier step (what a data-driven runtime does: StragglAR's punctual phase comes out as in
    its Schedule). Steps where everybody has taken part get no phase."""
    step_a = np.asarray(step, np.int64)
    first = np.full(nranks, np.iinfo(np.int64).max, np.int64)  # the first step each rank takes part in
    np.minimum.at(first, np.asarray(src, np.int64), step_a)
    np.minimum.at(first, np.asarray(dst, np.int64), step_a)
    bounds: list[tuple[int, tuple[int, ...]]] = []
    for k in np.unique(first[first < nsteps]).tolist():
        bounds.append((int(k), tuple(np.flatnonzero(first <= k).tolist())))
    if nsteps and (not bounds or bounds[0][0] > 0):  # steps before anyone takes part wait for nobody
        bounds.insert(0, (0, ()))
    phases = []
    for i, (start, ranks) in enumerate(bounds):
        stop = bounds[i + 1][0] if i + 1 < len(bounds) else nsteps
        if len(ranks) < nranks:
            phases.append(Phase(f"ranks-{len(ranks)}", start, stop, ranks))
    return tuple(phases)


def load_schedule(path: str) -> Schedule:
    """Read a schedule JSON file; any problem raises ScheduleFileError."""

    return Schedule.from_json(read_text(path, error=ScheduleFileError), source=path)


def as_schedule(obj: object, what: str) -> Schedule:
    """``obj`` if it is a Schedule, else the one-line refusal of a library call ``what`` ("verify") given
    something else (a path, None)."""
    if not isinstance(obj, Schedule):
        raise CollsynthError(f"{what} takes a Schedule, got {type(obj).__name__}: build one with build_schedule "
                             f"or read a file with load_schedule")
    return obj


def save_schedule(schedule: Schedule, path: str) -> None:
    """Write atomically: a failure never leaves a half-written file."""

    write_text_atomic(path, as_schedule(schedule, "save_schedule").to_json())


class ScheduleBuilder:
    """Incremental construction for constructive algorithms (scalar or vectorised adds)."""

    def __init__(self, collective: str, nranks: int, nchunks: int, *, name: str = "", ports: int = 1,
                 owner: Sequence[int] | None = None, meta: Mapping[str, object] | None = None) -> None:
        self.collective, self.nranks, self.nchunks = collective, nranks, nchunks
        self.name, self.ports, self.owner, self.meta = name, ports, owner, dict(meta or {})
        self._cols: dict[str, list[np.ndarray]] = {k: [] for k in _COLUMNS}
        self._scalar: list[tuple[int, int, int, int, int, bool]] = []
        self._nsteps = 0
        self._cur = -1
        self._phases: list[Phase] = []
        self._open_phase: tuple[str, int, tuple[int, ...]] | None = None

    def new_step(self) -> int:
        """Open the next step; later adds go into it."""
        self._cur = self._nsteps
        self._nsteps += 1
        return self._cur

    def add(self, src: int, dst: int, chunk: int, count: int = 1, reduce: bool = False) -> None:
        if self._cur < 0:
            self.new_step()
        self._scalar.append((self._cur, src, dst, chunk, count, reduce))

    def add_many(self, src: Column, dst: Ints, chunk: Ints, count: Ints = 1,
                 reduce: bool | Sequence[bool] | np.ndarray = False) -> None:
        """Add arrays of transfers to the current step (``dst``, ``chunk``, ``count`` and ``reduce`` may be
        one value for all)."""
        if self._cur < 0:
            self.new_step()
        srcs = np.asarray(src, np.int64)
        m = len(srcs)
        self._cols["step"].append(np.full(m, self._cur, np.int64))
        self._cols["src"].append(srcs)
        self._cols["dst"].append(np.broadcast_to(np.asarray(dst, np.int64), (m,)))
        self._cols["chunk"].append(np.broadcast_to(np.asarray(chunk, np.int64), (m,)))
        self._cols["count"].append(np.broadcast_to(np.asarray(count, np.int64), (m,)))
        self._cols["reduce"].append(np.broadcast_to(np.asarray(reduce, np.bool_), (m,)))

    def begin_phase(self, name: str, waits_for: Sequence[int]) -> None:
        """Steps opened from now on belong to this phase until end_phase."""
        if self._open_phase is not None:
            self.end_phase()
        self._open_phase = (name, self._nsteps, tuple(sorted(int(r) for r in waits_for)))

    def end_phase(self) -> None:
        if self._open_phase is not None:
            name, start, waits = self._open_phase
            self._phases.append(Phase(name, start, self._nsteps, waits))
            self._open_phase = None

    def build(self) -> Schedule:
        """Finish: empty steps are dropped and phase ranges renumbered."""
        self.end_phase()
        cols = {k: list(v) for k, v in self._cols.items()}
        if self._scalar:
            sc = np.array([t[:5] for t in self._scalar], np.int64).reshape(-1, 5)
            for i, k in enumerate(_COLUMNS[:5]):
                cols[k].append(sc[:, i])
            cols["reduce"].append(np.array([t[5] for t in self._scalar], np.bool_))
        arr = {k: (np.concatenate(v) if v else np.zeros(0, np.bool_ if k == "reduce" else np.int64))
               for k, v in cols.items()}
        order = np.argsort(arr["step"], kind="stable")
        arr = {k: v[order] for k, v in arr.items()}
        used = np.zeros(self._nsteps + 1, np.bool_)
        used[arr["step"]] = True
        newidx: np.ndarray = np.cumsum(used) - used  # index of each old step among used steps
        arr["step"] = newidx[arr["step"]]
        nsteps = int(used.sum())
        phases = tuple(Phase(p.name, int(newidx[p.start]), int(newidx[p.stop]), p.waits_for) for p in self._phases)
        return Schedule(self.collective, self.nranks, self.nchunks, nsteps, **arr, phases=phases,
                        owner=tuple(self.owner) if self.owner is not None else None, ports=self.ports,
                        name=self.name, meta=self.meta)
