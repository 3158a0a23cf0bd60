"""Issue 4 numbers: MSCCL XML emit + verify times, verifying the public vectors, round-trip fidelity. Prints JSON.

Run: .venv/bin/python bench/bench_msccl.py [--vectors ../shared/vectors/msccl]
In-process wall times (best of --repeat runs); `emit_s` includes the emitter's own check of its output,
`verify_s` is a separate `check_xml_text` of the text (what `collsynth verify FILE.xml` does after reading).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import time

from collsynth.backends.msccl import check_xml_file, check_xml_text, emit_xml, xml_text_to_schedule
from collsynth.synth.registry import build_schedule
from collsynth.synth.simulate import simulate_model


def best(fn, repeat: int) -> tuple[float, object]:
    out, t_best = None, float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        t_best = min(t_best, time.perf_counter() - t)
    return t_best, out


def emit_verify(n: int, repeat: int) -> dict[str, object]:
    s = build_schedule("stragglar", n, straggler=n - 1)
    t_emit, text = best(lambda: emit_xml(s), repeat)
    t_check, report = best(lambda: check_xml_text(text), repeat)
    st = report.stats
    return {"n": n, "emit_s": round(t_emit, 3), "verify_s": round(t_check, 3),
            "emit_plus_verify_s": round(t_emit + t_check, 3), "ok": report.ok, "xml_kb": round(len(text) / 1024),
            "xml_steps": st["xml_steps"], "thread_blocks": st["thread_blocks"],
            "max_thread_blocks_per_gpu": st["max_thread_blocks_per_gpu"], "max_steps_per_tb": st["max_steps_per_tb"],
            "channels": st["nchannels"]}


def fidelity() -> list[dict[str, object]]:
    rows = []
    for alg, n, kw in (("ring", 16, {}), ("rhd", 12, {}), ("direct", 8, {}), ("twoshot", 8, {}),
                       ("stragglar", 8, {"straggler": 7}), ("stragglar", 12, {"straggler": 5}),
                       ("stragglar", 16, {"straggler": 3})):
        s = build_schedule(alg, n, **kw)
        back = xml_text_to_schedule(emit_xml(s))
        late = kw.get("straggler", n - 1)
        for arrivals in (None, {late: 5e-3}):
            a = simulate_model(s, 2 ** 30, 3e-6, 450 * 2 ** 30, arrivals=arrivals).completion_s
            b = simulate_model(back, 2 ** 30, 3e-6, 450 * 2 ** 30, arrivals=arrivals).completion_s
            rows.append({"algorithm": alg, "n": n, "arrivals": "none" if arrivals is None else f"{late}=5ms",
                         "schedule_s": a, "from_xml_s": b, "rel_diff": round(abs(a - b) / a, 6)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    default = os.path.join(root, "..", "shared", "vectors", "msccl")
    ap.add_argument("--vectors", default=default if os.path.isdir(default) else "/work/shared/vectors/msccl")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    out: dict[str, object] = {"cpus": os.cpu_count()}
    out["stragglar_emit_verify"] = [emit_verify(n, args.repeat) for n in (8, 64)]
    vec = []
    for path in sorted(glob.glob(os.path.join(args.vectors, "*.xml"))):
        t, rep = best(lambda: check_xml_file(path), args.repeat)
        vec.append({"file": os.path.basename(path), "kb": round(os.path.getsize(path) / 1024), "verify_s": round(t, 3),
                    "ok": rep.ok})
    out["vectors"] = vec
    if vec:
        largest = max(vec, key=lambda v: v["kb"])
        out["largest_vector"] = largest
    out["round_trip_simulation"] = fidelity()
    out["max_round_trip_rel_diff"] = max(r["rel_diff"] for r in out["round_trip_simulation"])
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
