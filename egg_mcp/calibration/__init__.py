"""Measured ceilings of the user's own GPU (`egg-mcp calibrate`, or automatically on first GPU use).

`probes` runs in a GPU worker (torch, Triton); everything else here is pure and safe in the server.
"""
