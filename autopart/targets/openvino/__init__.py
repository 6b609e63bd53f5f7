"""The ``openvino`` codegen, OpenVINO's CPU plugin: see :mod:`.codegen`."""
