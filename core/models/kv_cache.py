"""A key/value cache preallocated for a whole generation.

Each layer owns two tensors [batch, kv_heads, max_len, head_dim] allocated once; every
step writes its new keys and values into the next slice in place (`Tensor.copy_` on a
narrowed view) and attention reads the filled prefix as a view. Decoding therefore
allocates no cache memory per token, on any device.
"""

from .. import dtype as dt
from ..errors import EmberError
from ..functional import attention_step
from ..tensor import zeros


class KVCache:
    def __init__(self, n_layers, batch, n_kv_heads, max_len, head_dim, dtype=dt.f32, device=None):
        self.n_layers = n_layers
        self.batch = batch
        self.max_len = max_len
        shape = (batch, n_kv_heads, max_len, head_dim)
        self.keys = [zeros(*shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.values = [zeros(*shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.length = 0  # positions filled so far (the same for every layer after a step)

    def remaining(self):
        return self.max_len - self.length

    def _check_room(self, t):
        if self.length + t > self.max_len:
            raise EmberError(
                f"KVCache: writing {t} positions at {self.length} overflows the cache of "
                f"{self.max_len}; create the cache with a larger max_len",
                op="kv_cache",
                length=self.length,
                new=t,
                max_len=self.max_len,
            )

    def update(self, layer, k, v):
        """Write k, v [batch, kv_heads, t, head_dim] at the current length; return the
        filled prefix (length + t positions) of this layer's keys and values, as views."""
        t = k.shape[2]
        end = self.length + t
        self._check_room(t)
        keys, values = self.keys[layer], self.values[layer]
        for cache, new in ((keys, k), (values, v)):
            dst = cache.layout.narrow(2, self.length, t)
            same = new.shape == dst.shape and new.dtype is cache.dtype
            if t and same and new.device == cache.device:
                # the usual step, straight to the backend: Tensor.copy_'s checks (overlap,
                # broadcast) hold for a cache's own slice and a tensor of its very shape
                cache.backend.copy_into(cache.storage, dst, new.storage, new.layout, cache.dtype)
            else:  # anything else gets copy_'s checks and errors
                cache.narrow(2, self.length, t).copy_(new)
        return keys.narrow(2, 0, end), values.narrow(2, 0, end)

    def attend_step(self, layer, qkv, n_heads, scale=None, rope=None, interleaved=False):
        """One position's self-attention through this layer's cache in one backend call
        (functional.attention_step): qkv [batch, 1, n_heads + 2 * kv_heads, head_dim],
        rotated first by the position's rotary tables `rope` (cos, sin) where given; its
        k and v are written at the current length. Returns [batch, 1, n_heads *
        head_dim]."""
        self._check_room(1)
        return attention_step(
            qkv,
            self.keys[layer],
            self.values[layer],
            self.length,
            n_heads,
            scale,
            rope,
            interleaved,
        )

    def advance(self, t):
        """Called once per forward pass, after every layer has written its t positions."""
        self.length += t

    def nbytes(self):
        per = self.keys[0].numel() * self.keys[0].dtype.itemsize if self.keys else 0
        return 2 * self.n_layers * per
