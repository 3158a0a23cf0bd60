"""`collsynth topology import`: malformed NCCL XML and `nvidia-smi topo -m` input is refused with one line
naming the element, row or cell and what to change (CLI: exit 2, one line on stderr, no output file).

The inputs are built here: a small NCCL dump (``node_xml``) and a small matrix (``matrix``), each well
formed (checked first), then broken one way per case."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from shared_paths import vectors

from collsynth.cli import main
from collsynth.errors import CollsynthError
from collsynth.synth.topology_import import ImportResult, import_topology

BUSIDS = ("0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0")
SWITCH = ("fffffff:ff:ff.0", "18", "0x068000")  # a hidden NVSwitch: (target, count, tclass)
CPU = '<cpu numaid="0" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">'


# ---------------------------------------------------------------------------- builders
def pci_gpu(busid: str, rank: int, links: list[tuple[str, str, str]], width: str = "16") -> str:
    """One GPU's ``<pci>`` with its ``<gpu>`` and ``<nvlink target count tclass>`` children."""
    nv = "".join(f'\n        <nvlink target="{t}" count="{c}" tclass="{k}"/>' for t, c, k in links)
    return (f'    <pci busid="{busid}" class="0x030200" vendor="0x10de" device="0x2330" '
            f'link_speed="32.0 GT/s PCIe" link_width="{width}">\n'
            f'      <gpu dev="{rank}" sm="90" rank="{rank}" gdr="1">{nv}\n      </gpu>\n    </pci>\n')


def node_xml(*pcis: str) -> str:
    """An NCCL dump of one CPU holding ``pcis`` (default: two GPUs on a hidden NVSwitch)."""
    body = "".join(pcis) or pci_gpu(BUSIDS[0], 0, [SWITCH]) + pci_gpu(BUSIDS[1], 1, [SWITCH])
    return f'<system version="1">\n  {CPU}\n{body}  </cpu>\n</system>\n'


AFFINITY = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")


def matrix(n: int = 4, nv: Callable[[int, int], str] = lambda a, b: "NV4", nics: int = 2) -> str:
    """Tab-separated `nvidia-smi topo -m` output as newer drivers print it: n GPUs (cell of GPUs a < b:
    ``nv(a, b)``), NICs NIC0.. (NIC k is PIX to GPU k, NODE to the rest), the affinity columns (GPU rows
    with the extra empty field before GPU NUMA ID, NIC rows padded) and the legends."""
    devs = [f"GPU{i}" for i in range(n)] + [f"NIC{k}" for k in range(nics)]
    lines = ["\t" + "\t".join(devs + list(AFFINITY))]
    for a, da in enumerate(devs):
        cells = []
        for b in range(len(devs)):
            lo, hi = min(a, b), max(a, b)
            cells.append(" X " if a == b else nv(lo, hi) if hi < n else "PIX" if hi - n == lo else "NODE")
        tail = ["0-15", "0", "", "N/A"] if a < n else ["", "", "", ""]
        lines.append("\t".join([da, *cells, *tail]))
    legend = ["", "Legend:", "", "  X    = Self", "  NV#  = Connection traversing a bonded set of # NVLinks", "",
              "NIC Legend:", ""] + [f"  NIC{k}: mlx5_{k}" for k in range(nics)]
    return "\n".join(lines + legend) + "\n"


def set_cell(text: str, row: str, col: str, value: str) -> str:
    """``text`` (a tab matrix) with the cell of row ``row`` and column ``col`` replaced by ``value``."""
    lines = text.split("\n")
    k = lines[0].split("\t").index(col)
    return "\n".join("\t".join([*c[:k], value, *c[k + 1:]]) if c[0] == row else ln
                     for ln, c in ((ln, ln.split("\t")) for ln in lines))


def set_pair(text: str, a: str, b: str, value: str) -> str:
    """Both cells of the pair a, b set to ``value`` (the matrix stays symmetric)."""
    return set_cell(set_cell(text, a, b, value), b, a, value)


def with_row(text: str, label: str, edit: Callable[[list[str]], list[str]]) -> str:
    """``text`` with row ``label``'s tab fields (label first) replaced by ``edit`` of them."""
    return "\n".join("\t".join(edit(ln.split("\t"))) if ln.split("\t")[0] == label else ln
                     for ln in text.split("\n"))


