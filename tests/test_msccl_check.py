"""The MSCCL XML reader and checker: every public vector verifies, and each kind of broken file is
caught with a one-line message naming the element (XmlFormatError when the runtime would not load it)."""

from __future__ import annotations

import glob
import os
import re

import pytest
from shared_paths import vectors

from collsynth.backends.msccl import XmlFormatError, check_xml_file, check_xml_text, read_xml_file

VECTORS = sorted(glob.glob(vectors("msccl", "*.xml")))

HEAD = ('<algo name="t" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="allreduce" inplace="1" '
        'outofplace="1" minBytes="0" maxBytes="0">')


def step(s, typ, src=("i", 0), dst=("o", 0), cnt=1, dep=(-1, -1), hasdep=0):
    return (f'      <step s="{s}" type="{typ}" srcbuf="{src[0]}" srcoff="{src[1]}" dstbuf="{dst[0]}" '
            f'dstoff="{dst[1]}" cnt="{cnt}" depid="{dep[0]}" deps="{dep[1]}" hasdep="{hasdep}"/>')


def xml(gpus, head=HEAD, nchunks=2):
    """gpus: list of list of (send, recv, chan, [step lines])."""
    out = [head]
    for g, tbs in enumerate(gpus):
        out.append(f'  <gpu id="{g}" i_chunks="{nchunks}" o_chunks="{nchunks}" s_chunks="2">')
        for t, (send, recv, chan, steps) in enumerate(tbs):
            out.append(f'    <tb id="{t}" send="{send}" recv="{recv}" chan="{chan}">')
            out += steps
            out.append("    </tb>")
        out.append("  </gpu>")
    out.append("</algo>")
    return "\n".join(out) + "\n"


def direct2():
    """2-GPU allreduce of 2 chunks: swap both chunks and reduce (one thread block per GPU)."""
    return xml([[(1 - g, 1 - g, 0, [step(0, "s", ("i", 0), cnt=2), step(1, "rrc", ("i", 0), ("o", 0), cnt=2)])]
                for g in range(2)])


def check(text):
    return check_xml_text(text, "t.xml")


# ----------------------------------------------------------------------------------- good files
@pytest.mark.parametrize("path", VECTORS, ids=os.path.basename)
def test_every_public_vector_verifies(path):
    report = check_xml_file(path)
    assert report.ok, report.message
    assert report.message.startswith("OK ")
    assert "\n" not in report.message


def test_vectors_exist():
    assert len(VECTORS) >= 11


def test_small_hand_written_file_verifies_in_both_modes():
    r = check(direct2())
    assert r.ok, r.message
    assert r.stats["modes"] == ["inplace", "outofplace"]
    assert "in-place and out-of-place" in r.message


def test_legacy_dialect_is_recognised():
    head = ('<algo name="t" proto="LL" nchannels="1" nchunksperloop="2" ngpus="2" coll="allreduce" '
            'inplace="1">')
    text = direct2().replace(HEAD, head)
    r = check(text)
    assert r.ok and r.stats["dialect"] == "legacy" and r.stats["modes"] == ["inplace"]


def test_comments_and_unknown_elements_are_skipped():
    text = direct2().replace('  <gpu id="1"', '  <!-- a comment -->\n  <extra a="1"><inner/></extra>\n  <gpu id="1"')
    assert check(text).ok


