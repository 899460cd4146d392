"""profile_ncu: Nsight Compute metrics turned into a bottleneck report (with a no-counter fallback)."""
