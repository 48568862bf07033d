"""Compare an ember module with a PyTorch module, sub-module by sub-module, through hooks.

Both are run on the same inputs with forward hooks on the sub-modules named in `pairs`
(ember's `Module.register_forward_hook`, torch's own); each pair's outputs are compared
as float64 arrays. A pair passes when max|ember - torch| <= atol + rtol * max|torch|: the
relative error is taken against the reference output's scale, not element by element, so
values that happen to sit near zero do not make it explode. Pairs are reported in the
order the reference module finished them (inner modules before the modules holding them),
and the first pair beyond the tolerance is the first divergent one.
"""

import dataclasses

import numpy as np

from ..errors import InvalidArgument
from ..tensor import Tensor, from_numpy
from .reference import import_torch

OUTPUT = "(output)"  # the pair that compares the two modules' own outputs


@dataclasses.dataclass
class PairResult:
    ember_name: str
    torch_name: str
    shape: tuple = ()
    max_abs: float = float("nan")
    max_rel: float = float("nan")
    ok: bool = False
    calls: int = 0
    note: str = ""

    def to_dict(self):
        return dataclasses.asdict(self) | {"shape": list(self.shape)}


@dataclasses.dataclass
class Report:
    pairs: list
    atol: float
    rtol: float

    @property
    def ok(self):
        return all(p.ok for p in self.pairs)

    @property
    def first_divergent(self):
        """The first pair (in the reference's execution order) beyond the tolerance."""
        return next((p for p in self.pairs if not p.ok), None)

    def to_dict(self):
        first = self.first_divergent
        return {
            "ok": self.ok,
            "atol": self.atol,
            "rtol": self.rtol,
            "first_divergent": None if first is None else first.ember_name,
            "pairs": [p.to_dict() for p in self.pairs],
        }

    def table(self):
        width = max([len(p.ember_name) for p in self.pairs] + [6])
        lines = [f"{'module':<{width}}  {'max abs':>10}  {'max rel':>10}  status"]
        for p in self.pairs:
            status = "ok" if p.ok else "DIVERGES"
            note = f"  ({p.note})" if p.note else ""
            lines.append(
                f"{p.ember_name:<{width}}  {p.max_abs:>10.3e}  {p.max_rel:>10.3e}  {status}{note}"
            )
        return "\n".join(lines)

    def summary(self):
        first = self.first_divergent
        if first is None:
            return f"all {len(self.pairs)} pairs within atol={self.atol:g} rtol={self.rtol:g}"
        return (
            f"first divergent: {first.ember_name} (torch {first.torch_name}): max abs "
            f"{first.max_abs:.3e}, max rel {first.max_rel:.3e} beyond atol={self.atol:g} "
            f"rtol={self.rtol:g}"
        )

    def __str__(self):
        return self.table() + "\n" + self.summary()


def compare(
    ember_module,
    torch_module,
    inputs,
    pairs=None,
    *,
    torch_inputs=None,
    atol=1e-4,
    rtol=1e-4,
    device=None,
):
    """Run both modules on `inputs` and compare the outputs of matching sub-modules.

    inputs: a tuple of positional arguments or a dict of keyword arguments (numpy arrays,
        ember Tensors or torch tensors; each side gets its own kind), or one array.
        `torch_inputs` gives the torch side different ones when the signatures differ.
    pairs: {ember_name: torch_name} (or (ember, torch) tuples), a function from an ember
        sub-module name to the torch name (None: skip it), or None for every name the two
        trees share. The modules' own outputs are always compared too, as "(output)".
    device: where numpy (and torch) inputs go on the ember side (default: the CPU).
    Returns a Report: per pair the max abs/rel error; `first_divergent`, `ok`.
    """
    torch = import_torch()
    if not hasattr(ember_module, "named_modules") or not hasattr(torch_module, "named_modules"):
        raise InvalidArgument(
            "verify.compare: expects an ember nn.Module and a torch nn.Module", op="verify.compare"
        )
    ember_tree = dict(ember_module.named_modules())
    torch_tree = dict(torch_module.named_modules())
    resolved = _resolve_pairs(pairs, ember_tree, torch_tree)
    ember_seen, torch_seen, order = {}, {}, []

    def ember_hook(name):
        def hook(module, args, output):
            ember_seen.setdefault(name, []).append(_to_numpy(output))

        return hook

    def torch_hook(name):
        def hook(module, args, output):
            if name not in torch_seen:
                order.append(name)
            torch_seen.setdefault(name, []).append(_to_numpy(output))

        return hook

    handles = []
    try:
        for e_name, t_name in resolved:
            handles.append(ember_tree[e_name].register_forward_hook(ember_hook(e_name)))
            handles.append(torch_tree[t_name].register_forward_hook(torch_hook(t_name)))
        e_args, e_kwargs = _split(inputs, lambda v: _to_ember(v, device))
        t_args, t_kwargs = _split(
            inputs if torch_inputs is None else torch_inputs, lambda v: _to_torch(torch, v)
        )
        ember_out = ember_module(*e_args, **e_kwargs)
        with torch.no_grad():
            torch_out = torch_module(*t_args, **t_kwargs)
    finally:
        for h in handles:
            h.remove()
    by_torch = {t: e for e, t in resolved}
    ranked = [n for n in order if n in by_torch] + [t for _, t in resolved if t not in order]
    results = [
        _compare_calls(
            by_torch[t], t, ember_seen.get(by_torch[t], []), torch_seen.get(t, []), atol, rtol
        )
        for t in ranked
    ]
    results.append(
        _compare_calls(OUTPUT, OUTPUT, [_to_numpy(ember_out)], [_to_numpy(torch_out)], atol, rtol)
    )
    return Report(results, atol, rtol)