def test_nops_and_fused_re_chains_count_steps_like_the_kernel():
    from collsynth.backends.msccl.load import resolve
    from collsynth.backends.msccl.parse import parse_xml_text

    text = xml([[(-1, -1, 0, [step(0, "nop", cnt=0, dep=(1, 0)), step(1, "re", ("s", 0), ("o", 0), dep=(2, 0)),
                              step(2, "re", ("s", 1), ("o", 0)), step(3, "re", ("s", 0), ("o", 1), hasdep=1),
                              step(4, "cpy", ("o", 0), ("s", 0))]),
                 (-1, -1, 0, [step(0, "cpy", ("i", 0), ("s", 0), hasdep=1)]),
                 (-1, -1, 0, [step(0, "cpy", ("i", 1), ("s", 1), hasdep=1)])],
                [(-1, -1, 0, [])]])
    prog = resolve(parse_xml_text(text, "t.xml"))
    txs = prog.tbs[0][0].txs
    # nop folded into the first re; the second re fused into it; the third has another destination
    assert [t.type for t in txs] == ["re", "re", "cpy"]
    assert txs[0].deps == [(1, 0), (2, 0)] and txs[0].extra_srcs == [1]
    assert [t.counter for t in txs] == [2, 3, 4] and [t.s for t in txs] == [2, 3, 4]


def test_emitted_direct_allreduce_uses_nops_and_fused_re():
    from collsynth.backends.msccl import emit_xml
    from collsynth.synth.registry import build_schedule

    text = emit_xml(build_schedule("direct", 6))
    assert 'type="nop"' in text and 'type="re"' in text
    assert check(text).ok


# ----------------------------------------------------------------------------------- unreadable
@pytest.mark.parametrize("mutate, needle", [
    (lambda t: t.replace("      <step", "\t<step", 1), "TAB"),
    (lambda t: '<?xml version="1.0"?>\n' + t, "declaration"),
    (lambda t: t.replace(' cnt="2"', "", 1), "missing required attribute 'cnt'"),
    (lambda t: t.replace('type="rrc"', 'type="rx"', 1), "unknown step type 'rx'"),
    (lambda t: t.replace('<tb id="0" send="1"', '<tb id="0" send="-1"', 1), "no send peer"),
    (lambda t: t.replace(' minBytes="0"', "").replace(' name="t"', ""), "minBytes"),
    (lambda t: t.replace('proto="Simple"', 'proto="simple"'), "proto"),
    (lambda t: t.replace('srcbuf="i"', "srcbuf='i'", 1), "double quotes"),
    (lambda t: t.replace(' dstbuf="o"', '\n dstbuf="o"', 1), "one line"),
    (lambda t: t.replace('cnt="2"', 'cnt="72"', 1), "cnt=72"),
    (lambda t: t.replace('<step s="1"', '<step s="64"', 1), "s=64"),
    (lambda t: t.replace('<gpu id="1"', '<gpu id="0"', 1), "twice"),
    (lambda t: t.replace('<tb id="0" send="1" recv="1"', '<tb id="0" send="0" recv="1"', 1), "itself"),
    (lambda t: t.replace('hasdep="0"', 'hasdep="2"', 1), "hasdep"),
    (lambda t: t.replace('srcoff="0"', 'srcoff="x"', 1), "not an integer"),
    (lambda t: t.replace("</algo>", ""), "never closed"),
    (lambda t: t.replace('coll="allreduce"', 'coll="allsum"'), "unknown coll"),
    (lambda t: t.replace('coll="allreduce"', 'coll="reduce_scatter"'), "o_chunks=2 does not match"),
])
def test_unreadable_files_raise_one_line_format_errors(mutate, needle):
    text = mutate(direct2())
    assert text != direct2()
    with pytest.raises(XmlFormatError) as e:
        check(text)
    msg = str(e.value)
    assert needle in msg, msg
    assert "\n" not in msg and "t.xml" in msg


def test_format_error_names_line_and_element():
    text = direct2().replace('type="rrc"', 'type="rx"', 1)
    msg = str(pytest.raises(XmlFormatError, check, text).value)
    line = 1 + text[:text.index('type="rx"')].count("\n")
    assert f"t.xml:{line}" in msg and "gpu 0 tb 0 step 1" in msg


def test_unreadable_path(tmp_path):
    with pytest.raises(XmlFormatError, match="cannot read"):
        check_xml_file(str(tmp_path / "missing.xml"))
    p = tmp_path / "bin.xml"
    p.write_bytes(b"\xff\xfe<algo")
    with pytest.raises(XmlFormatError, match="UTF-8"):
        read_xml_file(str(p))


