"""Reference analysis: operator list, FLOPs, minimum bytes, op classes, roofline floor."""
