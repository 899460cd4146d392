"""Problems in KernelBench format: resolving references and checking their contract."""