def imported(tmp_path: Path, text: str, name: str = "node.xml") -> ImportResult:
    """``import_topology`` of ``text`` written to ``tmp_path / name``."""
    p = tmp_path / name
    p.write_text(text)
    return import_topology(str(p))


def refused(tmp_path: Path, text: str, name: str = "bad.xml") -> str:
    """The message (without the file name) that refuses ``text``; it must be one line."""
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(CollsynthError) as e:
        import_topology(str(p))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"topology file {p}: "), msg
    return msg[len(f"topology file {p}: "):]


def run_import(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, name: str) -> tuple[int, str, Path]:
    """`collsynth topology import NAME -o out.json`: (exit code, stderr, the output path)."""
    src, out = tmp_path / name, tmp_path / "out.json"
    src.write_text(text)
    code = main(["topology", "import", str(src), "-o", str(out)])
    return code, capsys.readouterr().err, out


def test_the_builders_give_well_formed_input(tmp_path: Path) -> None:
    assert imported(tmp_path, node_xml()).model.switch_links == {0: 18, 1: 18}
    res = imported(tmp_path, matrix(), "m.txt")
    assert res.model.direct == {(a, b): 4 for a in range(4) for b in range(a + 1, 4)}
    assert [n.gpus for n in res.model.nics] == [[0, 2], [1, 3]]
    assert imported(tmp_path, matrix(nv=lambda a, b: "NV18"), "s.txt").model.switch_links == {g: 18 for g in range(4)}


# ---------------------------------------------------------------------------- NCCL XML: one PCI device twice
@pytest.mark.parametrize("second, shown", [
    ("0000:2a:00.0", ""),
    ("0000:2a:00.0 ", " (the same device as busid='0000:2a:00.0')"),  # spaces: _busid strips them
    ("0000:2A:00.0", " (the same device as busid='0000:2a:00.0')"),
    ("00000000:2a:00.0", " (the same device as busid='0000:2a:00.0')"),  # nvidia-smi's 8-digit domain
], ids=["same", "spaces", "upper-case", "long-domain"])
def test_two_gpus_with_one_busid(tmp_path: Path, second: str, shown: str) -> None:
    text = node_xml(pci_gpu("0000:2a:00.0", 0, [SWITCH]), pci_gpu(second, 1, [SWITCH]))
    assert refused(tmp_path, text) == (f"<pci busid={second!r}> appears twice{shown}; each PCI device must appear "
                                       "once: remove the duplicate or fix its busid")


def test_a_bridge_repeating_a_gpus_busid(tmp_path: Path) -> None:
    bridge = f'    <pci busid="{BUSIDS[1]}" class="0x060400" link_speed="32.0 GT/s PCIe" link_width="16">\n'
    text = node_xml(bridge + pci_gpu(BUSIDS[1], 0, [SWITCH]) + "    </pci>\n", pci_gpu(BUSIDS[2], 1, [SWITCH]))
    assert f"<pci busid='{BUSIDS[1]}'> appears twice; each PCI device must appear once" in refused(tmp_path, text)


def test_two_gpus_in_one_pci(tmp_path: Path) -> None:
    one = pci_gpu(BUSIDS[0], 0, [SWITCH])
    text = node_xml(one.replace("</gpu>", '</gpu>\n      <gpu dev="1" sm="90" rank="1" gdr="1"/>'))
    assert refused(tmp_path, text) == (f"<pci busid='{BUSIDS[0]}'> holds two <gpu> elements (GPUs 0 and 1); each "
                                       "PCI device must appear once: give each GPU its own <pci>")


# ---------------------------------------------------------------------------- NCCL XML: link_width
@pytest.mark.parametrize("width", ["64", "3", "5", "1000", "24", "99999999999999999999"])
def test_link_width_that_is_no_lane_count(tmp_path: Path, width: str) -> None:
    text = node_xml(pci_gpu(BUSIDS[0], 0, [SWITCH], width=width), pci_gpu(BUSIDS[1], 1, [SWITCH]))
    assert refused(tmp_path, text) == (f"<pci busid='{BUSIDS[0]}'> has link_width={width!r}; a PCIe link has 1, 2, "
                                       "4, 8, 12, 16 or 32 lanes (0: unknown, read as 16): fix the width")


def test_negative_link_width_still_refused(tmp_path: Path) -> None:
    text = node_xml(pci_gpu(BUSIDS[0], 0, [SWITCH], width="-8"), pci_gpu(BUSIDS[1], 1, [SWITCH]))
    assert f"<pci busid='{BUSIDS[0]}'> has link_width='-8'; expected the lane count" in refused(tmp_path, text)


