"""WGSL kernel sources, read with importlib.resources by the WebGPU backend."""
