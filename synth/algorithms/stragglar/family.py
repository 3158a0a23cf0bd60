"""Families of straggler-aware schedules: StragglAR's, one verified schedule per possible straggler rank, and
clusterstraggler's (``ClusterFamily``), one per late GPU and per late node, with their manifests on disk, so
that a runtime can pick a schedule once it knows who is late."""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from collsynth import budget, progress
from collsynth.errors import CollsynthError, ScheduleFileError
from collsynth.fileio import check_outdir, json_loads, read_bytes, read_text, write_tree
from collsynth.synth.algorithms.layout import node_grid
from collsynth.synth.algorithms.stragglar.build import build
from collsynth.synth.algorithms.stragglar.cluster import auto_pipeline
from collsynth.synth.ir import Schedule
from collsynth.synth.registry import build_schedule, work
from collsynth.synth.verify import check
from collsynth.units import rank_ranges

MANIFEST = "manifest.json"  # the manifest of a family folder (write_family, write_cluster_family)


def build_family(n: int, **params: Any) -> dict[int, Schedule]:
    """One verified schedule per possible straggler rank (a runtime picks one once it knows)."""
    if "straggler" in params:
        raise CollsynthError("build_family builds every straggler: do not pass straggler")
    return {r: check(build(n, straggler=r, **params)) for r in range(n)}


def write_family(n: int, outdir: str, force: bool = False, **params: Any) -> dict[str, Any]:
    """Write stragglar_n{N}_s{R}.json for every rank R plus manifest.json into ``outdir``, all or
    nothing (fileio.write_tree): everything is built and verified first. A non-empty existing
    ``outdir`` is refused unless ``force``, which replaces it. Returns the manifest."""
    check_outdir(outdir, force)
    family = build_family(n, **params)
    entries = []
    texts: dict[str, str | bytes] = {}
    for r, s in family.items():
        name = f"stragglar_n{n}_s{r}.json"
        text = s.to_json()
        texts[name] = text
        rounds = s.meta["phase2_rounds"]
        assert isinstance(rounds, int)  # build() records the completion collective's round count
        entries.append({"straggler": r, "file": name, "sha256": hashlib.sha256(text.encode()).hexdigest(),
                        "rounds": rounds, "steps": s.nsteps})
    first = family[0].meta
    manifest = {"algorithm": "stragglar", "n": n, "phase1": first["phase1"], "pipeline": first["pipeline"],
                "phase2_rounds": first["phase2_rounds"], "schedules": entries}
    texts[MANIFEST] = json.dumps(manifest, indent=1) + "\n"
    write_tree(outdir, texts, force=force)
    return manifest


JSON_BYTES_PER_TRANSFER = 20  # a schedule file's bytes per transfer (measured 17.8 for clusterstraggler at 128 GPUs)
CLUSTER_DELAY_S = 1.0  # the late ranks' delay the family's schedules are built for (long: hides the work before it)


