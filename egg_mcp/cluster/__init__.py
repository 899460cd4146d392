"""Evaluation lanes: every GPU of a host, or of a Ray cluster, behind one `Evaluator`.

`lanes.py`: `LanePool` (one queue, one lane per device, model affinity, retry on a lost lane,
fallback to local lanes) and `LocalLane`; `ray_lanes.py`: lanes on a Ray cluster (optional extra);
`job_specs.py`: a job as data and `execute`, the one path every lane runs; `build.py`: what `serve` and
`bench` start.
"""
