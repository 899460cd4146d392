"""Runs latency_child.py in fresh processes, each with a private empty Triton cache (as a runner has);
writes $OUT/latency_probe.json. Run from the repo root: python3 <this file>."""
import json, os, subprocess, sys, tempfile
from pathlib import Path
child = Path(__file__).with_name("latency_child.py")
runs = []
for i in range(2):
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TRITON_CACHE_DIR": cache}
        p = subprocess.run([sys.executable, str(child)], env=env, capture_output=True, text=True, timeout=240)
        line = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
        runs.append(json.loads(line[0][7:]) if line else {"rc": p.returncode, "stderr": p.stderr[-3000:]})
        print(json.dumps(runs[-1])[:4000], flush=True)
out = Path(os.environ.get("OUT", ".")) / "latency_probe.json"
out.write_text(json.dumps(runs, indent=1))
