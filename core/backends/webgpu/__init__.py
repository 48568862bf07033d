"""backends/webgpu"""
