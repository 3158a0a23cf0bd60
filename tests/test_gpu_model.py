"""The GPU model a topology names (synth/topology/gpus.py): read from an NCCL dump's PCI device id or set
with --sms, written to and read from topology files, named by the presets, and used by the MSCCL++
emitter as the number of thread blocks a rank may have resident."""

from __future__ import annotations

import glob
import json
import os
import re

import pytest
from shared_paths import vectors

from collsynth.backends.mscclpp import emit_plan
from collsynth.backends.mscclpp.emit import fits, resident_limit
from collsynth.cli import main
from collsynth.errors import CollsynthError
from collsynth.synth.registry import build_schedule
from collsynth.synth.topology import make_topology, topology_from_dict
from collsynth.synth.topology.gpus import GpuModel, gpu_of_pci_device, gpu_of_spec
from collsynth.synth.topology_import import dumps_topology, import_topology
from collsynth.synth.verify import record_topology

XML = vectors("topologies", "nccl-xml")
SMI = vectors("topologies", "smi")
# file -> (name, SMs) the PCI device id gives; the skeleton has no <gpu> and is refused on import
EXPECTED = {
    "aliyun-simai-8xa100-sxm4-80g-5bond-nic.xml": ("A100 SXM4 80GB", 108),
    "nccl-issue2397-2xa100-pcie-roce-gin-attrs.xml": ("A100 PCIe 80GB", 108),
    "nersc-perlmutter-a100-4x-direct-nvlink.xml": ("A100 SXM4 40GB", 108),
    "vastai-hgx-b200-8x-container-hidden-nvswitch.xml": ("B200", 148),
    "vastai-hgx-h200-8x-container.xml": ("H200 SXM 141GB", 132),
}


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_every_dump_with_a_device_id_names_its_gpu_and_the_file_keeps_it(tmp_path):
    dumps = {os.path.basename(p) for p in glob.glob(os.path.join(XML, "*.xml"))} - {"azure-ndv5-topo.xml"}
    assert dumps == set(EXPECTED)
    for name, (model, sms) in EXPECTED.items():
        res = import_topology(os.path.join(XML, name), nodes=2, fabric="rail")
        assert res.topology["gpu"] == {"name": model, "sms": sms}
        assert res.report()["gpu"] == {"name": model, "sms": sms}
        assert not any("GPU model" in a for a in res.assumptions)
        path = tmp_path / f"{name}.json"
        path.write_text(dumps_topology(res.topology))
        topo = make_topology(str(path), res.topology["gpus"])
        assert topo.gpu == GpuModel(model, sms) and topo.summary()["gpu"] == {"name": model, "sms": sms}


def test_a_matrix_names_no_gpu_until_sms_is_given():
    path = os.path.join(SMI, "vastai-hgx-h200-8x-container.txt")
    res = import_topology(path, sm=90)
    assert "gpu" not in res.topology and res.model.gpu_model is None
    assert any(a.startswith("GPU model not named by the file") and "--sms" in a for a in res.assumptions)
    res = import_topology(path, sm=90, sms=132)
    assert res.topology["gpu"] == {"sms": 132}
    assert not any("GPU model" in a for a in res.assumptions)
    assert list(res.topology)[-2:] == ["gpu", "links"]


def test_sms_replaces_what_the_dump_says_and_is_checked():
    h200 = os.path.join(XML, "vastai-hgx-h200-8x-container.xml")
    assert import_topology(h200, sms=132).topology["gpu"] == {"name": "H200 SXM 141GB", "sms": 132}
    res = import_topology(h200, sms=100)
    assert res.topology["gpu"] == {"sms": 100}
    assert any("--sms 100 replaces the 132 SMs of the H200 SXM 141GB" in a for a in res.assumptions)
    for bad in (0, -1, 2000, True):
        with pytest.raises(CollsynthError, match="--sms must be a GPU's SM count"):
            import_topology(h200, sms=bad)


def test_an_unknown_device_id_is_said(tmp_path):
    with open(os.path.join(XML, "vastai-hgx-h200-8x-container.xml")) as f:
        text = f.read().replace('device="0x2335"', 'device="0x9999"')
    path = tmp_path / "odd.xml"
    path.write_text(text)
    res = import_topology(str(path))
    assert "gpu" not in res.topology
    assert any("GPU model not known from its PCI device id (0x10de:0x9999)" in a for a in res.assumptions)