# ----------------------------------------------------------------------------------- wrong files
def _kind(text, kind, *needles):
    r = check(text)
    assert not r.ok, "should fail"
    assert r.kind == kind, r.message
    assert r.message.startswith("FAIL ") and "\n" not in r.message
    for n in needles:
        assert n in r.message, r.message
    return r


def test_deadlock_reports_the_blocked_steps():
    text = xml([[(1 - g, 1 - g, 0, [step(0, "rrc", ("i", 0), ("o", 0), cnt=2), step(1, "s", ("o", 0), cnt=2)])]
                for g in range(2)])
    r = _kind(text, "deadlock", "deadlock", "gpu 0 tb 0 step 0 (rrc)", "gpu 1 tb 0 step 0")
    assert (r.gpu, r.tb, r.step) == (0, 0, 0)


def test_fifo_count_mismatch():
    text = direct2().replace('step s="1" type="rrc" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="2"',
                             'step s="1" type="rrc" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1"', 1)
    _kind(text, "fifo", "cnt=1", "cnt=2", "gpu 0 tb 0 step 1")


def test_fifo_sequence_length_mismatch():
    text = xml([[(1, 1, 0, [step(0, "s", ("i", 0), cnt=2), step(1, "s", ("i", 0), cnt=2),
                            step(2, "rrc", ("i", 0), ("o", 0), cnt=2)])],
                [(0, 0, 0, [step(0, "s", ("i", 0), cnt=2), step(1, "rrc", ("i", 0), ("o", 0), cnt=2)])]])
    _kind(text, "fifo", "FIFO mismatch", "gpu 0 sends 2 time(s) to gpu 1")


def test_shared_fifo_between_thread_blocks():
    text = xml([[(1, -1, 0, [step(0, "s", ("i", 0), cnt=2)]), (1, 1, 0, [step(0, "rrc", ("i", 0), ("o", 0), cnt=2)])],
                [(0, 0, 0, [step(0, "s", ("i", 0), cnt=2), step(1, "rrc", ("i", 0), ("o", 0), cnt=2)])]])
    _kind(text, "fifo", "share one FIFO")


def test_race_between_unordered_thread_blocks():
    # gpu 0 sends chunk 0 from one thread block while another overwrites it (in place o aliases i)
    text = xml([[(1, -1, 0, [step(0, "s", ("i", 0), cnt=2)]), (-1, 1, 0, [step(0, "rrc", ("i", 0), ("o", 0), cnt=2)])],
                [(0, 0, 0, [step(0, "s", ("i", 0), cnt=2), step(1, "rrc", ("i", 0), ("o", 0), cnt=2)])]])
    _kind(text, "race", "race", "gpu 0 tb 1 step 0", "tb 0 step 0")


def test_dependency_removes_the_race():
    text = xml([[(1, -1, 0, [step(0, "s", ("i", 0), cnt=2, hasdep=1)]),
                 (-1, 1, 0, [step(0, "rrc", ("i", 0), ("o", 0), cnt=2, dep=(0, 0))])],
                [(0, 0, 0, [step(0, "s", ("i", 0), cnt=2), step(1, "rrc", ("i", 0), ("o", 0), cnt=2)])]])
    assert check(text).ok


def test_dependency_on_a_step_that_never_publishes():
    text = xml([[(1, -1, 0, [step(0, "s", ("i", 0), cnt=2, hasdep=0)]),
                 (-1, 1, 0, [step(0, "rrc", ("i", 0), ("o", 0), cnt=2, dep=(0, 0))])],
                [(0, 0, 0, [step(0, "s", ("i", 0), cnt=2), step(1, "rrc", ("i", 0), ("o", 0), cnt=2)])]])
    _kind(text, "dependency", "never publishes", "gpu 0 tb 1 step 0", "tb 0 step 0")


