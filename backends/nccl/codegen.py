"""Generate a CUDA/NCCL library, a benchmark and a Makefile that run one Schedule on any stock NCCL.

``generate_nccl_cuda(schedule, outdir)`` verifies the schedule (synth/verify.check), lowers it to a
per-rank plan (plan.py) and renders the jinja2 templates in templates/:

- ``<name>.h`` / ``<name>.cu``: ``collsynth_<name>(sendbuf, recvbuf, count, dtype, comm, stream)``
  plus ``_with_scratch``, ``_multi`` (several ranks from one thread), ``_loopback`` (all ranks on one
  GPU, no NCCL) and ``_reduce`` (the add kernel);
- ``bench_<name>.cu``: an nccl-tests style benchmark (sizes, straggler delay, check against NCCL, CSV);
- ``Makefile``: ``make NCCL_HOME=...`` with nvcc for sm_90 (``ARCH=sm_80`` or ``all``).

The approach (host-side grouped ncclSend/ncclRecv per step plus local reduction kernels) is the one
stock NCCL allows for a custom schedule (docs/msccl-xml.md section 5); the StragglAR authors'
hand-written benchmarks do the same for their fixed 4- and 8-GPU schedules.
"""

from __future__ import annotations

from collections.abc import Sequence

from collsynth.backends.nccl.names import c_identifier, sanitize
from collsynth.backends.nccl.plan import ALIGN_BYTES, LOC_NAMES, MAX_ADD_OPS, MAX_ADD_SRCS, Plan, build_plan
from collsynth.backends.render import render
from collsynth.errors import CollsynthError
from collsynth.fileio import check_outdir, write_tree
from collsynth.synth.ir import Schedule
from collsynth.synth.verify import check

__all__ = ["DTYPES", "generate_nccl_cuda", "render_nccl_cuda", "default_name"]

# name -> (NCCL enum, element size, plan kind id, bench exact-sum limit, epsilon, bench C type)
DTYPES: dict[str, tuple[str, int, int, str, str, str]] = {
    "float": ("ncclFloat32", 4, 0, "16777216.0f", "1.2e-7f", "float"),
    "half": ("ncclFloat16", 2, 1, "2048.0f", "9.8e-4f", "__half"),
    "bfloat16": ("ncclBfloat16", 2, 2, "256.0f", "7.9e-3f", "__nv_bfloat16"),
}
_KINDS = ("csF32", "csF16", "csBF16")
_COLL_ID = {"allreduce": 0, "reducescatter": 1, "allgather": 2}
_COMMENT_LIMIT = 4096  # operations; beyond this the send/recv table rows carry no comment
_NCCL_CALL = {"allreduce": "ncclAllReduce", "reducescatter": "ncclReduceScatter", "allgather": "ncclAllGather"}


def default_name(schedule: Schedule) -> str:
    """The C name used when none is given: the schedule's name made an identifier."""
    base = schedule.name or f"{schedule.meta.get('algorithm', 'schedule')}_{schedule.collective}_n{schedule.nranks}"
    return sanitize(base)


def _dtypes(dtypes: Sequence[str] | str | None) -> tuple[str, ...]:
    if dtypes is None:
        return tuple(DTYPES)
    if isinstance(dtypes, str):
        dtypes = [d.strip() for d in dtypes.split(",") if d.strip()]
    out = []
    for d in dtypes:
        if d not in DTYPES:
            raise CollsynthError(f"unsupported dtype {d!r} for the nccl-cuda backend: choose from "
                                 f"{', '.join(DTYPES)}")
        if d not in out:
            out.append(d)
    if not out:
        raise CollsynthError(f"no dtype given: choose from {', '.join(DTYPES)}")
    return tuple(d for d in DTYPES if d in out)


def _rows(items: Sequence[Sequence[int]], comments: Sequence[str] | None = None) -> str:
    if not items:
        return "  {}  /* unused */"
    lines = []
    for i, it in enumerate(items):
        c = f"  /* {comments[i]} */" if comments else ""
        lines.append("  {" + ", ".join(str(int(x)) for x in it) + "}," + c)
    return "\n".join(lines)


def _tables(plan: Plan) -> dict[str, str]:
    p2p: list[tuple[int, ...]] = []
    adds: list[tuple[int, ...]] = []
    srcs: list[tuple[int, int]] = []
    steps: list[tuple[int, ...]] = []
    tails: list[tuple[int, ...]] = []
    p2p_c: list[str] = []
    step_c: list[str] = []
    tail_c: list[str] = []
    rank_steps, rank_tails = [0], [0]
    for r in range(plan.nranks):
        for st in plan.steps[r]:
            steps.append((st.step, len(p2p), len(st.p2p), len(adds), len(st.adds)))
            step_c.append(f"rank {r} step {st.step}")
            for op in st.p2p:
                p2p.append((int(op.send), op.peer, op.chunk, op.nchunk, op.loc, op.slot))
                p2p_c.append(f"r{r} s{st.step} {'send to' if op.send else 'recv from'} {op.peer} "
                             f"{LOC_NAMES[op.loc]}")
            for ad in st.adds:
                adds.append((ad.chunk, ad.nchunk, ad.dst_loc, ad.a_loc, ad.apos, int(ad.new_batch),
                             len(ad.srcs), len(srcs)))
                srcs.extend(ad.srcs)
        rank_steps.append(len(steps))
        for t in plan.tails[r]:
            tails.append((t.chunk, t.nchunk, t.src_loc))
            tail_c.append(f"rank {r} from {LOC_NAMES[t.src_loc]}")
        rank_tails.append(len(tails))
    # keep big tables compact (a 256-rank ring has 261k operations)
    p2p_comments = p2p_c if len(p2p) <= _COMMENT_LIMIT else None
    return {
        "p2p_rows": _rows(p2p, p2p_comments),
        "add_rows": _rows(adds),
        "src_rows": _rows(srcs),
        "step_rows": _rows(steps, step_c),
        "tail_rows": _rows(tails, tail_c),
        "rank_steps": ", ".join(map(str, rank_steps)),
        "rank_tails": ", ".join(map(str, rank_tails)),
    }