@pytest.mark.parametrize("width, lanes", [("0", 16), ("", 16), ("1", 1), ("2", 2), ("4", 4), ("8", 8), ("12", 12),
                                          ("16", 16), ("32", 32), ("016", 16)])
def test_lane_counts_and_0_import(tmp_path: Path, width: str, lanes: int) -> None:
    text = node_xml(pci_gpu(BUSIDS[0], 0, [SWITCH], width=width), pci_gpu(BUSIDS[1], 1, [SWITCH]))
    assert imported(tmp_path, text).model.gpus[0].pcie_bw == pytest.approx(lanes * 240 / 80 * 1e9)  # 32 GT/s


# ---------------------------------------------------------------------------- NCCL XML: NVLinks to the GPU itself
def test_switch_class_link_to_the_gpu_itself(tmp_path: Path) -> None:
    text = node_xml(pci_gpu(BUSIDS[0], 0, [(BUSIDS[0], "18", "0x068000")]), pci_gpu(BUSIDS[1], 1, [SWITCH]))
    assert refused(tmp_path, text) == (f"<nvlink> of GPU 0 ({BUSIDS[0]}) has target='{BUSIDS[0]}', which is the GPU "
                                       "itself, but tclass='0x068000' (an NVSwitch); give the NVSwitch's bus id "
                                       "(fffffff:ff:ff.0 for a hidden one)")


def test_gpu_class_link_to_the_gpu_itself_is_ignored_and_said(tmp_path: Path) -> None:
    """Kept: Azure's NC A100 v4 topology file (azhpc-images topology/ncv4-topo.xml) has such a link on every
    GPU (vectors/topologies/SOURCES.md, "Direct GPU links"), and NCCL reads that file."""
    text = node_xml(*(pci_gpu(b, r, [(b, "12", "0x030200")], width="0") for r, b in enumerate(BUSIDS)))
    res = imported(tmp_path, text)
    assert not res.model.direct and not res.model.switch_links
    assert f"GPU 0's NVLink points at its own bus id {BUSIDS[0]}: ignored" in res.assumptions


# ---------------------------------------------------------------------------- nvidia-smi matrix
SMI_REFUSED: dict[str, tuple[Callable[[str], str], str]] = {
    "row-too-long": (lambda t: with_row(t, "GPU1", lambda c: c[:3] + ["NV4"] + c[3:]),
                     "row GPU1 has 11 cells; the header has 6 device columns and 3 more (CPU Affinity, NUMA Affinity, "
                     "GPU NUMA ID): give each row one cell per column"),
    "nic-row-too-long": (lambda t: with_row(t, "NIC0", lambda c: c + ["PIX"]),
                         "row NIC0 has 11 cells; the header has 6 device columns and 3 more"),
    "gpu-row-without-affinity": (lambda t: with_row(t, "GPU2", lambda c: c[:7]),
                                 "row GPU2 has 6 cells; the header has 6 device columns and 3 more"),
    "row-one-device-cell-short": (lambda t: with_row(t, "GPU1", lambda c: c[:3] + c[4:]),
                                  "row GPU1, column NIC1: cell '0-15' looks like an affinity value, so the row has "
                                  "fewer device cells than the header has device columns; give one cell per column"),
    "row-twice": (lambda t: with_row(t, "GPU1", lambda c: c + ["\n" + "\t".join(c)]),
                  "row GPU1 appears twice; each device has one row: remove the duplicate"),
    "no-gpu1": (lambda t: matrix(n=3).replace("GPU2", "GPU3").replace("GPU1", "GPU2"),  # GPU0, GPU2, GPU3
                "GPU columns are GPU0, GPU2, GPU3; expected GPU0..GPU<n-1>"),
    "header-gpu1-twice": (lambda t: with_row(t, "", lambda c: [x.replace("GPU2", "GPU1") for x in c]),
                          "the header names GPU1 twice; each column must be one device"),
    "asymmetric-nv-sys": (lambda t: set_cell(t, "GPU2", "GPU1", "SYS"),
                          "row GPU1, column GPU2 is NV4 but row GPU2, column GPU1 is SYS; the matrix is symmetric: "
                          "fix one of the two cells"),
    "asymmetric-nv-count": (lambda t: set_cell(t, "GPU0", "GPU3", "NV2"),
                            "row GPU0, column GPU3 is NV2 but row GPU3, column GPU0 is NV4; the matrix is symmetric"),
    "asymmetric-nic": (lambda t: set_cell(t, "NIC1", "GPU1", "SYS"),
                       "row GPU1, column NIC1 is PIX but row NIC1, column GPU1 is SYS; the matrix is symmetric"),
    "nv0": (lambda t: set_pair(t, "GPU0", "GPU1", "NV0"),
            "row GPU0, column GPU1: cell 'NV0'; NV<k> is k bonded NVLinks, k from 1 to 36: fix the count"),
    "nv37": (lambda t: set_pair(t, "GPU0", "GPU1", "NV37"), "row GPU0, column GPU1: cell 'NV37'; NV<k> is k bonded"),
    "nv-huge": (lambda t: set_pair(t, "GPU0", "GPU1", "NV99999999999"), "cell 'NV99999999999'; NV<k> is k bonded"),
    "nv-5000-digits": (lambda t: set_pair(t, "GPU0", "GPU1", "NV" + "9" * 5000), "NV<k> is k bonded NVLinks"),
    "nv-to-a-nic": (lambda t: set_pair(t, "GPU0", "NIC0", "NV4"),
                    "row GPU0, column NIC0: cell 'NV4'; NVLinks join GPUs only: a NIC's cell is its PCIe distance"),
    "direct-over-36": (lambda t: set_pair(set_pair(set_pair(t, "GPU0", "GPU1", "NV13"), "GPU0", "GPU2", "NV13"),
                                          "GPU0", "GPU3", "NV13"),
                       "the NV<k> cells of GPU0 add up to 39 direct NVLinks; a GPU has at most 36: behind an NVSwitch "
                       "every GPU pair shows the same NV<k>, fix the cells that differ"),
}