def test_step_numbering_must_match_the_kernel_counter():
    """A step numbered out of document order is misread by the runtime (it counts steps): bad input."""
    text = direct2().replace('<step s="1" type="rrc"', '<step s="2" type="rrc"')
    with pytest.raises(XmlFormatError, match="s=2 but this is step 1"):
        check(text)


def test_double_counting():
    text = xml([[(1, 1, 0, [step(0, "s", ("i", 0), cnt=2), step(1, "rrc", ("i", 0), ("o", 0), cnt=2),
                            step(2, "rrc", ("o", 0), ("o", 0), cnt=2)])],
                [(0, 0, 0, [step(0, "s", ("i", 0), cnt=2), step(1, "s", ("i", 0), cnt=2),
                            step(2, "rrc", ("i", 0), ("o", 0), cnt=2)])]])
    _kind(text, "postcondition", "double counting", "gpu 0 tb 0 step 2")


def test_missing_contribution():
    text = direct2().replace('type="rrc"', 'type="r"', 1)
    _kind(text, "postcondition", "gpu 0 output chunk 0", "misses the contribution of rank(s) 0")


def test_out_of_place_call_must_not_write_the_input():
    text = direct2().replace('type="rrc" srcbuf="i" srcoff="0" dstbuf="o"',
                             'type="rrc" srcbuf="i" srcoff="0" dstbuf="i"')
    _kind(text, "inplace", "writes the input buffer")
    in_place_only = text.replace('outofplace="1"', 'outofplace="0"')
    assert check(in_place_only).ok


def test_offset_past_the_end_of_a_buffer():
    text = direct2().replace('step s="0" type="s" srcbuf="i" srcoff="0"', 'step s="0" type="s" srcbuf="i" srcoff="1"')
    _kind(text, "bounds", "runs past buffer 'i'")


def test_never_selected():
    text = direct2().replace('inplace="1" outofplace="1"', 'inplace="0" outofplace="0"')
    _kind(text, "limit", "never selects")


def test_channel_beyond_nchannels():
    """The runtime connects channels 0..nchannels-1 only: a step on another is bad input."""
    text = direct2().replace('chan="0"', 'chan="1"')
    with pytest.raises(XmlFormatError, match="chan 1 but nchannels=1"):
        check(text)


@pytest.mark.parametrize("path", [p for p in VECTORS if "r48ll" in p or "ar_hier" in p][:2], ids=os.path.basename)
def test_mutated_vectors_fail(path):
    """Changing one offset or one step type of a real file is always detected."""
    with open(path) as f:
        text = f.read()
    lines = text.split("\n")
    steps = [i for i, ln in enumerate(lines) if "<step" in ln and 'type="nop"' not in ln]
    caught = 0
    for i in steps[::23]:
        ln = lines[i]
        typ = re.search(r'type="(\w+)"', ln).group(1)
        field = "dstoff" if typ in ("r", "rcs") else "srcoff"  # the offset the step really uses
        new = re.sub(field + r'="(\d+)"', lambda m: f'{field}="{(int(m.group(1)) + 1) % 4}"', ln)
        mutated = "\n".join(lines[:i] + [new] + lines[i + 1:])
        if mutated == text:
            continue
        try:
            ok = check_xml_text(mutated, "m.xml").ok
        except XmlFormatError:
            ok = False
        caught += not ok
        assert not ok, f"mutation of line {i + 1} not caught: {new.strip()}"
    assert caught > 5


def test_too_many_nodes_for_the_runtime_parser():
    tbs = [(-1, -1, 0, [step(s, "nop", cnt=0, dep=(0, 0)) for s in range(63)]) for _ in range(66)]
    text = xml([tbs, [(-1, -1, 0, [])]])
    with pytest.raises(XmlFormatError, match="at most 4096"):
        check(text)


