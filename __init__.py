"""collsynth: synthesize, verify, simulate and compile straggler-aware collective schedules.

The Python API, in pipeline order (each name is imported on first use, so `import collsynth` is cheap)::

    import collsynth as cs
    s = cs.build_schedule("stragglar", 8, straggler=7)      # synth: any algorithm of cs.algorithms()
    print(cs.verify(s).message)                              # verify: a proof, or the first violation
    topo = cs.make_topology("nvswitch", 8, alpha=3e-6, bandwidth=450 * 2**30)
    r = cs.simulate(s, "1GiB", topo, {7: 5e-3})              # simulate: alpha-beta times
    rows = cs.compare(8, "1GiB", topo, {7: 5e-3})            # every algorithm, fastest first
    xml = cs.emit(s, "msccl-xml", proto="LL128")             # emit: a runtime's format

Searches that build several candidates (clusterstraggler with late ranks on a cluster) can build them in
worker processes: ``cs.set_jobs(0)`` (one per CPU core; collsynth.workers), with the same output.

Errors a user can cause raise ``CollsynthError`` (a ValueError) with a message that says what to change.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from collsynth.errors import CollsynthError

__version__ = "0.1.0"

# public name -> module that defines it
_API = {
    "Schedule": "collsynth.synth.ir",
    "ScheduleBuilder": "collsynth.synth.ir",
    "save_schedule": "collsynth.synth.ir",
    "load_schedule": "collsynth.api",
    "verify_file": "collsynth.api",
    "algorithms": "collsynth.synth.registry",
    "build_schedule": "collsynth.synth.registry",
    "verify": "collsynth.synth.verify",
    "check": "collsynth.synth.verify",
    "VerificationError": "collsynth.synth.verify",
    "simulate": "collsynth.synth.simulate",
    "SimResult": "collsynth.synth.simulate",
    "compare": "collsynth.synth.compare",
    "Topology": "collsynth.synth.topology",
    "make_topology": "collsynth.synth.topology",
    "topology_presets": "collsynth.synth.topology",
    "emit": "collsynth.backends",
    "emit_to": "collsynth.backends",
    "FORMATS": "collsynth.backends",
    "set_jobs": "collsynth.workers",
}

__all__ = ["CollsynthError", "FORMATS", "Schedule", "ScheduleBuilder", "SimResult", "Topology", "VerificationError",
           "__version__", "algorithms", "build_schedule", "check", "compare", "emit", "emit_to", "load_schedule",
           "make_topology", "save_schedule", "set_jobs", "simulate", "topology_presets", "verify", "verify_file"]

if TYPE_CHECKING:
    from collsynth.api import load_schedule, verify_file
    from collsynth.backends import FORMATS, emit, emit_to
    from collsynth.synth.compare import compare
    from collsynth.synth.ir import Schedule, ScheduleBuilder, save_schedule
    from collsynth.synth.registry import algorithms, build_schedule
    from collsynth.synth.simulate import SimResult, simulate
    from collsynth.synth.topology import Topology, make_topology, topology_presets
    from collsynth.synth.verify import VerificationError, check, verify
    from collsynth.workers import set_jobs


def __getattr__(name: str) -> Any:
    """Import the module behind a public name on first use (PEP 562)."""
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'collsynth' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
