"""backends/webgpu: every tensor primitive as WGSL compute shaders (shaders/*.wgsl).

- backend.py: the backend contract mapped onto the runtime and the op modules
- runtime.py: the device state and its public API (pool, arena, pipeline cache, bind
  groups, batching, readback, the lock that lets threads share a device)
- op modules: elementwise.py, transfer.py (upload, fill, readback), rows.py (softmax,
  norms; longrows.py for very long rows), scan.py, rope.py, matmul.py (+ epilogue.py),
  reduce.py, index.py (index_select, gather, scatter_add), qmatmul.py
- driver.py: the driver contract; native.py (wgpu-py) and browser.py (pyodide.ffi)
- dtypes.py: how each dtype is held on the device; scalars.py: host scalars as kernel
  words; kernels.py: WGSL templates; pool.py: buffers and storages
- split.py: which parts of a launch to bind when operands exceed the max storage binding
- info.py: adapter listing for `ember info`
"""
