"""Triton kernels (CUDA; CPU through Triton's interpreter in tests). Nothing is imported here, so
importing the package never needs triton: ``modules/layer_norm.py`` imports ``triton_layer_norm``
only when ``--layernorm-impl`` asks for it. See docs/kernels.md."""
