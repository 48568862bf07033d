"""backends/webgpu: every tensor primitive as WGSL compute shaders (shaders/*.wgsl).

- backend.py: the runtime-agnostic backend (pipeline cache, buffer pool, batching, limits)
- driver.py: the driver contract; native.py (wgpu-py) and browser.py (pyodide.ffi)
- dtypes.py: how each dtype is held on the device; kernels.py: WGSL templates
- matmul.py: kernel choice and binding-size splits; pool.py: buffers and storages
- split.py: which parts of a launch to bind when operands exceed the max storage binding
- reduce.py: reductions (and their splits); index.py: index_select, gather, scatter_add
- info.py: adapter listing for `ember info`
"""
