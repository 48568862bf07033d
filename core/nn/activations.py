"""Activations by the names Hugging Face configs use (`hidden_act`, `activation_function`)."""

from ..errors import EmberError
from .module import Module

# name -> the unary op it is (None: the identity). "gelu" is the exact (erf) GELU as in
# transformers; "gelu_new", "gelu_pytorch_tanh" and "gelu_fast" are its tanh approximation.
ACTIVATION_OPS = {
    "gelu": "gelu",
    "gelu_exact": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "quick_gelu": "quick_gelu",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
    "tanh": "tanh",
    "sigmoid": "sigmoid",
    "linear": None,
    "identity": None,
}


def _as_function(op):
    if op is None:
        return lambda x: x
    return lambda x: x._unary(op)


# name -> function of a Tensor.
ACTIVATIONS = {name: _as_function(op) for name, op in ACTIVATION_OPS.items()}


def activation_op(name):
    """The unary op name for an activation name (None for the identity), for
    ember.functional.linear's `activation=`; unknown names raise naming the known ones."""
    get_activation(name)
    return ACTIVATION_OPS[str(name).lower()]


def get_activation(name):
    """The function for an activation name; unknown names raise naming the known ones."""
    key = str(name).lower()
    fn = ACTIVATIONS.get(key)
    if fn is None:
        raise EmberError(
            f"activation: unknown name {name!r}; known: {', '.join(sorted(ACTIVATIONS))}",
            op="activation",
            name=name,
        )
    return fn


class Activation(Module):
    def __init__(self, name):
        super().__init__()
        self.name = str(name).lower()
        self._fn = get_activation(name)

    def forward(self, x):
        return self._fn(x)

    def extra_repr(self):
        return self.name
