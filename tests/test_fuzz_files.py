"""Fuzz the file readers (issue 13, Deliver 2): schedule JSON, topology JSON, MSCCL XML and MSCCL++ plans,
each as random mutations of a valid file (a field set to an extreme or wrong-typed value, removed, the
text cut or bytes flipped) and as random bytes, fed to every command that reads them. The answer must be
exit 0, 1 or 2 (never 3 or a crash, hang or blow-up), one line on stderr for exit 2, and no file written
but the requested output. Harness and limits: tests/fuzzkit.py."""

from __future__ import annotations

import json
import re
import shutil
import tempfile

import pytest
from fuzzkit import Server, derandomize, examples, run_case
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collsynth.synth.registry import build_schedule

FUZZ = settings(max_examples=examples(10), deadline=None, derandomize=derandomize(), database=None,
                suppress_health_check=list(HealthCheck))

EXTREMES = [0, -1, 1, 2, 3, 2**31, 2**63 - 1, 2**63, 2**64, 10**12, 10**400, -(2**63), 0.5, -0.0, 1e308, "x", "",
            None, True, False, [], {}, [0], {"a": 1}, "3us", "1e400", "nan", [[[[[]]]]], "a" * 1000]
RAW_NUMBERS = ["1e400", "-1e400", "NaN", "Infinity", "-Infinity", "1" * 400, "1e-400", "-0"]