@pytest.mark.parametrize("case", SMI_REFUSED)
def test_malformed_matrix(tmp_path: Path, case: str) -> None:
    edit, msg = SMI_REFUSED[case]
    base = matrix(nv=lambda a, b: "NV12") if case == "direct-over-36" else matrix()
    assert msg in refused(tmp_path, edit(base), "bad.txt")


# refused before this file's changes too; kept here so the whole list of bad matrices is in one place
@pytest.mark.parametrize("edit, msg", [
    (lambda t: set_cell(t, "GPU1", "GPU1", "NV4"), "row GPU1, column GPU1: cell 'NV4'; X belongs on the diagonal"),
    (lambda t: set_pair(t, "GPU1", "GPU2", "NV"), "row GPU1, column GPU2: cell 'NV' is not X, NV<k>, PIX"),
    (lambda t: set_pair(t, "GPU1", "GPU2", "NVX"), "cell 'NVX' is not X, NV<k>"),
    (lambda t: set_pair(t, "GPU1", "GPU2", "FOO"), "cell 'FOO' is not X, NV<k>"),
    (lambda t: with_row(t, "GPU1", lambda c: []), "the matrix has no row for GPU1"),
    (lambda t: with_row(t, "GPU1", lambda c: ["GPU7", *c[1:]]), "row 'GPU7' is not a device of the header"),
], ids=["diagonal-not-x", "nv-without-k", "nvx", "foo", "missing-row", "unknown-row"])
def test_malformed_matrix_already_refused(tmp_path: Path, edit: Callable[[str], str], msg: str) -> None:
    assert msg in refused(tmp_path, edit(matrix()), "bad.txt")


def test_matrix_repairs_still_apply(tmp_path: Path) -> None:
    """Space-aligned copies and the ``PH0-15`` cell (PHB and the CPU affinity run together) still import."""
    text = matrix()
    assert imported(tmp_path, text.replace("\t", "  "), "spaces.txt").model.direct == \
        imported(tmp_path, text, "tabs.txt").model.direct
    phb = set_pair(set_pair(text, "GPU0", "NIC1", "PHB"), "GPU1", "NIC1", "PHB")
    phb = with_row(phb, "GPU1", lambda c: c[:6] + ["PH" + c[7]] + c[8:])
    res = imported(tmp_path, phb, "ph.txt")
    assert any("'PH0-15' read as PHB" in a for a in res.assumptions)
    assert [n.gpus for n in res.model.nics] == [[0, 2], [1, 3]]


