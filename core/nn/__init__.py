"""Neural-network building blocks: Module, layers, activations by name, VarBuilder."""

from .activations import ACTIVATION_OPS, ACTIVATIONS, Activation, activation_op, get_activation
from .layers import (
    Conv1d,
    Conv2d,
    Dropout,
    Embedding,
    Identity,
    LayerNorm,
    Linear,
    RmsNorm,
    placeholder,
)
from .module import Module, ModuleList, Sequential
from .var_builder import VarBuilder

__all__ = [
    "ACTIVATION_OPS",
    "ACTIVATIONS",
    "Activation",
    "activation_op",
    "get_activation",
    "Conv1d",
    "Conv2d",
    "Dropout",
    "Embedding",
    "Identity",
    "LayerNorm",
    "Linear",
    "RmsNorm",
    "Module",
    "ModuleList",
    "Sequential",
    "VarBuilder",
    "placeholder",
]