def _paths(obj, prefix=()):
    """Every path to a value inside a JSON object (dict keys and list indices, lists sampled)."""
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        idx = range(len(obj)) if len(obj) <= 6 else [0, 1, len(obj) // 2, len(obj) - 1]
        for i in idx:
            yield from _paths(obj[i], (*prefix, i))


def _get(obj, path):
    for p in path:
        obj = obj[p]
    return obj


@st.composite
def mutated_json(draw, base_text):
    """A mutation of the JSON text ``base_text`` (bytes)."""
    kind = draw(st.sampled_from(["set", "set", "set", "delete", "raw-number", "truncate", "flip", "deep",
                                 "random", "append-key", "dup-lists"]))
    obj = json.loads(base_text)
    if kind == "random":
        return draw(st.binary(max_size=300))
    if kind == "truncate":
        return base_text.encode()[:draw(st.integers(0, len(base_text)))]
    if kind == "flip":
        b = bytearray(base_text.encode())
        for _ in range(draw(st.integers(1, 5))):
            i = draw(st.integers(0, len(b) - 1))
            b[i] = draw(st.integers(0, 255))
        return bytes(b)
    if kind == "deep":
        depth = draw(st.sampled_from([100, 1000, 100_000]))
        return ("[" * depth + "]" * depth).encode() if draw(st.booleans()) else (
            '{"format": "collsynth-schedule", "version": 1, "meta": ' + "[" * depth + "]" * depth + "}").encode()
    paths = [p for p in _paths(obj) if p]
    path = draw(st.sampled_from(paths))
    parent, key = _get(obj, path[:-1]), path[-1]
    if kind == "set":
        parent[key] = draw(st.sampled_from(EXTREMES))
    elif kind == "delete":
        del parent[key]
    elif kind == "append-key":
        target = _get(obj, path) if isinstance(_get(obj, path), dict) else obj
        target[draw(st.sampled_from(["extra", "", "nranks", "links", "x" * 200]))] = draw(st.sampled_from(EXTREMES))
    elif kind == "dup-lists":
        v = _get(obj, path)
        if isinstance(v, list):
            parent[key] = v * draw(st.sampled_from([0, 2, 3]))
    else:  # raw-number: a number JSON cannot hold as a float
        marker = "__FUZZ_RAW__"
        parent[key] = marker
        return json.dumps(obj).replace(f'"{marker}"', draw(st.sampled_from(RAW_NUMBERS))).encode()
    return json.dumps(obj).encode()


XML_VALUES = ["0", "-1", "1", "2", "33", "64", "127", "128", "32767", "32768", "1000000000", "1000000000000",
              "99999999999999999999", "x", "", "1.5", "-0", " 1", "\u0661", "&amp;", "<", "nan"]


@st.composite
def mutated_xml(draw, base_text):
    kind = draw(st.sampled_from(["attr", "attr", "attr", "drop-line", "dup-line", "truncate", "flip", "random"]))
    if kind == "random":
        return draw(st.binary(max_size=300))
    if kind == "truncate":
        return base_text.encode()[:draw(st.integers(0, len(base_text)))]
    if kind == "flip":
        b = bytearray(base_text.encode())
        for _ in range(draw(st.integers(1, 5))):
            b[draw(st.integers(0, len(b) - 1))] = draw(st.integers(0, 255))
        return bytes(b)
    lines = base_text.splitlines(keepends=True)
    if kind in ("drop-line", "dup-line"):
        i = draw(st.integers(0, len(lines) - 1))
        lines[i:i + 1] = [] if kind == "drop-line" else [lines[i], lines[i]]
        return "".join(lines).encode()
    attrs = list(re.finditer(r'(\w+)="([^"]*)"', base_text))
    m = draw(st.sampled_from(attrs[:40] + attrs[40::max(1, len(attrs) // 40)]))
    value = draw(st.sampled_from(XML_VALUES))
    return (base_text[:m.start(2)] + value + base_text[m.end(2):]).encode()


TOPO = {"name": "fz", "gpus": 4, "switches": ["sw"], "alpha": "2us", "bandwidth": "100GB/s", "ports": 1,
        "links": [{"src": 0, "dst": 1, "bandwidth": "300GB/s"}, {"src": 0, "dst": "sw"}, {"src": 1, "dst": "sw"},
                  {"src": 2, "dst": "sw", "alpha": "1us"}, {"src": 3, "dst": "sw", "bidirectional": True}]}


@pytest.fixture(scope="module")
def fuzz():
    from collsynth.backends.msccl import emit_xml
    from collsynth.backends.mscclpp import emit_plan

    s = build_schedule("stragglar", 4, straggler=3)
    rs = build_schedule("ring", 3, "reducescatter")
    bases = {"schedule": s.to_json(), "schedule-rs": rs.to_json(), "topology": json.dumps(TOPO, indent=1),
             "xml": emit_xml(s), "plan": emit_plan(build_schedule("ring", 4))}
    root = tempfile.mkdtemp(prefix="collsynth-fuzzf-")
    server = Server()
    yield server, root, bases
    server.close()
    shutil.rmtree(root, ignore_errors=True)


# every command that reads the file, with what it may write
SCHEDULE_CMDS = [["verify", "F"], ["info", "F"], ["info", "--json", "F"], ["verify", "--json", "F"],
                 ["simulate", "F", "--size", "1MiB"], ["simulate", "F", "--size", "1MiB", "--arrival", "3=1ms"],
                 ["emit", "F", "--format", "msccl-xml", "-o", "out.xml"],
                 ["emit", "F", "--format", "mscclpp-plan", "-o", "out.json"],
                 ["emit", "F", "--format", "nccl-cuda", "-o", "outdir"]]
TOPO_CMDS = [["compare", "--gpus", "4", "--size", "1MiB", "-t", "F"],
             ["synth", "-a", "ring", "-n", "4", "-t", "F", "-o", "out.json"],
             ["synth", "-a", "stragglar", "-n", "4", "-t", "F", "--pipeline", "auto"],
             ["simulate", "s.json", "--size", "1MiB", "-t", "F"],
             ["train-sim", "--gpus", "4", "--grad-bytes", "1MiB", "--steps", "3", "-t", "F"],
             ["reproduce", "stragglar", "-n", "4", "-t", "F"]]
XML_CMDS = [["verify", "F"], ["info", "F"], ["simulate", "F", "--size", "1MiB"], ["verify", "--json", "F"]]


def _outputs(argv):
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("-o", "--timeline", "--plot")]


def _check(fuzz, test, cmds, content, name, extra=None):
    server, root, bases = fuzz
    files = {name: content, **(extra or {})}
    for cmd in cmds:
        argv = [name if a == "F" else a for a in cmd]
        out = run_case(server, root, test, argv, files, _outputs(argv))
        assert not out.problems(), out.describe()


@pytest.mark.parametrize("base", ["schedule", "schedule-rs"])
def test_fuzz_schedule_json(fuzz, base):
    @FUZZ
    @given(data=st.data())
    def case(data):
        content = data.draw(mutated_json(fuzz[2][base]))
        _check(fuzz, "file-schedule", SCHEDULE_CMDS, content, "in.json")

    case()


def test_fuzz_topology_json(fuzz):
    @FUZZ
    @given(data=st.data())
    def case(data):
        content = data.draw(mutated_json(fuzz[2]["topology"]))
        _check(fuzz, "file-topology", TOPO_CMDS, content, "topo.json", {"s.json": fuzz[2]["schedule"]})

    case()


def test_fuzz_msccl_xml(fuzz):
    @FUZZ
    @given(data=st.data())
    def case(data):
        content = data.draw(mutated_xml(fuzz[2]["xml"]))
        _check(fuzz, "file-xml", XML_CMDS, content, "in.xml")

    case()


def test_fuzz_mscclpp_plan(fuzz):
    @FUZZ
    @given(data=st.data())
    def case(data):
        content = data.draw(mutated_json(fuzz[2]["plan"]))
        _check(fuzz, "file-plan", XML_CMDS, content, "plan.json")

    case()


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/urandom", "/dev/null", "pipe", ".", "/proc/self/status",
                                  "/proc/self/mem", "missing.json", "a" * 300, "", "sub/../in.json", "in.json/x"])
def test_hostile_input_paths(fuzz, path):
    server, root, bases = fuzz
    for cmd in SCHEDULE_CMDS[:5] + [["compare", "--gpus", "4", "--size", "1MiB", "-t", "F"]]:
        argv = [path if a == "F" else a for a in cmd]
        out = run_case(server, root, "file-paths", argv, {"in.json": bases["schedule"], "pipe": None}, _outputs(argv))
        assert not out.problems(), out.describe()


# ------------------------------------------------------------------ what the long run found (fixed)
@pytest.mark.parametrize("base, path, raw", [
    ("schedule", ("phases", 0, "start"), "1e400"),  # int(inf) in the schedule reader: exit 3 before
    ("plan", ("gpus", 0, "input_chunks"), "1e400"),  # float check v == int(v) on inf in the plan reader
    ("plan", ("gpus", 0, "input_chunks"), "NaN"),
])
def test_numbers_json_reads_as_infinity_or_nan_are_bad_input(fuzz, base, path, raw):
    obj = json.loads(fuzz[2][base])
    target = obj
    for p in path[:-1]:
        target = target[p]
    target[path[-1]] = "__RAW__"
    content = json.dumps(obj).replace('"__RAW__"', raw)
    name = "in.json" if base == "schedule" else "plan.json"
    server, root, _ = fuzz
    for cmd in (["verify", name], ["info", name]):
        out = run_case(server, root, "file-found", cmd, {name: content})
        assert out.kind == "exit" and out.code == 2 and not out.problems(), out.describe()
