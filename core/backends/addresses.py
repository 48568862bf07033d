"""The address of a numpy array's first element, for the compiled kernels' ctypes calls.

`ndarray.ctypes.data` builds a helper object at every access: 2.2-2.5 us, three of them
in each small norm's 11.6 us call (the kernel itself 3.3 us). A decode step makes
hundreds of such calls (SmolLM2-135M: ~120 products, 61 norms, 30 attentions, each
with two to five arrays). ctypes.addressof over the array's own buffer takes 0.7 us; it
needs a writable C-contiguous array (a fresh output, an activation), and anything else
(a read-only file's weight, a strided view, an empty array) takes the slow way.
"""

import ctypes

_from_buffer = ctypes.c_char.from_buffer
_addressof = ctypes.addressof


def address(a):
    """a's first element's address (a numpy array)."""
    try:
        return _addressof(_from_buffer(a))
    except (TypeError, ValueError):  # read-only, not C-contiguous, or empty
        return a.ctypes.data