# ----------------------------------------------------------------------------------- cases mutation testing found
def _direct2_with_reader(gpu, dep, hasdep_at):
    """direct2 plus a second thread block on ``gpu`` that copies o[1] to scratch after waiting for
    ``dep`` of thread block 0 (whose step ``hasdep_at`` publishes). In place, o[1] is i[1], which
    thread block 0 sends at step 0 and overwrites at step 1."""
    gpus = []
    for g in range(2):
        tb0 = (1 - g, 1 - g, 0, [step(0, "s", ("i", 0), cnt=2, hasdep=int(hasdep_at == 0 and g == gpu)),
                                 step(1, "rrc", ("i", 0), ("o", 0), cnt=2, hasdep=int(hasdep_at == 1 and g == gpu))])
        tbs = [tb0]
        if g == gpu:
            tbs.append((-1, -1, 0, [step(0, "cpy", ("o", 1), ("s", 0), dep=dep)]))
        gpus.append(tbs)
    return xml(gpus)


@pytest.mark.parametrize("gpu", [0, 1])
def test_race_with_a_step_ordered_only_before_the_write(gpu):
    # waits for step 0 of tb 0 (a send) but not for step 1 (which writes o[1]): the read races with the
    # write whichever runs first (gpu 0: the read runs before the write; gpu 1: after it)
    r = _kind(_direct2_with_reader(gpu, (0, 0), 0), "race", "race", f"gpu {gpu} tb")
    assert r.gpu == gpu
    # waiting for the write itself orders the two: no race, and the file is right
    assert check(_direct2_with_reader(gpu, (0, 1), 1)).ok


def test_reduce_of_different_chunks_is_wrong_even_when_every_contribution_arrives():
    # each GPU sends chunk 1 first, then chunk 0, but reduces the first arrival into chunk 0: every output
    # chunk ends up with both ranks' contributions, of the wrong chunk
    steps = [step(0, "s", ("i", 1), cnt=1), step(1, "s", ("i", 0), cnt=1),
             step(2, "rrc", ("i", 0), ("o", 0), cnt=1), step(3, "rrc", ("i", 1), ("o", 1), cnt=1)]
    text = xml([[(1 - g, 1 - g, 0, steps)] for g in range(2)])
    _kind(text, "postcondition", "different chunks", "reduces chunk 1 into chunk 0")


def test_output_chunks_in_the_wrong_place_fail_the_chunk_label_postcondition():
    # a correct allreduce, then gpu 0 swaps its two output chunks through scratch: every chunk still holds
    # both contributions, but chunk 0's sum sits where chunk 1's belongs
    swap = [step(2, "cpy", ("o", 0), ("s", 0)), step(3, "cpy", ("o", 1), ("o", 0)), step(4, "cpy", ("s", 0), ("o", 1))]
    gpus = [[(1 - g, 1 - g, 0, [step(0, "s", ("i", 0), cnt=2), step(1, "rrc", ("i", 0), ("o", 0), cnt=2)]
              + (swap if g == 0 else []))] for g in range(2)]
    r = _kind(xml(gpus), "postcondition", "gpu 0 output chunk 0", "holds chunk 1, expected chunk 0")
    assert r.gpu == 0


def test_accesses_ordered_only_through_fifos_on_another_gpu_are_not_a_race():
    # gpu 0 tb 0 sends its input; gpu 1 reduces it in and sends the sums back; gpu 0 tb 1 receives them
    # over its input (in place). tb 1 never waits for tb 0 on gpu 0, but the FIFOs order the two accesses:
    # the per-GPU clock flags a candidate and the exact happens-before search must clear it
    gpus = [[(1, -1, 0, [step(0, "s", ("i", 0), cnt=2)]), (-1, 1, 0, [step(0, "r", ("i", 0), ("o", 0), cnt=2)])],
            [(0, 0, 0, [step(0, "rrc", ("i", 0), ("o", 0), cnt=2), step(1, "s", ("o", 0), cnt=2)])]]
    r = check(xml(gpus))
    assert r.ok, r.message


