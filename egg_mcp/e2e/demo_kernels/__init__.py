"""Hand-written candidate kernels that `egg-mcp demo` submits, one folder per built-in problem.

They are data, not imported by the package: the demo reads their text and sends it to `verify`,
so they run only in the engine's worker processes, like any client's candidate.
"""