class ClusterFamily:
    """Verified clusterstraggler schedules (issue 15 point 5) for every late GPU and every late node of a
    topology with nodes, keyed by the late set (a frozenset of ranks), so that a runtime can pick one once
    it knows who is late (backends/torch/straggler.py).

    Built lazily: ``get(late)`` builds, verifies and caches the schedule the first time a late set is asked
    for (n + N schedules would take long to build up front on a large cluster); ``build_all()`` builds every
    one up front. Each schedule is ``build_schedule("clusterstraggler", n, topology=..., arrivals={late
    ranks: CLUSTER_DELAY_S}, **params)``, whose form (``meta["form"]``, ``meta["late"]``) must match the
    late set it is filed under. ``params``: clusterstraggler's ``size`` and ``pipeline``.

    In one NVLink domain (a topology without nodes of two or more GPUs: nvswitch, dgx-h100, gb200-nvl72) the
    family serves each late GPU alone (``nodes`` is empty) with what clusterstraggler returns for it there,
    the fastest after the arrival at ``size``: domain.py's broadcast form (gb200-nvl72 at 64 MiB), the flat
    form of multistraggler (StragglAR's schedule; 1 GiB) or a synchronous schedule (small sizes: twoshot on
    nvswitch at 1 MiB); ``form_of`` names which.
    """

    def __init__(self, topology: Any, **params: Any) -> None:
        n = int(topology.nranks)
        grid = node_grid(topology, n)
        unknown = sorted(set(params) - {"size", "pipeline"})
        if unknown:
            raise CollsynthError(f"ClusterFamily takes size and pipeline, not {unknown[0]!r}")
        self.topology, self.n, self.params = topology, n, dict(params)
        self.one_domain = bool(grid.shape[0] < 2 or grid.shape[1] < 2)  # as choose.one_domain_late decides
        self.nodes = () if self.one_domain else tuple(frozenset(int(x) for x in row) for row in grid)
        self.gpus_per_node = n if self.one_domain else int(grid.shape[1])
        self._cache: dict[frozenset[int], Schedule] = {}

    def late_sets(self) -> list[frozenset[int]]:
        """Every late set the family serves: each rank alone, then each node's ranks."""
        return [frozenset((r,)) for r in range(self.n)] + list(self.nodes)

    def serves(self, late: frozenset[int]) -> bool:
        """Whether ``late`` is one GPU or exactly one node's GPUs."""
        return (len(late) == 1 and next(iter(late)) in range(self.n)) or late in self.nodes

    def get(self, late: Any) -> Schedule | None:
        """The verified schedule for late set ``late`` (ranks), or None when the family has no form for it."""
        key = frozenset(int(r) for r in late)
        if not self.serves(key):
            return None
        if key not in self._cache:
            self._cache[key] = self.build(key)
        return self._cache[key]

    def build(self, late: frozenset[int]) -> Schedule:
        """Build and verify the member of the served late set ``late`` without caching it (``get`` caches)."""
        s = check(build_schedule("clusterstraggler", self.n, **self.member_params(late)))
        if self.one_domain:  # whatever clusterstraggler finds fastest there
            return s
        form, meta_late = "gpu" if len(late) == 1 else "node", s.meta.get("late")
        if s.meta.get("form") != form or not isinstance(meta_late, list) or frozenset(meta_late) != late:
            raise CollsynthError(f"clusterstraggler built the {s.meta.get('form')} form for late ranks "
                                 f"{meta_late}, not the {form} form for {sorted(late)}")  # pragma: no cover
        return s

    def member_params(self, late: frozenset[int]) -> dict[str, Any]:
        """clusterstraggler's keywords for the member of late set ``late``: its arrivals, the topology, and on
        a cluster auto's block count made explicit (the late form itself, never the synchronous schedule)."""
        params: dict[str, Any] = dict(self.params, topology=self.topology,
                                      arrivals={r: CLUSTER_DELAY_S for r in sorted(late)})
        if not self.one_domain and params.get("pipeline", "auto") == "auto":
            params["pipeline"] = auto_pipeline(self.n, self.topology, "gpu" if len(late) == 1 else "node",
                                               params.get("size"))
        return params

    def missing_counts(self) -> set[int]:
        """How many ranks may be missing when a late set is proposed: 1 (a GPU), and the node size."""
        return {1} if self.one_domain else {1, self.gpus_per_node}

    @staticmethod
    def form_of(schedule: Schedule) -> str:
        """The form a member has: "gpu" or "node" on a cluster; in one NVLink domain "domain" (the broadcast
        form), "synchronous" or "multistraggler"."""
        form = schedule.meta.get("form", schedule.meta.get("algorithm"))
        return str(form) if form else "clusterstraggler"

    def build_all(self) -> dict[frozenset[int], Schedule]:
        """Build and verify every member up front; returns late set -> schedule."""
        out = {}
        for late in self.late_sets():
            s = self.get(late)
            assert s is not None  # every late set of late_sets() is served
            out[late] = s
        return out


