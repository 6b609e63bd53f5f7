"""The ``numpy`` codegen, the reference kernels on the host: see :mod:`.codegen`."""