def _resolve_pairs(pairs, ember_tree, torch_tree):
    if pairs is None:
        found = [(n, n) for n in ember_tree if n and n in torch_tree]
    elif callable(pairs):
        found = [(n, pairs(n)) for n in ember_tree if n]
        found = [(e, t) for e, t in found if t is not None]
    else:
        found = list(pairs.items() if isinstance(pairs, dict) else pairs)
    for e, t in found:
        if e not in ember_tree or not e:
            raise InvalidArgument(
                f"verify.compare: the ember module has no sub-module {e!r}",
                op="verify.compare",
                name=e,
            )
        if t not in torch_tree or not t:
            raise InvalidArgument(
                f"verify.compare: the torch module has no sub-module {t!r}",
                op="verify.compare",
                name=t,
            )
    if len({t for _, t in found}) != len(found):
        raise InvalidArgument(
            "verify.compare: a torch sub-module is paired twice", op="verify.compare"
        )
    return found


def _compare_calls(e_name, t_name, ember_calls, torch_calls, atol, rtol):
    result = PairResult(e_name, t_name, calls=len(torch_calls))
    if not torch_calls or not ember_calls:
        side = "torch" if not torch_calls else "ember"
        result.note = f"never called on the {side} side"
        return result
    if len(ember_calls) != len(torch_calls):
        result.note = f"called {len(ember_calls)} times in ember, {len(torch_calls)} in torch"
        return result
    worst_abs, worst_rel, ok = 0.0, 0.0, True
    for e, t in zip(ember_calls, torch_calls, strict=True):
        if e is None or t is None:
            result.note = "output is not a tensor"
            return result
        if e.shape != t.shape:
            if e.size != t.size:
                result.note = f"shape {list(e.shape)} vs torch {list(t.shape)}"
                result.shape = t.shape
                return result
            e = e.reshape(t.shape)  # e.g. ember keeps (batch*tokens, hidden) rows flat
        diff = np.abs(e - t)
        scale = float(np.max(np.abs(t))) if t.size else 0.0
        max_abs = float(np.max(diff)) if diff.size else 0.0
        if not np.isfinite(max_abs):
            max_abs = float("inf")
        max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
        ok = ok and max_abs <= atol + rtol * scale
        worst_abs, worst_rel = max(worst_abs, max_abs), max(worst_rel, max_rel)
        result.shape = t.shape
    result.max_abs, result.max_rel, result.ok = worst_abs, worst_rel, ok
    return result


def _first_tensor(value):
    """The first tensor of an output (tuples, lists, dicts and HF ModelOutputs hold several)."""
    if isinstance(value, dict):
        value = [v for v in value.values() if v is not None]
    if isinstance(value, (tuple, list)):
        return _first_tensor(value[0]) if value else None
    return value


def _to_numpy(value):
    value = _first_tensor(value)
    if isinstance(value, Tensor):
        return value.numpy().astype(np.float64)
    if hasattr(value, "detach"):  # a torch tensor
        return value.detach().to("cpu").double().numpy()
    if isinstance(value, np.ndarray):
        return value.astype(np.float64)
    return None


def _split(inputs, convert):
    if isinstance(inputs, dict):
        return (), {k: convert(v) for k, v in inputs.items()}
    if not isinstance(inputs, (tuple, list)):
        inputs = (inputs,)
    return tuple(convert(v) for v in inputs), {}


def _to_ember(value, device):
    if isinstance(value, Tensor):
        return value
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        t = from_numpy(np.ascontiguousarray(value))
        return t if device is None else t.to(device)
    return value


def _to_torch(torch, value):
    if isinstance(value, Tensor):
        return torch.from_numpy(np.ascontiguousarray(value.numpy()))
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value))
    return value
