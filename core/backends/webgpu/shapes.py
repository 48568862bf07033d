"""Shape arithmetic for kernel launches (pure Python)."""


def span(shape, strides):
    """Elements from a view's first to its last element, inclusive (0 when empty)."""
    total = 1
    for d, s in zip(shape, strides, strict=True):
        if d == 0:
            return 0
        total += (d - 1) * s
    return total


def collapse(shape, strides_list):
    """Drop size-1 dims and merge neighbours that every operand walks contiguously, so
    kernels decode as few dims as possible (a contiguous tensor becomes 1-D)."""
    keep = [i for i, d in enumerate(shape) if d != 1]
    dims = [shape[i] for i in keep]
    strides = [[s[i] for i in keep] for s in strides_list]
    out_dims = []
    out_strides = [[] for _ in strides_list]
    for k, d in enumerate(dims):
        if out_dims and all(
            st[-1] == ss[k] * d for st, ss in zip(out_strides, strides, strict=True)
        ):
            out_dims[-1] *= d
            for st, ss in zip(out_strides, strides, strict=True):
                st[-1] = ss[k]
            continue
        out_dims.append(d)
        for st, ss in zip(out_strides, strides, strict=True):
            st.append(ss[k])
    if not out_dims:
        return [1], [[0] for _ in strides_list]
    return out_dims, out_strides
