"""Fuzz the CLI's argument vectors, every subcommand (issue 13, Deliver 2): random choices of flags and
values (valid ones, extreme numbers, malformed text, hostile paths) must give exit 0, 1 or 2, one line on
stderr for exit 2, and no file written but the requested output. Harness and limits: tests/fuzzkit.py.
`make test` replays a small fixed set; COLLSYNTH_FUZZ_EXAMPLES=N runs N random examples per test."""

from __future__ import annotations

import shutil
import tempfile

import pytest
from fuzzkit import Server, derandomize, examples, run_case
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collsynth.synth.registry import build_schedule

FUZZ = settings(max_examples=examples(12), deadline=None, derandomize=derandomize(), database=None,
                suppress_health_check=list(HealthCheck))

# value pools: valid, boundary, extreme, malformed
INTS = ["2", "3", "4", "5", "8", "1", "0", "-1", "-3", "99999999999999999999999", "1e3", "4.0", "abc", "", "0x10",
        "1_000", " 4", "٣"]
SIZES = ["1MiB", "64KiB", "4KiB", "1GiB", "100", "1000", "0", "-1", "1e400", "nan", "inf", "1.5", "0.5", "1e30",
         "99999999999999999999999", "", "abc", "1XiB", "1 MiB", "1e-300", "-0", "1e308GiB"]
TIMES = ["3us", "0", "0s", "1e400s", "-1us", "3", "nan", "inf", "5ms", "1e-30s", "abc", "", "1e308s", "-0s", "2ns"]
RATES = ["450GiB/s", "100GB/s", "0", "-1GB/s", "1e400", "nan", "1e-300B/s", "x", "", "inf", "1e308GiB/s"]
ARRIVALS = ["3=5ms", "0=1ms", "1=0", "x=1", "1=", "=", "99=1ms", "-1=1ms", "1=1e400s", "1=nan", "1", "1=2=3",
            "2=-1ms", "1=3"]
FACTORS = ["7=1.3", "1=1.5", "0=1", "1=0.5", "1=nan", "1=1e400", "x=2", "=", "99=2"]
ALGS = ["ring", "rhd", "direct", "twoshot", "stragglar", "nope", "", "RING", "ring,rhd", "ring,"]
TOPOS = ["nvswitch", "ring", "full-mesh", "torus2d", "dgx1", "nope", "topo.json", "missing.json", "s.json",
         "/dev/null", "pipe", ".", ""]
SCHEDULE_IN = ["s.json", "missing.json", ".", "/dev/null", "pipe", "empty.json", "bad.json", "", "a" * 300,
               "s.xml", "/proc/self/status", "dir/"]
OUTPUTS = ["out.json", "sub/out.json", "dir", "s.json", "", "a" * 300 + ".json", "/proc/self/x",
           "regular/x.json", "out.png", "fresh/"]

TOPO = ('{"gpus": 4, "switches": ["sw"], "links": [{"src": 0, "dst": "sw"}, {"src": 1, "dst": "sw"}, '
        '{"src": 2, "dst": "sw"}, {"src": 3, "dst": "sw"}]}')


@pytest.fixture(scope="module")
def fuzz():
    root = tempfile.mkdtemp(prefix="collsynth-fuzz-")
    s = build_schedule("ring", 4)
    from collsynth.backends.msccl import emit_xml

    files = {"s.json": s.to_json(), "s.xml": emit_xml(s), "topo.json": TOPO,
             "empty.json": "", "bad.json": b"\x00\xff{[", "regular": "x", "dir/": "", "pipe": None}
    server = Server()
    yield server, root, files
    server.close()
    shutil.rmtree(root, ignore_errors=True)


def _opts(pairs):
    """A strategy for a list of (flag, value-or-None) drawn from ``pairs`` [(flag, pool or None)]."""
    one = st.sampled_from(pairs).flatmap(
        lambda p: st.just((p[0], None)) if p[1] is None else st.sampled_from(p[1]).map(lambda v: (p[0], v)))
    return st.lists(one, max_size=4)


def _argv(head, opts):
    out = list(head)
    for flag, val in opts:
        out.append(flag)
        if val is not None:
            out.append(val)
    return out