def render_nccl_cuda(schedule: Schedule, *, name: str | None = None,
                     dtypes: Sequence[str] | str | None = None) -> dict[str, str]:
    """The generated files (relative name -> text) for a verified schedule; nothing is written."""

    dts = _dtypes(dtypes)
    cname = c_identifier(name) if name is not None else default_name(schedule)
    check(schedule)
    plan = build_plan(schedule)
    coll = schedule.collective
    n = schedule.nranks
    ctx = dict(
        name=cname,
        NAME=cname.upper(),
        sched_name=schedule.name or "(unnamed)",
        digest=schedule.digest(),
        collective=coll,
        coll_id=_COLL_ID[coll],
        nranks=n,
        nchunks=schedule.nchunks,
        nsteps=schedule.nsteps,
        chunks_per_block=plan.chunks_per_block,
        nblocks=plan.nblocks,
        uses_work="true" if plan.uses_work else "false",
        scratch_slots=plan.scratch_slots,
        max_ops=MAX_ADD_OPS,
        max_terms=MAX_ADD_SRCS + 1,
        align_bytes=ALIGN_BYTES,
        dtype_list=", ".join(dts),
        dtype_names="|".join(dts),
        default_dtype=dts[0],
        nccl_call=_NCCL_CALL[coll],
        count_doc={
            "allreduce": "elements in sendbuf and in recvbuf",
            "reducescatter": "elements each rank receives (sendbuf holds nranks*count)",
            "allgather": "elements each rank sends (recvbuf holds nranks*count)",
        }[coll],
        inplace_doc={
            "allreduce": "sendbuf == recvbuf",
            "reducescatter": "recvbuf == sendbuf + rank*count elements",
            "allgather": "sendbuf == recvbuf + rank*count elements",
        }[coll],
        bytes_doc="count * element size" if coll == "allreduce" else "nranks * count * element size",
        **_tables(plan),
    )
    ctx["dtype_cases"] = "\n".join(
        f"    case {DTYPES[d][0]}: *kind = {DTYPES[d][2]}; *es = {DTYPES[d][1]}; return true;" for d in dts)
    ctx["launch_cases"] = "\n".join(
        f"    case {DTYPES[d][2]}: e = csLaunchAdd<{_KINDS[DTYPES[d][2]]}>(A, (unsigned)blocks, stream); break;"
        for d in dts)
    ctx["bench_dtype_cases"] = "\n".join(
        f'  if (!strcmp(name, "{d}")) return Type{{{DTYPES[d][0]}, {DTYPES[d][1]}, {DTYPES[d][3]}, {DTYPES[d][4]}}};'
        for d in dts)
    ctx["init_cases"] = "\n".join(
        f"  {'if' if i == 0 else 'else if'} (t.nccl == {DTYPES[d][0]}) "
        f"initKernel<<<blocks, 256, 0, s>>>(({DTYPES[d][5]}*)buf, n, rank, offset);"
        for i, d in enumerate(dts))
    ctx["check_cases"] = "\n".join(
        f"  {'if' if i == 0 else 'else if'} (t.nccl == {DTYPES[d][0]}) checkKernel<<<blocks, 256, 0, s>>>("
        f"(const {DTYPES[d][5]}*)a, (const {DTYPES[d][5]}*)b, n, rank, count, tol, bad);"
        for i, d in enumerate(dts))
    ref = {
        "allreduce": "ncclAllReduce(send, out, count, t.nccl, ncclSum, k.comm, k.stream)",
        "reducescatter": "ncclReduceScatter(send, out, count, t.nccl, ncclSum, k.comm, k.stream)",
        "allgather": "ncclAllGather(send, out, count, t.nccl, k.comm, k.stream)",
    }[coll]
    ctx["nccl_reference"] = f"  return {ref};"
    return {
        f"{cname}.h": render("nccl/library.h.j2", **ctx),
        f"{cname}.cu": render("nccl/library.cu.j2", **ctx),
        f"bench_{cname}.cu": render("nccl/bench.cu.j2", **ctx),
        "Makefile": render("nccl/Makefile.j2", **ctx),
    }


def generate_nccl_cuda(schedule: Schedule, outdir: str, *, name: str | None = None, force: bool = False,
                       dtypes: Sequence[str] | str | None = None) -> list[str]:
    """Verify ``schedule`` and write its library, benchmark and Makefile into ``outdir``.

    ``outdir`` must not exist or be empty unless ``force``; ``name`` (a C identifier) defaults to the
    schedule's name; ``dtypes`` limits the element types compiled in (default float, half, bfloat16).
    Returns the written paths. Raises CollsynthError (nothing written) for an unverifiable schedule,
    a collective layout NCCL cannot express, an unknown dtype or a bad output directory.
    """
    check_outdir(outdir, force)
    files = render_nccl_cuda(schedule, name=name, dtypes=dtypes)
    return write_tree(outdir, files, force=force)
