"""Where a fresh runner's first Triton compile spends its time, and what a trusted pre-warmed cache saves."""
import json, os, shutil, subprocess, sys, tempfile, time
here = os.path.dirname(os.path.abspath(__file__))
out = os.environ.get("OUT", "/tmp")
results = []
def child(steps, cache, extra_env=None):
    env = dict(os.environ, TRITON_CACHE_DIR=cache, **(extra_env or {}))
    t = time.perf_counter()
    p = subprocess.run([sys.executable, os.path.join(here, "compile_child.py"), steps], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    line = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    r = json.loads(line[0][7:]) if line else {"error": p.stderr[-2000:]}
    r["wall_s"] = round(wall, 3); r["cache"] = os.path.basename(cache); r["extra_env"] = extra_env
    results.append(r); print(json.dumps({k: v for k, v in r.items() if k != "files"}), flush=True)
    return r
root = tempfile.mkdtemp()
cold = os.path.join(root, "cold"); os.mkdir(cold)
r = child("utils,add,scale,gemm:ieee", cold)
print("files:", r.get("files"))
# trusted warm cache = everything but the gemm kernel: what a warm-up of trusted kernels leaves
for trial in range(2):
    c = os.path.join(root, f"cold2_{trial}"); os.mkdir(c); child("gemm:ieee", c)   # cold, gemm straight away
    c = os.path.join(root, f"prewarm_{trial}"); os.mkdir(c); child("utils,add,gemm:ieee", c)  # warm-up in-process then gemm
warm_src = os.path.join(root, "warm_src"); os.mkdir(warm_src); child("utils,add", warm_src)
for trial in range(2):
    c = os.path.join(root, f"copied_{trial}")
    t = time.perf_counter(); shutil.copytree(warm_src, c); cp = time.perf_counter() - t
    r = child("gemm:ieee", c); r["copy_s"] = round(cp, 4)
    c = os.path.join(root, f"copied_utils_first_{trial}"); shutil.copytree(warm_src, c); child("utils,add,gemm:ieee", c)
full = os.path.join(root, "full_copy"); shutil.copytree(cold, full); child("gemm:ieee", full)
for prec in ("tf32", "tf32x3"):
    c = os.path.join(root, f"copied_{prec}"); shutil.copytree(warm_src, c); child(f"utils,add,gemm:{prec}", c)
# compile threads / knobs
import triton
print("triton", triton.__version__)
try:
    import triton.backends.nvidia.driver as d, inspect
    src = inspect.getsource(d)
    print("make_launcher" in src, "compile_module_from_src" in src, "launcher_src" in src)
except Exception as e:
    print("inspect failed", e)
json.dump(results, open(os.path.join(out, "compile_probe.json"), "w"), indent=1)