def _outputs(argv, flags=("-o", "--output", "--out", "--plot", "--timeline")):
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a in flags]


COMMON_MODEL = [("--size", SIZES), ("--alpha", TIMES), ("--bandwidth", RATES), ("--topology", TOPOS),
                ("--arrival", ARRIVALS), ("--json", None)]

COMMANDS = {
    "synth": (st.tuples(st.sampled_from(ALGS), st.sampled_from(INTS[:8] + INTS[8:])).map(
        lambda t: ["synth", "-a", t[0], "-n", t[1]]),
        [("--collective", ["allreduce", "reducescatter", "allgather", "bcast"]), ("--straggler", INTS),
         ("--pipeline", ["auto", "1", "2", "0", "-1", "abc", "1e9", "99999999999999999999999"]),
         ("--chunks", INTS), ("--format", ["json", "msccl-xml", "mscclpp-plan", "nccl-cuda", "xx"]),
         ("-o", OUTPUTS), ("--force", None), ("--max-bytes", SIZES), ("--min-bytes", SIZES),
         ("--proto", ["Simple", "LL", "LL128", "ll"]), ("--phase1", ["ring", "x", ""]),
         ("--time-limit", TIMES), ("--size", SIZES), ("--alpha", TIMES), ("--bandwidth", RATES),
         ("--topology", TOPOS), ("--arrival", ARRIVALS), ("--no-inplace", None), ("--no-outofplace", None)]),
    "info": (st.sampled_from(SCHEDULE_IN).map(lambda f: ["info", f]), [("--json", None)]),
    "verify": (st.sampled_from(SCHEDULE_IN).map(lambda f: ["verify", f]),
               [("--ports", INTS), ("--size", SIZES), ("--json", None)]),
    "simulate": (st.tuples(st.sampled_from(SCHEDULE_IN), st.sampled_from(SIZES)).map(
        lambda t: ["simulate", t[0], "--size", t[1]]), [*COMMON_MODEL, ("--timeline", OUTPUTS)]),
    "compare": (st.tuples(st.sampled_from(INTS), st.sampled_from(SIZES)).map(
        lambda t: ["compare", "--gpus", t[0], "--size", t[1]]),
        [*COMMON_MODEL, ("--algorithms", ALGS), ("--solver-time-limit", ["1", "0", "-1", "abc", "1e400"])]),
    "emit": (st.tuples(st.sampled_from(SCHEDULE_IN), st.sampled_from(
        ["msccl-xml", "nccl-cuda", "mscclpp-plan", "msccl-scheduler", "mscclpp-selector", "nope", ""])).map(
        lambda t: ["emit", t[0], "--format", t[1]]),
        [("-o", OUTPUTS), ("--force", None), ("--dialect", ["executor", "legacy", "x"]),
         ("--proto", ["Simple", "LL", "LL128", "x"]), ("--min-bytes", SIZES), ("--max-bytes", SIZES),
         ("--instances", INTS), ("--name", ["n", "", 'a"b', "a" * 300, "<x>"]),
         ("--nchunksperloop", INTS + ["pow2"]), ("--pipeline-unit", SIZES), ("--gpus-per-node", INTS),
         ("--plan-chunks", INTS + ["pow2"]), ("--dtypes", ["float32", "float16", "x", ""]),
         ("--no-inplace", None), ("--no-outofplace", None)]),
    "schedules": (st.sampled_from([["schedules", "list"], ["schedules", "list", "--mscclpp"],
                                   ["schedules", "list", "--dir", "dir"], ["schedules", "list", "--dir", "regular"],
                                   ["schedules", "list", "--dir", "missing"], ["schedules", "list", "--dir", "pipe"],
                                   ["schedules", "regenerate", "--out", "regular"],
                                   ["schedules", "regenerate", "--out", ""],
                                   ["schedules", "regenerate", "--out", "/proc/self/x"],
                                   ["schedules", "regenerate", "--out", "regular/x"],
                                   ["schedules", "nope"], ["schedules"]]), [("--json", None)]),
    "solve-rounds": (st.sampled_from(["0", "1", "-1", "abc", "", "99999999999999999999999", "1e3"]).map(
        lambda g: ["solve-rounds", "--gpus", g]),
        [("--time-limit", TIMES), ("--solver", ["cbc", "highs", "x"]), ("-o", OUTPUTS), ("--json", None)]),
    "train-sim": (st.tuples(st.sampled_from(INTS), st.sampled_from(SIZES)).map(
        lambda t: ["train-sim", "--gpus", t[0], "--grad-bytes", t[1]]),
        [("--compute", TIMES), ("--jitter", ["0", "0.1", "-1", "nan", "1e400"]), ("--slow", FACTORS),
         ("--steps", ["1", "5", "0", "-1", "1e9", "x"]), ("--microbatches", INTS), ("--buckets", INTS),
         ("--methods", ["ddp", "acco", "zero1", "x", ""]), ("--algorithms", ALGS), ("--plot", OUTPUTS),
         ("--trace", SCHEDULE_IN), ("--warmup", INTS), ("--seed", INTS), ("--alpha", TIMES),
         ("--bandwidth", RATES), ("--topology", TOPOS), ("--json", None)]),
    "reproduce": (st.sampled_from([["reproduce", "stragglar", "-n", g] for g in ("4", "3", "0", "x", "")]
                                  + [["reproduce", "nope"], ["reproduce"]]),
                  [("--size", SIZES), ("--alpha", TIMES), ("--bandwidth", RATES), ("--plot", OUTPUTS),
                   ("--pipeline", ["auto", "2", "0", "x"]), ("--topology", TOPOS), ("--json", None)]),
    # commands that start processes: only argument vectors that must be refused before any start
    "bench": (st.sampled_from(["0", "1", "-1", "x", "", "99999999999999999999999"]).map(
        lambda r: ["bench", "--ranks", r, "--size", "1KiB"]),
        [("--delay", ARRIVALS), ("--algorithms", ALGS), ("--iters", INTS), ("--dtype", ["float32", "x"]),
         ("--schedule", SCHEDULE_IN), ("--backend", ["gloo", "x"]), ("--json", None)]),
    "calibrate": (st.sampled_from(["0", "1", "-1", "x", ""]).map(lambda r: ["calibrate", "--ranks", r]),
                  [("--sizes", ["1KiB", "x", "", "-1"]), ("--iters", INTS), ("--pattern", ["ring", "x"])]),
    "train-bench": (st.sampled_from(["0", "1", "-1", "x", ""]).map(lambda r: ["train-bench", "--ranks", r]),
                    [("--runs", ["ddp:torch", "x", ""]), ("--steps", INTS), ("--grad-bytes", SIZES)]),
    "other": (st.sampled_from([["algorithms"], ["topologies"], ["nope"], [], ["--version"], ["-h"],
                               ["synth", "--help"], ["--debug"], ["verify"], ["synth", "-a"]]), [("--json", None)]),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_fuzz_command_line(fuzz, command):
    server, root, files = fuzz
    head, pool = COMMANDS[command]

    @FUZZ
    @given(head=head, opts=_opts(pool))
    def case(head, opts):
        argv = _argv(head, opts)
        if command in ("bench", "calibrate", "train-bench") and argv[2] not in ("0", "1", "-1", "x", ""):
            return  # never start real process groups from the fuzzer
        out = run_case(server, root, f"cli-{command}", argv, files, _outputs(argv))
        assert not out.problems(), out.describe()

    case()


@pytest.mark.parametrize("argv", [["reproduce", "stragglar", "-n", "4", "--bandwidth", "1e-300B/s"],
                                  ["compare", "--gpus", "4", "--size", "1MiB", "--bandwidth", "0.5B/s"]])
def test_found_by_the_long_run(fuzz, argv):
    """A bandwidth so small that transfer times overflow printed a numpy warning and blamed an arrival."""
    server, root, files = fuzz
    out = run_case(server, root, "cli-found", argv, files)
    assert out.kind == "exit" and out.code == 2 and not out.problems(), out.describe()
    assert "bandwidth" in out.stderr
