"""The ``onnxruntime`` codegen, onnxruntime's CPU provider: see :mod:`.codegen`."""