def write_cluster_family(topology: Any, outdir: str, force: bool = False, **params: Any) -> dict[str, Any]:
    """Write every member of ``ClusterFamily(topology, **params)`` as ``late_{ranks}.json`` (ranks as ranges,
    ``late_8-15.json``) plus manifest.json into ``outdir``, all or nothing (fileio.write_tree), for a runtime
    that picks by late set (the MSCCL scheduler plugin and the MSCCL++ selector take their emitted files).
    The work of all n + N members (n in one NVLink domain) is estimated before any is built: their seconds
    add up, and so do their files' bytes (about JSON_BYTES_PER_TRANSFER each, held until the folder is
    written) beside one member's peak. Every one is verified. Returns the manifest."""
    check_outdir(outdir, force)
    fam = ClusterFamily(topology, **params)
    sets = fam.late_sets()
    jobs: list[budget.Work] = []
    for late in sets:
        w = work("clusterstraggler", fam.n, "allreduce", fam.member_params(late))
        jobs.extend([w] if isinstance(w, budget.Work) else w)
    what = f"the clusterstraggler family of {len(sets)} schedules on {fam.n} ranks"
    hint = "build the members you need one at a time (synth -a clusterstraggler --arrival RANK=TIME)"
    budget.check(max(w.nbytes() for w in jobs) + JSON_BYTES_PER_TRANSFER * sum(w.transfers for w in jobs), what,
                 hint=hint)
    budget.check_seconds(sum(w.seconds() for w in jobs), what, hint=hint)
    texts: dict[str, str | bytes] = {}
    entries = []
    for i, late in enumerate(sets):
        progress.note(f"clusterstraggler family: late set {i + 1} of {len(sets)}")
        s = fam.build(late)  # not cached: only its text stays
        name = f"late_{rank_ranges(sorted(late))}.json"
        text = s.to_json()
        texts[name] = text
        entries.append({"late": sorted(late), "form": fam.form_of(s), "file": name, "name": s.name,
                        "sha256": hashlib.sha256(text.encode()).hexdigest(), "steps": s.nsteps})
    manifest = {"algorithm": "clusterstraggler", "n": fam.n, "topology": topology.spec,
                "gpus_per_node": fam.gpus_per_node if not fam.one_domain else None,
                "params": {k: v for k, v in sorted(fam.params.items())}, "delay_s": CLUSTER_DELAY_S,
                "schedules": entries}
    texts[MANIFEST] = json.dumps(manifest, indent=1) + "\n"
    write_tree(outdir, texts, force=force)
    return manifest


def read_manifest(folder: str) -> dict[str, Any]:
    """The manifest of a family folder written by ``write_family`` or ``write_cluster_family``, checked: an
    "algorithm", and "schedules" whose entries name distinct ``*.json`` files of the folder (no path) with
    their sha256. A missing or malformed manifest raises CollsynthError (one line naming what to change)."""
    path = os.path.join(folder, MANIFEST)
    if not os.path.isdir(folder):
        raise CollsynthError(f"{folder} is not a folder: give the folder `collsynth synth ... --straggler all -o "
                             f"FOLDER` wrote")
    if not os.path.isfile(path):
        raise CollsynthError(f"{folder} is a directory without {MANIFEST}: give a schedule JSON file, or a family "
                             f"folder written by `collsynth synth ... --straggler all -o FOLDER`")
    try:
        m = json_loads(read_text(path))
    except json.JSONDecodeError as e:
        raise CollsynthError(f"{path}: not valid JSON ({e.msg} at line {e.lineno}): write the family again "
                             f"with `collsynth synth ... --straggler all`") from None
    entries = m.get("schedules") if isinstance(m, dict) else None
    if not isinstance(m, dict) or not isinstance(m.get("algorithm"), str) or not isinstance(entries, list) \
            or not entries:
        raise CollsynthError(f"{path}: not a collsynth family manifest (it needs \"algorithm\" and a non-empty "
                             f"\"schedules\" list): write the family again with `collsynth synth ... --straggler all`")
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        f = entry.get("file") if isinstance(entry, dict) else None
        sha = entry.get("sha256") if isinstance(entry, dict) else None
        if not isinstance(f, str) or not isinstance(sha, str) or os.path.basename(f) != f or not f.endswith(".json") \
                or f in (MANIFEST, ".json") or f.startswith("."):
            raise CollsynthError(f"{path}: schedules[{i}] needs \"file\" (a .json file name in the folder, no path) "
                                 f"and \"sha256\": write the family again with `collsynth synth ... --straggler all`")
        if f in seen:
            raise CollsynthError(f"{path}: {f} is listed twice: write the family again with `collsynth synth ... "
                                 f"--straggler all`")
        seen.add(f)
    return m


def load_member(folder: str, entry: dict[str, Any]) -> Schedule:
    """The schedule of one manifest entry (``read_manifest``), whose file must still have the sha256 the
    manifest records (a member edited or replaced since the family was written is refused)."""
    path = os.path.join(folder, entry["file"])
    raw = read_bytes(path, what="family member ", error=ScheduleFileError)
    if hashlib.sha256(raw).hexdigest() != entry["sha256"]:
        raise ScheduleFileError(f"{path} does not have the sha256 {MANIFEST} records for it (it changed after the "
                                f"family was written): write the family again with `collsynth synth ... "
                                f"--straggler all`")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ScheduleFileError(f"{path} is not a UTF-8 text file") from None
    return Schedule.from_json(text, source=path)
