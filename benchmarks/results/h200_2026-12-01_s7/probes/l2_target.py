"""ncu target: the calibration's L2 probe launch (probes.l2_launch), 3 warm-ups, then once in the profiled range."""
import torch
from egg_mcp.calibration.probes import l2_launch

props = torch.cuda.get_device_properties(0)
fn, amount, method, buf = l2_launch(props.multi_processor_count, int(getattr(props, "L2_cache_size", 0) or 0), False)
for _ in range(3):
    fn()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
fn()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
print("bytes", amount, method)