# exact reports and boundaries (mutation testing: survivors in check.py)
def _head(n, N, coll="allreduce", inplace=1, outofplace=1):
    return (f'<algo name="t" proto="Simple" nchannels="1" nchunksperloop="{N}" ngpus="{n}" coll="{coll}" '
            f'inplace="{inplace}" outofplace="{outofplace}" minBytes="0" maxBytes="0">')


def test_missing_contributions_are_listed_exactly_up_to_eight():
    # 10 GPUs that each copy their input to their output and nothing else: gpu 0 misses ranks 1..9
    text = xml([[(-1, -1, 0, [step(0, "cpy", ("i", 0), ("o", 0))])] for _ in range(10)],
               head=_head(10, 1, inplace=0), nchunks=1)
    r = _kind(text, "postcondition")
    assert r.message == ("FAIL gpu 0 output chunk 0 (out-of-place call): misses the contribution of rank(s) "
                         "1, 2, 3, 4, 5, 6, 7, 8")


def _alltoall2(gpu0_recv_type):
    """2-GPU alltoall, out of place: each GPU sends the other its block and keeps its own."""
    g0 = [step(0, "s", ("i", 1)), step(1, gpu0_recv_type, ("i", 0), ("o", 1)), step(2, "cpy", ("i", 0), ("o", 0))]
    g1 = [step(0, "s", ("i", 0)), step(1, "r", ("i", 0), ("o", 0)), step(2, "cpy", ("i", 1), ("o", 1))]
    return xml([[(1, 1, 0, g0)], [(0, 0, 0, g1)]], head=_head(2, 2, "alltoall", inplace=0))


def test_extra_contribution_of_a_higher_rank():
    # the mirror image: gpu 1 adds its own block 1 into rank 0's block 1, which it received
    g0 = [step(0, "s", ("i", 1)), step(1, "r", ("i", 0), ("o", 1)), step(2, "cpy", ("i", 0), ("o", 0))]
    g1 = [step(0, "s", ("i", 0)), step(1, "rrc", ("i", 1), ("o", 0)), step(2, "cpy", ("i", 1), ("o", 1))]
    r = _kind(xml([[(1, 1, 0, g0)], [(0, 0, 0, g1)]], head=_head(2, 2, "alltoall", inplace=0)), "postcondition")
    assert r.message == ("FAIL gpu 1 output chunk 0 (out-of-place call): holds the contribution of rank(s) 1 "
                         "it should not")


def test_shared_fifo_message_names_both_thread_blocks():
    text = xml([[(-1, -1, 0, [step(0, "cpy", ("i", 0), ("o", 0))]), (1, -1, 0, [step(0, "s", ("i", 0))]),
                 (1, -1, 0, [step(0, "s", ("i", 1))])],
                [(-1, 0, 0, [step(0, "r", ("i", 0), ("o", 0)), step(1, "r", ("i", 1), ("o", 1))])]])
    r = _kind(text, "fifo")
    assert "thread blocks 1 and 2 both have send=1 on channel 0" in r.message, r.message


def test_alltoall_postcondition_and_extra_contributions():
    assert check(_alltoall2("r")).ok
    # gpu 0 adds its own block 0 into what it received (rank 1's block 0): an extra contribution
    r = _kind(_alltoall2("rrc"), "postcondition")
    assert r.message == ("FAIL gpu 0 output chunk 1 (out-of-place call): holds the contribution of rank(s) 0 "
                         "it should not")


@pytest.mark.parametrize("alg", ["ring", "direct"])
@pytest.mark.parametrize("coll", ["reducescatter", "allgather"])
@pytest.mark.parametrize("n", [3, 4])
def test_emitted_reducescatter_and_allgather_pass_the_postcondition(alg, coll, n):
    from collsynth.backends.msccl import emit_xml
    from collsynth.synth.registry import build_schedule

    s = build_schedule(alg, n, coll)
    for per_loop in (None, 2 * s.nchunks):  # one and two chunks per rank block
        r = check(emit_xml(s, check=False, nchunksperloop=per_loop))
        assert r.ok, r.message


