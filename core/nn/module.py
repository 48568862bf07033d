"""Module: a tree of named parameters and sub-modules, filled from a VarBuilder.

Two ways to build one, as in candle and PyTorch: construct with `vb=` and every weight is
read (and shape-checked) at once, or construct without it and call `module.load(vb)` later.
Attributes holding a Tensor are parameters, attributes holding a Module are children;
names starting with "_" are private (derived caches, never saved or loaded).
"""

from ..tensor import Tensor


class Module:
    def __init__(self):
        object.__setattr__(self, "_params", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "_children", {})

    # --- registration ------------------------------------------------------------------------
    def __setattr__(self, name, value):
        if "_params" not in self.__dict__:
            raise AttributeError(
                f"{type(self).__name__}: call Module.__init__() before assigning {name!r}"
            )
        if not name.startswith("_"):
            params, buffers, children = self._params, self._buffers, self._children
            if isinstance(value, Module):
                params.pop(name, None)
                buffers.pop(name, None)
                children[name] = value
            elif isinstance(value, Tensor) or (
                value is None and (name in params or name in buffers)
            ):
                children.pop(name, None)
                (buffers if name in buffers else params)[name] = value
            else:
                for table in (params, buffers, children):
                    table.pop(name, None)
        object.__setattr__(self, name, value)

    def register_buffer(self, name, value, persistent=True):
        """A tensor that is state but not a weight (e.g. rotary tables); persistent buffers
        are loaded from the VarBuilder like parameters."""
        self._params.pop(name, None)
        self._buffers[name] = value
        object.__setattr__(self, name, value)
        if not persistent:
            self.__dict__.setdefault("_transient", set()).add(name)

    # --- traversal ---------------------------------------------------------------------------
    def named_children(self):
        return iter(self._children.items())

    def children(self):
        return iter(self._children.values())

    def named_modules(self, prefix=""):
        yield prefix, self
        for name, child in self._children.items():
            yield from child.named_modules(f"{prefix}.{name}" if prefix else name)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_parameters(self, prefix=""):
        for path, module in self.named_modules(prefix):
            for name, p in module._params.items():
                if p is not None:
                    yield (f"{path}.{name}" if path else name), p

    def parameters(self):
        for _, p in self.named_parameters():
            yield p

    def named_buffers(self, prefix=""):
        for path, module in self.named_modules(prefix):
            for name, b in module._buffers.items():
                if b is not None:
                    yield (f"{path}.{name}" if path else name), b

    def state_dict(self):
        """Parameters and persistent buffers by full name (what `load` reads)."""
        out = {}
        for path, module in self.named_modules():
            transient = module.__dict__.get("_transient", ())
            for table in (module._params, module._buffers):
                for name, t in table.items():
                    if t is not None and name not in transient:
                        out[f"{path}.{name}" if path else name] = t
        return out

    def num_parameters(self):
        return sum(p.numel() for p in self.parameters())

    # --- loading and moving ------------------------------------------------------------------
    def load(self, vb, strict=True):
        """Read every parameter and persistent buffer from `vb` by its name, checking that
        the stored shape equals the module's. With strict=False, missing names keep their
        current value. Returns self."""
        transient = self.__dict__.get("_transient", ())
        for table in (self._params, self._buffers):
            for name, current in list(table.items()):
                if current is None or name in transient:
                    continue
                if not strict and not vb.contains(name):
                    continue
                setattr(self, name, vb.get(current.shape, name))
        for name, child in self._children.items():
            child.load(vb.pp(name), strict)
        self._reset_derived()
        return self

    def to(self, *args, **kwargs):
        """Move/cast every parameter and buffer in place (like torch.nn.Module.to)."""
        for module in self.modules():
            for table in (module._params, module._buffers):
                for name, t in list(table.items()):
                    if t is not None:
                        moved = t.to(*args, **kwargs)
                        table[name] = moved
                        object.__setattr__(module, name, moved)
            module._reset_derived()
        return self

    def _reset_derived(self):
        """Drop caches computed from the weights (e.g. a fused QKV matrix); called after
        `load` and `to`."""

    def eval(self):
        return self  # inference only: there is no training mode

    # --- calling -----------------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__}.forward")

    _forward_hooks = None  # a dict once a hook is registered on this instance

    def __call__(self, *args, **kwargs):
        if self._forward_hooks is None:  # the usual case costs one attribute read
            return self.forward(*args, **kwargs)
        out = self.forward(*args, **kwargs)
        for hook in list(self._forward_hooks.values()):
            replaced = hook(self, args, out)
            if replaced is not None:
                out = replaced
        return out

    def register_forward_hook(self, hook):
        """Call `hook(module, args, output)` after each forward through `module(...)`, as
        torch's forward hooks do (a non-None return replaces the output); `args` are the
        positional arguments. Returns a handle whose `remove()` takes the hook off."""
        if self._forward_hooks is None:
            object.__setattr__(self, "_forward_hooks", {})
        handle = HookHandle(self._forward_hooks)
        self._forward_hooks[handle.id] = hook
        return handle

    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for name, child in self._children.items():
            body = repr(child).replace("\n", "\n  ")
            lines.append(f"  ({name}): {body}")
        return lines[0] + ")" if len(lines) == 1 else "\n".join(lines) + "\n)"


class HookHandle:
    """Removes the hook it was returned for (safe to call twice)."""

    _next_id = 0

    def __init__(self, hooks):
        self._hooks = hooks
        self.id = HookHandle._next_id
        HookHandle._next_id += 1

    def remove(self):
        self._hooks.pop(self.id, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


class Sequential(Module):
    """Children called in order; they are named "0", "1", ... as in PyTorch checkpoints."""

    def __init__(self, *modules):
        super().__init__()
        for i, m in enumerate(modules):
            setattr(self, str(i), m)

    def __len__(self):
        return len(self._children)

    def __getitem__(self, i):
        return list(self._children.values())[i]

    def __iter__(self):
        return iter(self._children.values())

    def append(self, module):
        setattr(self, str(len(self._children)), module)
        return self

    def forward(self, x):
        for m in self._children.values():
            x = m(x)
        return x


class ModuleList(Sequential):
    """An indexable list of children (names "0", "1", ...), not callable as a whole."""

    def forward(self, *args, **kwargs):
        raise TypeError("ModuleList is a container; call its items")
