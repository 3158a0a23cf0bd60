"""Tests for behaviour of backends/ that mutants of the sampled mutation run (docs/mutation.md) changed
with every other test still passing."""

from __future__ import annotations

import pytest

from collsynth.backends.msccl import check_xml_text

HEAD = ('<algo name="t" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="allreduce" inplace="1" '
        'outofplace="1" minBytes="0" maxBytes="0">')


def _direct2(srcoff: int = 0) -> str:
    """2-GPU allreduce of 2 chunks: swap both chunks and reduce; GPU 0 sends from ``srcoff`` (and declares
    an input buffer that holds it: the loader's check passes, the checker's must decide)."""
    out = [HEAD]
    for g in range(2):
        off = srcoff if g == 0 else 0
        out += [f'  <gpu id="{g}" i_chunks="{max(2, off + 2)}" o_chunks="2" s_chunks="0">',
                f'    <tb id="0" send="{1 - g}" recv="{1 - g}" chan="0">',
                f'      <step s="0" type="s" srcbuf="i" srcoff="{off}" dstbuf="o" dstoff="0" cnt="2" depid="-1" '
                'deps="-1" hasdep="0"/>',
                '      <step s="1" type="rrc" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="2" depid="-1" '
                'deps="-1" hasdep="0"/>',
                "    </tb>", "  </gpu>"]
    return "\n".join([*out, "</algo>"]) + "\n"


# ---------------------------------------------------------------------- msccl check
@pytest.mark.parametrize("off,kind", [(0, None), (32767, "bounds"), (32768, "limit")])
def test_msccl_offsets_up_to_int16_max_are_only_bounds_checked(off: int, kind: str | None) -> None:
    r = check_xml_text(_direct2(off), "t.xml")
    assert r.ok == (kind is None) and (kind is None or r.kind == kind), r.message
    if kind == "limit":
        assert "srcoff=32768 exceeds 32767" in r.message
