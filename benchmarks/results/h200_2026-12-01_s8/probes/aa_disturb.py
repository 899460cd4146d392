"""Why the GPU suite's A/A row at 1.09 ms (softmax 32768x8192) read CV 6.8-8.4 % in two runs and 0.17 % in one:
the same GpuTimer reading in a quiet process, five times; then five times while a second process starts CUDA
contexts over and over (what a spare runner does when it starts: torch import, CUDA init, a small kernel);
then five times while a second process runs gcc builds (a spare's launcher stub). Prints one JSON line each."""
import json, os, subprocess, sys, time
sys.path.insert(0, os.getcwd())
import torch
from egg_mcp.evaluation.timing import GpuTimer
from egg_mcp.problems.builtin import builtin_source

ns = {}
exec(compile(builtin_source("softmax"), "ref", "exec"), ns)
model = ns["Model"]().cuda()
gen = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(32768, 8192, device="cuda", generator=gen)
timer = GpuTimer(0)
def read(label):
    out = []
    for _ in range(5):
        s, _ = timer.measure(lambda xs: model(*xs), lambda k: [x])
        out.append({"median_ms": round(s.median_ms, 4), "cv": round(s.cv, 5), "remeasured": s.remeasured,
                    "disturbed_cvs": s.disturbed_cvs})
    print(json.dumps({"label": label, "readings": out}), flush=True)
read("quiet")
ctx = subprocess.Popen([sys.executable, "-c", "import subprocess,sys\nwhile True: subprocess.run([sys.executable,'-c','import torch;torch.cuda.init();torch.empty(1,device=\"cuda\");torch.randn(4096,device=\"cuda\").sum().item()'])"])
time.sleep(3)
read("cuda_contexts_starting")
ctx.kill()
src = "/tmp/aa_c.c"
open(src, "w").write("#include <Python.h>\nint f(int x){return x+1;}\n")
gcc = subprocess.Popen(["bash", "-c", f"while true; do for i in 1 2 3; do gcc -O3 -shared -fPIC -I$(python3 -c 'import sysconfig;print(sysconfig.get_paths()[\"include\"])') {src} -o /tmp/aa_$i.so & done; wait; done"])
time.sleep(1)
read("gcc_x3_running")
gcc.kill()
