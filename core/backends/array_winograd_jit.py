"""numba kernels of array_winograd's transforms: each one pass over its tiles.

numpy's elementwise passes over stride-2 views of a band cost more than the GEMMs they
save (32 -> 32 channels at 160^2: 42 ms of transforms against 9 ms of GEMMs, one core);
here each tile is read once and its 16 (or 4) values written at once. Imported only
where array_conv already imports numba (the SiLU/sigmoid epilogue of a float32
convolution), so a path without numba never loads it.
"""

import numba
import numpy as np

_JIT = {"nogil": True, "cache": True, "error_model": "numpy"}


@numba.njit(**_JIT)
def input_transform(p, v, tiles_high, tiles_wide):
    """v[4a + b, c, t * tiles_wide + s] = (B^T d B)[a, b] of the 4x4 tile d at rows 2t..,
    columns 2s.. of the padded band p (C, 2 tiles_high + 2, 2 tiles_wide + 2);
    B^T = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]. The rows are
    combined first into four contiguous scratch rows (loops LLVM vectorizes), then each
    scratch row's columns, so every store is contiguous."""
    chans, width = p.shape[0], p.shape[2]
    q = np.empty((4, width), p.dtype)
    for c in range(chans):
        for t in range(tiles_high):
            r0, r1, r2, r3 = p[c, 2 * t], p[c, 2 * t + 1], p[c, 2 * t + 2], p[c, 2 * t + 3]
            for j in range(width):  # B^T d
                q[0, j] = r0[j] - r2[j]
                q[1, j] = r1[j] + r2[j]
                q[2, j] = r2[j] - r1[j]
                q[3, j] = r1[j] - r3[j]
            base = t * tiles_wide
            for a in range(4):  # (B^T d) B
                row = q[a]
                v0 = v[4 * a, c, base : base + tiles_wide]
                v1 = v[4 * a + 1, c, base : base + tiles_wide]
                v2 = v[4 * a + 2, c, base : base + tiles_wide]
                v3 = v[4 * a + 3, c, base : base + tiles_wide]
                for s in range(tiles_wide):
                    j = 2 * s
                    v0[s] = row[j] - row[j + 2]
                    v1[s] = row[j + 1] + row[j + 2]
                    v2[s] = row[j + 2] - row[j + 1]
                    v3[s] = row[j + 1] - row[j + 3]


@numba.njit(**_JIT)
def output_transform(m, y, tiles_high, tiles_wide):
    """y[o, 2t + i, 2s + j] = (A^T M A)[i, j] of the tile's 16 products m[:, o, k],
    k = t * tiles_wide + s; A^T = [[1, 1, 1, 0], [0, 1, -1, -1]]. Each tile row's four
    output phases go to contiguous scratch rows first (vectorized), then interleave."""
    outs = m.shape[1]
    q = np.empty((4, tiles_wide), y.dtype)
    for o in range(outs):
        for t in range(tiles_high):
            base = t * tiles_wide
            for s in range(tiles_wide):
                k = base + s
                # M A: each row's columns, to 2
                e0 = m[0, o, k] + m[1, o, k] + m[2, o, k]
                f0 = m[1, o, k] - m[2, o, k] - m[3, o, k]
                e1 = m[4, o, k] + m[5, o, k] + m[6, o, k]
                f1 = m[5, o, k] - m[6, o, k] - m[7, o, k]
                e2 = m[8, o, k] + m[9, o, k] + m[10, o, k]
                f2 = m[9, o, k] - m[10, o, k] - m[11, o, k]
                e3 = m[12, o, k] + m[13, o, k] + m[14, o, k]
                f3 = m[13, o, k] - m[14, o, k] - m[15, o, k]
                q[0, s] = e0 + e1 + e2
                q[1, s] = f0 + f1 + f2
                q[2, s] = e1 - e2 - e3
                q[3, s] = f1 - f2 - f3
            top, bottom = y[o, 2 * t], y[o, 2 * t + 1]
            for s in range(tiles_wide):
                top[2 * s] = q[0, s]
                top[2 * s + 1] = q[1, s]
                bottom[2 * s] = q[2, s]
                bottom[2 * s + 1] = q[3, s]


@numba.njit(**_JIT)
def kernel_transform(w, u):
    """u[4a + b, o, c] = (G g G^T)[a, b] of each 3x3 kernel g = w[o, c];
    G = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]]. As one GEMM and a
    transposing copy through numpy it was 0.1-0.36 ms a layer (64-128 channels) on the
    caller's thread before the bands start, 4.6 ms of yolov8n's forward. One output
    channel's 16 rows go to scratch first, then out as 16 contiguous runs: written
    straight to u, the 16 positions O C floats apart (16 KiB for 64 x 64) thrashed the
    cache's sets (0.23 ms)."""
    outs, chans = w.shape[0], w.shape[1]
    h = np.float32(0.5)
    q = np.empty((16, chans), w.dtype)
    for o in range(outs):
        for c in range(chans):
            g = w[o, c]
            for a in range(4):  # row a of G g, then its three values to four (G^T)
                if a == 0:
                    r0, r1, r2 = g[0, 0], g[0, 1], g[0, 2]
                elif a == 3:
                    r0, r1, r2 = g[2, 0], g[2, 1], g[2, 2]
                else:
                    s = h if a == 1 else -h
                    r0 = (g[0, 0] + g[2, 0]) * h + g[1, 0] * s
                    r1 = (g[0, 1] + g[2, 1]) * h + g[1, 1] * s
                    r2 = (g[0, 2] + g[2, 2]) * h + g[1, 2] * s
                q[4 * a, c] = r0
                q[4 * a + 1, c] = (r0 + r1 + r2) * h
                q[4 * a + 2, c] = (r0 - r1 + r2) * h
                q[4 * a + 3, c] = r2
        for k in range(16):
            u[k, o, :] = q[k]