@pytest.mark.parametrize("gpu, msg", [
    ({"sms": 0}, "SM count, an integer 1..1024"),
    ({"sms": True}, "SM count"),
    ({"sms": "132"}, "SM count"),
    ({"name": "H100"}, "\"gpu\" must be an object"),
    ({"sms": 132, "cores": 1}, "\"gpu\" must be an object"),
    ({"name": "", "sms": 132}, "\"name\" must be a non-empty string"),
    ("H100", "\"gpu\" must be an object"),
])
def test_a_file_with_a_bad_gpu_is_one_line_naming_it(gpu, msg):
    d = {"gpus": 2, "links": [{"src": 0, "dst": 1}], "gpu": gpu}
    with pytest.raises(CollsynthError) as e:
        topology_from_dict(d)
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_presets_and_specs():
    assert make_topology("dgx1", 8).gpu == GpuModel("Tesla V100 SXM2", 80)
    for name, n in (("dgx-h100", 8), ("h100-cluster", 16)):
        t = make_topology(name, n)
        assert t.gpu == GpuModel("H100 SXM5", 132) and gpu_of_spec(t.spec) == t.gpu
    assert make_topology("h100-cluster:fabric=fat-tree", 16).gpu == GpuModel("H100 SXM5", 132)
    for name in ("nvswitch", "ring", "gb200-nvl72"):
        assert make_topology(name, 72).gpu is None
    assert gpu_of_spec({"file": {"gpu": {"sms": 96}}}) == GpuModel(None, 96)
    for spec in (None, "h100-cluster", {"cluster": {"nodes": 2}}, {"file": {"gpu": {"sms": -3}}}, {"file": 3}):
        assert gpu_of_spec(spec) is None
    assert gpu_of_pci_device("0x10de", "0x2330") == GpuModel("H100 SXM5 80GB", 132)
    assert gpu_of_pci_device("0x1002", "0x2330") is None and gpu_of_pci_device("0x10de", "zz") is None


def test_the_plan_limit_follows_the_gpu():
    """A V100 (dgx1) has 80 SMs: a plan that an A100 could hold resident (108) would hang there."""
    s = build_schedule("stragglar", 8, pipeline=4)
    assert resident_limit(s)[0] == 108
    assert resident_limit(record_topology(s, make_topology("dgx1", 8))) == (
        80, "80 SMs of the Tesla V100 SXM2 its topology names")
    assert resident_limit(s, 96) == (96, "--sms 96")
    # the fit hint rebuilds the family under the same limit
    with pytest.raises(CollsynthError) as e:
        emit_plan(build_schedule("stragglar", 4, pipeline=300), sms=80)
    msg = str(e.value)
    assert "at most 80 can be resident at once" in msg and "--sms 80" in msg
    k = int(msg.rsplit("the largest --pipeline that fits is ", 1)[1])
    assert fits(build_schedule("stragglar", 4, pipeline=k), sms=80)[0]
    assert not fits(build_schedule("stragglar", 4, pipeline=k + 1), sms=80)[0]
    assert fits(build_schedule("stragglar", 4, pipeline=k + 1))[0]  # an A100's 108 hold it


def test_cli_sms(tmp_path, capsys):
    sched = tmp_path / "s.json"
    assert run(capsys, "synth", "-a", "stragglar", "-n", "4", "--pipeline", "330", "-o", str(sched))[0] == 0
    code, _, err = run(capsys, "emit", str(sched), "--format", "mscclpp-plan", "-o", str(tmp_path / "a.json"))
    assert code == 2 and "108 SMs of an A100, assumed where neither --sms nor" in err
    need = int(re.search(r"needs (\d+) thread blocks", err).group(1))
    assert need > 108
    code, _, err = run(capsys, "emit", str(sched), "--format", "mscclpp-plan", "--sms", str(need - 1),
                       "-o", str(tmp_path / "b.json"))
    assert code == 2 and f"at most {need - 1} can be resident" in err and not (tmp_path / "b.json").exists()
    out = tmp_path / "c.json"
    code, _, err = run(capsys, "emit", str(sched), "--format", "mscclpp-plan", "--sms", str(need), "-o", str(out))
    assert code == 0, err
    assert run(capsys, "verify", str(out))[0] == 0
    for bad in ("0", "x", "99999"):
        code, _, err = run(capsys, "emit", str(sched), "--format", "mscclpp-plan", "--sms", bad,
                           "-o", str(tmp_path / "d.json"))
        assert code == 2 and err.count("\n") == 1 and "--sms" in err


def test_cli_import_and_show_name_the_gpu(tmp_path, capsys):
    out = tmp_path / "h200.json"
    code, text, _ = run(capsys, "topology", "import", os.path.join(XML, "vastai-hgx-h200-8x-container.xml"),
                        "-o", str(out))
    assert code == 0 and "8 GPUs (sm 90; H200 SXM 141GB, 132 SMs)" in text.splitlines()[0]
    assert json.loads(out.read_text())["gpu"] == {"name": "H200 SXM 141GB", "sms": 132}
    code, text, _ = run(capsys, "topology", "show", str(out))
    assert code == 0 and "GPU model: H200 SXM 141GB, 132 SMs" in text
    code, text, _ = run(capsys, "topology", "show", "nvswitch", "-n", "4", "--json")
    assert code == 0 and json.loads(text)["gpu"] is None
