"""Activations by the names Hugging Face configs use (`hidden_act`, `activation_function`)."""
from ..errors import EmberError
from .module import Module

# name -> function of a Tensor. "gelu" is the exact (erf) GELU as in transformers;
# "gelu_new", "gelu_pytorch_tanh" and "gelu_fast" are its tanh approximation.
ACTIVATIONS = {
    "gelu": lambda x: x.gelu(),
    "gelu_exact": lambda x: x.gelu(),
    "gelu_new": lambda x: x.gelu_tanh(),
    "gelu_pytorch_tanh": lambda x: x.gelu_tanh(),
    "gelu_fast": lambda x: x.gelu_tanh(),
    "quick_gelu": lambda x: x.quick_gelu(),
    "relu": lambda x: x.relu(),
    "silu": lambda x: x.silu(),
    "swish": lambda x: x.silu(),
    "tanh": lambda x: x.tanh(),
    "sigmoid": lambda x: x.sigmoid(),
    "linear": lambda x: x,
    "identity": lambda x: x,
}


def get_activation(name):
    """The function for an activation name; unknown names raise naming the known ones."""
    key = str(name).lower()
    fn = ACTIVATIONS.get(key)
    if fn is None:
        raise EmberError(
            f"activation: unknown name {name!r}; known: {', '.join(sorted(ACTIVATIONS))}",
            op="activation", name=name)
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