# ---------------------------------------------------------------------------- the command line
@pytest.mark.parametrize("name, text, msg", [
    ("bad.xml", node_xml(pci_gpu(BUSIDS[0], 0, [SWITCH]), pci_gpu(BUSIDS[0], 1, [SWITCH])),
     f"<pci busid='{BUSIDS[0]}'> appears twice; each PCI device must appear once"),
    ("bad.xml", node_xml(pci_gpu(BUSIDS[0], 0, [SWITCH], width="64"), pci_gpu(BUSIDS[1], 1, [SWITCH])),
     "has link_width='64'; a PCIe link has 1, 2, 4, 8, 12, 16 or 32 lanes"),
    ("bad.txt", set_cell(matrix(), "GPU2", "GPU1", "SYS"), "the matrix is symmetric"),
    ("bad.txt", set_pair(matrix(), "GPU0", "GPU1", "NV37"), "k from 1 to 36"),
], ids=["xml-busid-twice", "xml-width-64", "smi-asymmetric", "smi-nv37"])
def test_cli_exit_2_one_line_no_output(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str,
                                       msg: str) -> None:
    code, err, out = run_import(tmp_path, capsys, text, name)
    assert code == 2 and err.count("\n") == 1 and msg in err, err
    assert re.match(r"collsynth: error: topology file \S+: ", err), err
    assert not out.exists()


ALIYUN = Path(vectors("topologies", "nccl-xml", "aliyun-simai-8xa100-sxm4-80g-5bond-nic.xml"))


@pytest.mark.parametrize("speed", ["9" * 40, "100000001"])
def test_a_nic_faster_than_any_is_refused_at_import(tmp_path: Path, speed: str) -> None:
    """A <net speed> over MAX_NIC_MBPS (100 Tb/s) was imported into a file that `topology show` then refused
    (bandwidth 1.25e+45 bytes/s out of range): found by putting a 40-digit number in every attribute."""
    text = ALIYUN.read_text().replace('speed="200000"', f'speed="{speed}"', 1)
    msg = refused(tmp_path, text)
    assert "<net name='mlx5_bond_0'> has speed=" in msg and "over 100 Tb/s, more than any NIC" in msg
    assert imported(tmp_path, ALIYUN.read_text().replace('speed="200000"', 'speed="100000000"', 1)).topology


def test_nic_speed_option_over_100_tbps_is_refused() -> None:
    from collsynth.synth.topology_import import parse_nic_speed

    assert parse_nic_speed("100Tb/s") == 100e12 / 8
    with pytest.raises(CollsynthError, match=r"^NIC speed '101Tb/s' is over 100 Tb/s, more than any NIC"):
        parse_nic_speed("101Tb/s")


def test_nic_speed_option_under_1_mbps_is_refused() -> None:
    """--nic-speed 0.000001b/s wrote NIC links of 1.25e-07 B/s, which the topology loader then refused."""
    from collsynth.synth.topology_import import parse_nic_speed

    assert parse_nic_speed("1Mb/s") == 1e6 / 8
    with pytest.raises(CollsynthError, match=r"^NIC speed '0.000001b/s' is under 1 Mb/s"):
        parse_nic_speed("0.000001b/s")


def test_a_cluster_too_large_for_memory_is_refused_before_it_is_built(capsys: pytest.CaptureFixture[str],
                                                                      tmp_path: Path) -> None:
    """`topology import --nodes 100000000` ran for minutes toward 1 TB; the links are counted first and the
    budget names the largest --nodes that fits (the vector H200 node: 18 links per node with the fabric's)."""
    out = tmp_path / "out.json"
    src = vectors("topologies", "nccl-xml", "vastai-hgx-h200-8x-container.xml")
    code = main(["--max-memory", "1MiB", "topology", "import", src, "-o", str(out), "--nodes", "100000000",
                 "--fabric", "rail"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and not out.exists()
    assert "importing 100000000 nodes of 8 GPUs (1800000000 links) needs about" in err
    fit = int(re.search(r"the largest that fits is --nodes (\d+)", err).group(1))  # type: ignore[union-attr]
    assert fit * 18 * 700 <= 2**20 < (fit + 1) * 18 * 700
    assert main(["--max-memory", "1MiB", "topology", "import", src, "-o", str(out), "--nodes", str(fit),
                 "--fabric", "rail"]) == 0
    capsys.readouterr()
    assert main(["topology", "show", str(out)]) == 0
