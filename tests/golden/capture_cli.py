"""Record what the CLI examples print, for tests/test_golden_cli.py.

Run from the repository root with the package installed: `python tests/golden/capture_cli.py`.
It runs every command of COMMANDS in order in a fresh temporary folder (later commands read the files
earlier ones wrote) and stores exit code, stdout, stderr and the sha256 of every file written in
tests/golden/cli_outputs.json. Regenerate only when an output changes on purpose, and say why in the
commit message.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shlex
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "cli_outputs.json")

COMMANDS = [
    "algorithms",
    "topologies",
    "synth -a ring -n 8 -o ring8.json",
    "synth -a stragglar -n 8 --straggler 7 -o stragglar8.json",
    "verify ring8.json",
    "info ring8.json",
    "info stragglar8.json --json",
    "simulate stragglar8.json --size 1GiB --alpha 3us --bandwidth 450GiB/s --arrival 7=5ms",
    "simulate ring8.json --size 1GiB --alpha 3us --bandwidth 450GiB/s --arrival 7=5ms --json",
    "compare --gpus 8 --size 1GiB --alpha 3us --bandwidth 450GiB/s --arrival 7=5ms",
    "compare --gpus 8 --size 1GiB --alpha 3us --bandwidth 450GiB/s --arrival 7=5ms -t dgx1 --json",
    "synth -a stragglar -n 8 --pipeline 6 -o s8k6.json",
    "synth -a stragglar -n 8 --pipeline auto --size 1GiB --alpha 3us --bandwidth 450GiB/s -o s8auto.json",
    "reproduce stragglar -n 4,8,16,32,64 --pipeline auto",
    "reproduce stragglar -n 4,6,8 --json",
    "synth -a stragglar -n 8 --straggler 3 -o s8.json",
    "emit s8.json --format msccl-xml -o s8.xml",
    "emit s8.json --format msccl-xml --proto LL128 --max-bytes 64MiB -o s8-ll128.xml",
    "synth -a ring -n 8 --format msccl-xml --dialect legacy -o ring8.xml",
    "verify s8.xml",
    "simulate s8.xml --size 1GiB --alpha 3us --bandwidth 450GiB/s --arrival 3=5ms",
    "emit s8.json --format nccl-cuda -o s8cuda --name s8",
    "synth -a stragglar -n 8 --straggler all -o family",
    "train-sim --gpus 8 --grad-bytes 2.6GB --compute 100ms --slow 7=1.3 --bandwidth 25GB/s --optimizer 10ms "
    "--buckets 16 --methods ddp,ddp-bucketed,zero1,acco --algorithms ring,stragglar --steps 20",
    "train-sim --gpus 4 --grad-bytes 100MB --compute 10ms --jitter 0.2 --methods ddp,acco --algorithms ring "
    "--steps 10 --json",
    "simulate ring8.json --size 1GiB -t dgx1",
]


def run_all(main) -> list[dict]:
    """Run COMMANDS with ``main`` (collsynth.cli.main) in a temporary folder; one record per command."""
    records = []
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        try:
            seen: dict[str, str] = {}
            for cmd in COMMANDS:
                out, err = io.StringIO(), io.StringIO()
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    code = main(shlex.split(cmd))
                files = {}
                for dp, _, fns in os.walk("."):
                    for f in fns:
                        p = os.path.relpath(os.path.join(dp, f))
                        with open(p, "rb") as fh:
                            files[p] = hashlib.sha256(fh.read()).hexdigest()
                new = {p: h for p, h in sorted(files.items()) if seen.get(p) != h}
                seen = files
                records.append({"command": cmd, "rc": code, "stdout": out.getvalue(), "stderr": err.getvalue(),
                                "files": new})
        finally:
            os.chdir(cwd)
    return records


if __name__ == "__main__":
    from collsynth.cli import main as cli_main

    recs = run_all(cli_main)
    with open(OUT, "w") as fh:
        json.dump(recs, fh, indent=1)
        fh.write("\n")
    print(f"wrote {OUT}: {len(recs)} commands", file=sys.stderr)