def test_shared_fifo_on_the_receiving_side_of_gpu_1():
    # gpu 1 has two thread blocks that both receive from gpu 0 on channel 0 (peer 0 is a peer, not "none")
    text = xml([[(1, -1, 0, [step(0, "s", ("i", 0)), step(1, "s", ("i", 1))])],
                [(-1, 0, 0, [step(0, "r", ("i", 0), ("o", 0))]), (-1, 0, 0, [step(0, "r", ("i", 1), ("o", 1))])]])
    r = _kind(text, "fifo", "share one FIFO")
    assert r.message.endswith(": thread blocks 0 and 1 both have recv=0 on channel 0; they would share one FIFO "
                              "(use another channel)") and (r.gpu, r.tb) == (1, 1), r.message


@pytest.mark.parametrize("sender_steps, recv_steps, needle", [
    (1, 0, "gpu 0 sends 1 time(s) to gpu 1 but gpu 1 receives 0 time(s) from gpu 0 (thread block 0:0)"),
    (0, 1, "gpu 0 sends 0 time(s) to gpu 1 but gpu 1 receives 1 time(s) from gpu 0 (thread block 1:0)"),
])
def test_fifo_counts_when_one_side_never_uses_the_connection(sender_steps, recv_steps, needle):
    g0 = [step(0, "s", ("i", 0))] * sender_steps or [step(0, "cpy", ("i", 0), ("o", 0))]
    g1 = [step(0, "r", ("i", 0), ("o", 0))] * recv_steps or [step(0, "cpy", ("i", 0), ("o", 0))]
    text = xml([[(1, -1, 0, g0)], [(-1, 0, 0, g1)]])
    r = _kind(text, "fifo")
    assert r.message == f"FAIL FIFO mismatch on channel 0: {needle}", r.message


def test_negative_offsets_and_zero_counts_are_refused():
    bad_off = direct2().replace('<step s="0" type="s" srcbuf="i" srcoff="0"', '<step s="0" type="s" srcbuf="i" '
                                'srcoff="-1"', 1)
    _kind(bad_off, "bounds", "srcoff=-1 cnt=2 runs past buffer 'i'")
    bad_dst = direct2().replace('type="rrc" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0"',
                                'type="rrc" srcbuf="i" srcoff="0" dstbuf="o" dstoff="-1"', 1)
    _kind(bad_dst, "bounds", "dstoff=-1 cnt=2 runs past buffer 'o'")
    zero = direct2().replace('cnt="2"', 'cnt="0"')
    _kind(zero, "limit", "cnt=0 on a 's' step moves nothing")


def test_thread_block_limit_is_exact():
    def tbs(k):
        return xml([[(-1, -1, 0, [step(0, "cpy", ("i", 0), ("o", 0))])] * k,
                    [(-1, -1, 0, [step(0, "cpy", ("i", 0), ("o", 0))])]], head=_head(2, 1, inplace=0), nchunks=1)

    assert check(tbs(64)).kind != "limit"
    _kind(tbs(65), "limit", "65 thread blocks; the executor runtime allows at most 64")


def test_report_is_frozen():
    import dataclasses

    r = check(direct2())
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.ok = False


def test_dependency_on_a_negative_step_is_met_at_once_not_a_crash():
    # found by the long fuzz run: depid=0 deps=-1 before tb 0 published anything raised IndexError (exit 3)
    text = xml([[(1, -1, 0, [step(0, "s", ("i", 0), cnt=2, hasdep=1)]),
                 (-1, 1, 0, [step(0, "rrc", ("i", 0), ("o", 0), cnt=2, dep=(0, -1))])],
                [(0, 0, 0, [step(0, "s", ("i", 0), cnt=2), step(1, "rrc", ("i", 0), ("o", 0), cnt=2)])]])
    r = check(text)
    assert r.kind in (None, "race", "dependency"), r.message
