import sys, json, subprocess, time
sys.path.insert(0, '..')
from egg_mcp.calibration.probes import run_probes
sm = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,clocks_throttle_reasons.active", "--format=csv,noheader", "-lms", "100"], stdout=open(sys.argv[1], "w"))
time.sleep(0.5)
r = run_probes({"quick": False})
sm.terminate()
for c in r["ceilings"]:
    print(json.dumps({k: c.get(k) for k in ("key", "value", "unit", "best_ms", "median_ms", "peak", "ratio", "method")})[:400])
print({k: v for k, v in r.items() if k not in ("ceilings",)})
