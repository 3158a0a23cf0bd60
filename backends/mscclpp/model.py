"""The MSCCL++ execution plan (JSON) as data, read with the executor's loader rules.

``parse_plan(obj, source)`` turns the decoded JSON into a ``Plan``: every key the executor reads is
required with the JSON kind it expects, and every value it would refuse, or silently misread, is a
``PlanFormatError`` (a CollsynthError: the CLI exits 2) naming the element: ``gpu G thread block T op
K (NAME)``. Cross-references (channel and buffer ids, chunk bounds, table sizes, the 64-op limit) are
checked in ``load.py``. The format and the executor's semantics are described in docs/mscclpp-plan.md
(MSCCL++ 0.9.0, commit 1f5f065).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from collsynth.errors import CollsynthError

FORMAT_VERSION = "0.9.0"  # the MSCCL++ release whose executor these rules describe
PROTOCOLS = ("Simple", "LL")  # what a plan may say; the executor reads any other string as Simple
MAX_OPS_PER_TB = 64  # MAX_OPERATION: pipeline bodies count
MAX_CHANNELS_PER_TB = 16  # MAX_CHANNEL: per channel type, and per remote-buffer access type
MAX_CHANNELS_PER_OP = 8  # MAX_CHANNEL_PER_OPERATION
MAX_BUFFERS_PER_OP = 10  # MAX_LOCAL_BUFFER_PER_OPERATION (2) + MAX_CHANNEL_PER_OPERATION (8)
MAX_SEMAPHORES_PER_OP = 16  # MAX_DEVICE_SEMAPHORES
MAX_BARRIERS = 16  # MAX_DEVICE_SYNCERS
MAX_THREADS = 1024  # __launch_bounds__(1024, 1)
MAX_OFFSET = 1 << 32  # offsets and sizes are uint32 on the device
MAX_ITERATIONS = 1 << 16  # the pipeline's iteration counter is a uint16
BUFFERS = ("i", "o", "s")
CHANNEL_TYPES = ("memory", "port", "switch", "none")
COLLECTIVES = ("allreduce", "allgather", "reducescatter")  # the collectives whose result collsynth checks

OPS = ("nop", "barrier", "put", "pws", "pwsf", "get", "copy", "signal", "wait", "flush", "re", "res", "rre", "rres",
       "ppkt", "rppkt", "respkt", "cpkt", "upkt", "repkt", "recpkt", "recspkt", "glres", "gstore", "gstorepkt",
       "rlxsignal", "rlxwait", "pipeline", "sem_acquire", "sem_release")
SIGNAL_OPS = ("signal", "rlxsignal")
WAIT_OPS = ("wait", "rlxwait")
PACKET_OPS = ("ppkt", "rppkt", "respkt", "cpkt", "upkt", "repkt", "recpkt", "recspkt", "gstorepkt")


class PlanFormatError(CollsynthError):
    """A plan the executor would refuse, or load into something other than what it says."""


@dataclass(frozen=True, slots=True)
class Ref:
    """A buffer reference of an op: ``kind`` local (``buf`` i/o/s), remote (``id`` indexes the thread
    block's remote-buffer table of the op's channel type) or switch (``id`` indexes its switch table)."""

    kind: str
    buf: str
    id: int
    index: int
    size: int


@dataclass(slots=True)
class Op:
    """One op as the executor stores it; ``pos`` is its slot in the thread block (a pipeline's body
    follows the pipeline op), ``where`` names it in messages."""

    name: str
    where: str
    pos: int
    channel_type: str = "none"
    channel_ids: tuple[int, ...] = ()
    src: tuple[Ref, ...] = ()
    dst: tuple[Ref, ...] = ()
    tbg: tuple[int, int] | None = None
    barrier_id: int | None = None
    num_threadblocks: int | None = None
    semaphore_ids: tuple[int, ...] = ()
    unit_size: int = 0
    num_chunks: int = 0
    body: tuple[Op, ...] = ()
    reduce_op: str | None = None
    keys: frozenset[str] = frozenset()


@dataclass(slots=True)
class ThreadBlock:
    id: int
    ops: list[Op]
    channels: dict[str, list[int]]  # channel type -> global channel indexes (the TB-local table)
    remote: dict[str, list[int]]  # access channel type -> remote buffer ids (the TB-local table)
    nops: int = 0  # slots the executor fills: ops plus pipeline bodies


@dataclass(slots=True)
class RemoteBuffer:
    rank: int
    buf: str
    access: tuple[str, ...]


@dataclass(slots=True)
class Switch:
    buf: str
    ranks: tuple[int, ...]


@dataclass(slots=True)
class Gpu:
    id: int
    input_chunks: int
    output_chunks: int
    scratch_chunks: int
    peers: dict[str, list[int]]  # "memory"/"port" -> peer of each global channel index
    switches: list[Switch]
    remote_buffers: list[RemoteBuffer]
    semaphores: list[int]  # initial values
    tbs: list[ThreadBlock]


@dataclass(slots=True)
class Plan:
    name: str
    collective: str
    protocol: str
    inplace: bool
    gpus: list[Gpu]
    reuse_resources: bool = False
    double_scratch: bool = False
    alignment: int = 16
    min_size: int = 0
    max_size: int = (1 << 64) - 1
    threads: int = MAX_THREADS
    meta: dict[str, Any] = field(default_factory=dict)
    source: str = "<plan>"
    pairs: dict[Any, Any] = field(default_factory=dict)  # the channel pairing, once load.validate has run

    @property
    def nranks(self) -> int:
        return len(self.gpus)

    @property
    def packets(self) -> bool:
        """protocol "LL" switches on packet mode (any other string is Simple)."""
        return self.protocol == "LL"


def where(source: str, gpu: int | None = None, tb: int | None = None, op: Op | None = None) -> str:
    """``SOURCE: gpu G thread block T op K (NAME)`` (the parts that are known)."""
    parts = []
    if gpu is not None:
        parts.append(f"gpu {gpu}")
    if tb is not None:
        parts.append(f"thread block {tb}")
    if op is not None:
        parts.append(op.where)
    return f"{source}: " + " ".join(parts) if parts else source


class _Reader:
    """Typed access to the decoded JSON with messages that name the element."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, at: str, what: str) -> PlanFormatError:
        return PlanFormatError(f"{self.source}: {at}{': ' if at else ''}{what}")

    def obj(self, value: Any, at: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(at, f"must be a JSON object, not {_kind(value)}")
        return value

    def get(self, d: dict[str, Any], key: str, kind: str, at: str, default: Any = ...) -> Any:
        if key not in d:
            if default is ...:
                raise self.fail(at, f"missing key {key!r} (the executor reads it)")
            return default
        return self.check(d[key], kind, f"{at} {key!r}" if at else repr(key))

    def check(self, v: Any, kind: str, at: str) -> Any:
        ok = {"str": isinstance(v, str), "bool": isinstance(v, bool), "list": isinstance(v, list),
              "obj": isinstance(v, dict),
              "int": isinstance(v, int) and not isinstance(v, bool)}[kind]
        if not ok:
            if kind == "int" and isinstance(v, float) and v.is_integer():  # not inf or nan (1e400 reads as inf)
                return int(v)
            want = {"str": "a string", "bool": "true or false", "list": "a list", "obj": "an object",
                    "int": "an integer"}[kind]
            extra = " (the executor would truncate it)" if kind == "int" and isinstance(v, float) else ""
            raise self.fail(at, f"must be {want}, not {_kind(v)}{extra}")
        return v

    def nat(self, d: dict[str, Any], key: str, at: str, default: Any = ..., lo: int = 0) -> int:
        v = self.get(d, key, "int", at, default)
        if v is not None and v < lo:
            raise self.fail(at, f"{key!r} must be >= {lo}, got {v}")
        return int(v) if v is not None else v  # type: ignore[return-value]

    def each(self, d: dict[str, Any], key: str, at: str, label: str, default: Any = ...) -> list[tuple[str, dict]]:
        """(where, object) for every entry of the list ``d[key]``."""
        return [(f"{at} {label}[{i}]", self.obj(x, f"{at} {label}[{i}]"))
                for i, x in enumerate(self.get(d, key, "list", at, default))]

    def ints(self, d: dict[str, Any], key: str, at: str, default: Any = ...) -> list[int]:
        v = self.get(d, key, "list", at, default)
        return [self._nat(x, f"{at} {key}[{i}]") for i, x in enumerate(v)]

    def _nat(self, x: Any, at: str) -> int:
        v = self.check(x, "int", at)
        if v < 0:
            raise self.fail(at, f"must be >= 0, got {v}")
        return int(v)


def _choice(r: _Reader, d: dict[str, Any], key: str, choices: tuple[str, ...], at: str) -> str:
    """A string key that must be one of ``choices`` (the loader throws on anything else)."""
    v = r.get(d, key, "str", at)
    if v not in choices:
        raise r.fail(at, f"{key} {v!r} must be one of {', '.join(choices)} (the executor refuses it)")
    return str(v)


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return f"the number {v!r}"
    if isinstance(v, str):
        return f"the string {v!r}"
    if isinstance(v, list):
        return "a list"
    return "an object"


def parse_plan(obj: Any, source: str = "<plan>") -> Plan:
    """A Plan from decoded JSON; PlanFormatError naming the element when a key is missing, mistyped or
    holds a value the loader refuses or misreads."""
    r = _Reader(source)
    top = r.obj(obj, "the plan")
    plan = Plan(name=r.get(top, "name", "str", ""), collective=r.get(top, "collective", "str", ""),
                protocol=r.get(top, "protocol", "str", ""), inplace=r.get(top, "inplace", "bool", ""),
                gpus=[], source=source)
    plan.reuse_resources = r.get(top, "reuse_resources", "bool", "", False)
    plan.double_scratch = r.get(top, "use_double_scratch_buffer", "bool", "", False)
    plan.alignment = r.nat(top, "buffer_alignment", "", 16, lo=1)
    plan.min_size = r.nat(top, "min_message_size", "", 0)
    plan.max_size = r.nat(top, "max_message_size", "", (1 << 64) - 1)
    plan.threads = r.nat(top, "num_threads_per_block", "", MAX_THREADS, lo=1)
    if plan.threads > MAX_THREADS:
        raise r.fail("'num_threads_per_block'", f"{plan.threads} exceeds {MAX_THREADS} (the kernel's launch bound: "
                                                "the launch fails)")
    if plan.max_size >= 1 << 64:
        raise r.fail("'max_message_size'", "does not fit in 64 bits")
    meta = top.get("collsynth", {})
    plan.meta = meta if isinstance(meta, dict) else {}
    gpus = r.get(top, "gpus", "list", "")
    if not gpus:
        raise r.fail("'gpus'", "is empty: a plan describes every rank")
    for g, gobj in enumerate(gpus):
        plan.gpus.append(_gpu(r, r.obj(gobj, f"gpus[{g}]"), g))
    return plan


def _gpu(r: _Reader, d: dict[str, Any], g: int) -> Gpu:
    at = f"gpu {g}"
    gid = r.get(d, "id", "int", at)
    if gid != g:
        raise r.fail(at, f"has \"id\": {gid}; gpus[{g}] must have \"id\": {g} (the executor refuses: GPU rank "
                         f"does not match)")
    gpu = Gpu(g, r.nat(d, "input_chunks", at), r.nat(d, "output_chunks", at), r.nat(d, "scratch_chunks", at),
              {"memory": [], "port": []}, [], [], [], [])
    for key in ("input_chunks", "output_chunks"):
        if getattr(gpu, key) == 0:
            raise r.fail(at, f"{key!r} is 0: the executor divides by it (give the number of chunks the buffer is "
                             f"cut into)")
    for cat, ch in r.each(d, "channels", at, "channels"):
        ctype = _choice(r, ch, "channel_type", CHANNEL_TYPES, cat)
        if ctype == "switch":
            buf = _choice(r, ch, "buffer_type", BUFFERS, cat)
            for gat, gd in r.each(ch, "rank_groups", cat, "rank_groups"):
                r.nat(gd, "size", gat)
                gpu.switches.append(Switch(buf, tuple(r.ints(gd, "ranks", gat))))
        elif ctype in ("memory", "port"):
            gpu.peers[ctype].extend(r.ints(ch, "connected_to", cat))
    for bat, bd in r.each(d, "remote_buffers", at, "remote_buffers"):
        buf = _choice(r, bd, "type", BUFFERS, bat)
        acc = [r.check(a, "str", f"{bat} access_channel_types[{k}]")
               for k, a in enumerate(r.get(bd, "access_channel_types", "list", bat))]
        for a in acc:
            if a not in ("memory", "port"):
                raise r.fail(bat, f"access channel type {a!r} must be memory or port")
        gpu.remote_buffers.append(RemoteBuffer(r.nat(bd, "rank", bat), buf, tuple(acc)))
    for sat, sd in r.each(d, "semaphores", at, "semaphores", []):
        gpu.semaphores.append(r.get(sd, "init_value", "int", sat))
    for t, tobj in enumerate(r.get(d, "threadblocks", "list", at)):
        gpu.tbs.append(_tb(r, r.obj(tobj, f"{at} threadblocks[{t}]"), g, t))
    return gpu


def _tb(r: _Reader, d: dict[str, Any], g: int, t: int) -> ThreadBlock:
    at = f"gpu {g} threadblocks[{t}]"
    tid = r.get(d, "id", "int", at)
    if tid != t:
        raise r.fail(at, f"has \"id\": {tid}; the executor takes ops in list order but tables by id, so "
                         f"threadblocks[{t}] must have \"id\": {t}")
    at = f"gpu {g} thread block {t}"
    chans: dict[str, list[int]] = {}
    for cat, ch in r.each(d, "channels", at, "channels"):
        ctype = _choice(r, ch, "channel_type", ("memory", "port", "switch"), cat)
        chans.setdefault(ctype, []).extend(r.ints(ch, "channel_ids", cat))
    remote: dict[str, list[int]] = {}
    for rat, rd in r.each(d, "remote_buffer_refs", at, "remote_buffer_refs", []):
        ctype = _choice(r, rd, "access_channel_type", ("memory", "port"), rat)
        remote.setdefault(ctype, []).extend(r.ints(rd, "remote_buffer_ids", rat))
    tb = ThreadBlock(t, [], chans, remote)
    pos = 0
    for k, oobj in enumerate(r.get(d, "ops", "list", at)):
        op = _op(r, r.obj(oobj, f"{at} op {k}"), f"{at}", k, pos, nested=False)
        tb.ops.append(op)
        pos += 1 + len(op.body)
    tb.nops = pos
    return tb


_GROUPS = ({"channel_ids", "src_buff", "dst_buff"}, {"iter_context"}, {"barrier_id", "num_threadblocks"},
           {"semaphore_ids"})


_SIMPLE_KEYS = frozenset(("name", "channel_type", "channel_ids", "src_buff", "dst_buff", "reduce_op"))
_REF_KEYS = {"type", "index", "size"}


def _nat_list(v: Any) -> bool:
    return type(v) is list and all(type(x) is int and x >= 0 for x in v)


def _fast_ref(x: Any) -> Ref | None:
    """A well-formed local or remote reference, or None (the careful path then names the problem)."""
    if type(x) is not dict or len(x) != 3:
        return None
    i, n = x.get("index"), x.get("size")
    if type(i) is not int or type(n) is not int or i < 0 or n < 0:
        return None
    b = x.get("type")
    if b is not None:
        return Ref("local", b, -1, i, n) if b in BUFFERS else None
    k = x.get("buffer_id")
    if type(k) is int and k >= 0:
        return Ref("remote", "", k, i, n)
    return None


def _fast_op(d: dict[str, Any], k: int, body_of: str, pos: int) -> Op | None:
    """The common ops (no pipeline, barrier, semaphores, tbg) without per-key bookkeeping; None when the
    op needs the careful path."""
    if not d.keys() <= _SIMPLE_KEYS:
        return None
    name = d.get("name")
    if name not in OPS or name == "pipeline" or name == "barrier":
        return None
    ct = d.get("channel_type", "none")
    if ct not in CHANNEL_TYPES:
        return None
    ids = d.get("channel_ids", ())
    if type(ids) not in (list, tuple) or (ids and not _nat_list(ids)):  # 0, "": the careful path says
        return None
    ro = d.get("reduce_op")
    if ro is not None and (type(ro) is not str or ro.lower() != "sum"):
        return None
    srcs, dsts = d.get("src_buff", ()), d.get("dst_buff", ())
    if type(srcs) not in (list, tuple) or type(dsts) not in (list, tuple):  # 0, 0.0, "": the careful path says
        return None
    src = tuple(_fast_ref(x) for x in srcs)
    dst = tuple(_fast_ref(x) for x in dsts)
    if None in src or None in dst:
        return None
    label = f"op {k}" if not body_of else f"{body_of} body op {k}"
    return Op(name, f"{label} ({name})", pos, ct, tuple(ids), src, dst,  # type: ignore[arg-type]
              reduce_op=ro, keys=frozenset(d))


def _op(r: _Reader, d: dict[str, Any], at: str, k: int, pos: int, *, nested: bool, body_of: str = "") -> Op:
    fast = _fast_op(d, k, body_of, pos)
    if fast is not None:
        return fast
    name = r.get(d, "name", "str", f"{at} op {k}")
    label = f"op {k}" if not body_of else f"{body_of} body op {k}"
    oat = f"{at} {label} ({name})"
    if name not in OPS:
        hint = " (the DSL's unfused group load-reduce has no executor opcode: fuse it into glres)" \
            if name == "glre" else f": use one of {', '.join(OPS)}"
        raise r.fail(oat, f"unknown op {name!r}; the executor refuses it (Invalid operation type){hint}")
    op = Op(name, f"{label} ({name})", pos, keys=frozenset(d))
    used = [i for i, grp in enumerate(_GROUPS) if grp & set(d)]
    if len(used) > 1:
        keys = sorted(set(d) & set().union(*(_GROUPS[i] for i in used)))
        raise r.fail(oat, f"mixes {', '.join(keys)}: these share storage in the device op, so one overwrites "
                          f"the other")
    ctype = r.get(d, "channel_type", "str", oat, "none")
    if ctype not in CHANNEL_TYPES:
        raise r.fail(oat, f"unknown channel_type {ctype!r}: use one of {', '.join(CHANNEL_TYPES)}")
    op.channel_type = ctype
    op.channel_ids = tuple(r.ints(d, "channel_ids", oat, []))
    if "reduce_op" in d:
        ro = r.get(d, "reduce_op", "str", oat)
        if ro.lower() != "sum":
            raise r.fail(oat, f"reduce_op {ro!r}: the executor ignores reduce_op and always sums; emit a sum "
                              f"(or use another runtime)")
        op.reduce_op = ro
    if "tbg_info" in d:
        tg = r.obj(d["tbg_info"], f"{oat} tbg_info")
        tid, tsize = r.nat(tg, "tb_id", f"{oat} tbg_info"), r.nat(tg, "tbg_size", f"{oat} tbg_info", lo=1)
        if tid >= tsize:
            raise r.fail(oat, f"tbg_info tb_id {tid} must be below tbg_size {tsize}")
        op.tbg = (tid, tsize)
    op.src = tuple(_ref(r, x, f"{oat} src_buff[{i}]") for i, x in enumerate(r.get(d, "src_buff", "list", oat, [])))
    op.dst = tuple(_ref(r, x, f"{oat} dst_buff[{i}]") for i, x in enumerate(r.get(d, "dst_buff", "list", oat, [])))
    if "barrier_id" in d or name == "barrier":
        op.barrier_id = r.nat(d, "barrier_id", oat)
        op.num_threadblocks = r.nat(d, "num_threadblocks", oat, lo=1)
    op.semaphore_ids = tuple(r.ints(d, "semaphore_ids", oat, []))
    if name == "pipeline" or "iter_context" in d:
        if nested:
            raise r.fail(oat, "a pipeline inside a pipeline: the executor writes through a null pointer (nested "
                              "pipelines crash)")
        if name != "pipeline":
            raise r.fail(oat, "has iter_context but is not a pipeline op")
        ic = r.obj(r.get(d, "iter_context", "obj", oat), f"{oat} iter_context")
        op.unit_size = r.nat(ic, "unit_size", f"{oat} iter_context", lo=1)
        op.num_chunks = r.nat(ic, "num_chunks", f"{oat} iter_context", lo=1)
        body = r.get(d, "ops", "list", oat)
        if not body:
            raise r.fail(oat, "has no body ops")
        op.body = tuple(_op(r, r.obj(b, f"{oat} body op {i}"), at, i, pos + 1 + i, nested=True, body_of=label)
                        for i, b in enumerate(body))
    return op


def _ref(r: _Reader, x: Any, at: str) -> Ref:
    d = r.obj(x, at)
    kinds = [key for key in ("type", "buffer_id", "switch_channel_id") if key in d]
    if len(kinds) != 1:
        raise r.fail(at, "needs exactly one of \"type\" (local), \"buffer_id\" (remote) or \"switch_channel_id\" "
                         f"(NVLS), found {', '.join(kinds) or 'none'}")
    index, size = r.nat(d, "index", at), r.nat(d, "size", at)
    if kinds[0] == "type":
        buf = r.get(d, "type", "str", at)
        if buf not in BUFFERS:
            raise r.fail(at, f"type {buf!r} must be one of i, o, s (the executor refuses: invalid buffer type)")
        return Ref("local", buf, -1, index, size)
    if kinds[0] == "buffer_id":
        return Ref("remote", "", r.nat(d, "buffer_id", at), index, size)
    return Ref("switch", "", r.nat(d, "switch_channel_id", at), index, size)
