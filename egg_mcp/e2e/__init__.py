"""End to end: the demo, the KernelBench batch runner and task reports."""
