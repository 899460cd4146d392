#!/usr/bin/env bash
# Probe: versions, Triton hook API, ncu metric availability and a sample CSV. Writes into $1.
out=$1; mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$out/smi.txt"
python3 benchmarks/probe_device.py "$out" 2>&1 | tail -5
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1); echo "ncu=$NCU"
$NCU --version | tail -1
$NCU --query-metrics --chip gh100 > "$out/ncu_metrics_gh100.txt" 2>&1; wc -l "$out/ncu_metrics_gh100.txt"
cat > /tmp/k.py <<'PY'
import torch, triton, triton.language as tl
@triton.jit
def scale_kernel(x, y, n, B: tl.constexpr):
    o = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(y + o, tl.load(x + o, mask=o < n) * 2, mask=o < n)
x = torch.randn(1 << 26, device="cuda"); y = torch.empty_like(x)
for _ in range(3): scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), B=1024)
torch.cuda.synchronize(); torch.cuda.profiler.start()
scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), B=1024)
torch.cuda.synchronize(); torch.cuda.profiler.stop()
print("program output line")
PY
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,launch__grid_size,launch__waves_per_multiprocessor,sm__warps_active.avg.pct_of_peak_sustained_active,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,lts__t_sector_hit_rate.pct,launch__occupancy_limit_registers,smsp__average_warp_latency_issue_stalled_long_scoreboard
/usr/bin/time -f "ncu wall %e s" $NCU --csv --page raw --metrics $M --clock-control none --profile-from-start off -k regex:scale --log-file "$out/sample_raw.csv" python3 /tmp/k.py
head -c 1500 "$out/sample_raw.csv"; echo
/usr/bin/time -f "ncu details wall %e s" $NCU --csv --page details --section SpeedOfLight --section Occupancy --clock-control none --profile-from-start off -k regex:scale --log-file "$out/sample_details.csv" python3 /tmp/k.py
head -c 800 "$out/sample_details.csv"
