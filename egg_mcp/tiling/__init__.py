"""propose_tiling: analytic enumeration and pruning of tile configurations, then measurement."""
