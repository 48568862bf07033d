"""Port a small PyTorch model to ember, step by step (docs/migrating-from-pytorch.md walks
through it): the model in torch, the same model written with ember.nn, its weights moved
with `ember convert`, and the two checked layer by layer with ember.verify.

    python examples/port_a_pytorch_model.py [WORKDIR]

Needs torch (`pip install torch`); exits 1 when a layer diverges.
"""
import os
import sys
import tempfile

import ember
import ember.functional as F
import ember.verify
import numpy as np
import torch
from ember.cli import main as ember_cli
from ember.nn import Conv2d, Linear, Module, VarBuilder


# Step 1: the PyTorch model being ported (a tiny digit classifier for 8x8 images).
class TorchNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, kernel_size=3, padding=1)
        self.fc1 = torch.nn.Linear(4 * 4 * 4, 32)
        self.fc2 = torch.nn.Linear(32, 10)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)
        x = torch.relu(self.fc1(x.flatten(1)))
        return self.fc2(x).softmax(-1)


# Step 2: the same model in ember. Attribute names are the checkpoint's tensor names
# (conv.weight, fc1.bias, ...), so `load` finds every weight by name, as
# load_state_dict does.
class EmberNet(Module):
    def __init__(self):
        super().__init__()
        self.conv = Conv2d(1, 4, kernel_size=3, padding=1)
        self.fc1 = Linear(4 * 4 * 4, 32)
        self.fc2 = Linear(32, 10)

    def forward(self, x):
        x = F.max_pool2d(self.conv(x).relu(), 2)
        x = self.fc1(x.flatten(1)).relu()
        return self.fc2(x).softmax(-1)


def port(workdir):
    torch.manual_seed(0)
    torch_net = TorchNet().eval()

    # Step 3: save the PyTorch weights as usual, then convert them with `ember convert`
    # (the .pth is read by a restricted unpickler: nothing in the file can run code).
    pth = os.path.join(workdir, "net.pth")
    weights = os.path.join(workdir, "net.safetensors")
    torch.save(torch_net.state_dict(), pth)
    if ember_cli(["convert", pth, weights, "--quiet"]) != 0:
        raise SystemExit("ember convert failed")

    # Step 4: build the ember module and load the converted weights (shapes are checked).
    ember_net = EmberNet()
    ember_net.load(VarBuilder.from_safetensors(weights))

    # Step 5: compare the two on the same input, layer by layer.
    x = np.random.default_rng(0).standard_normal((2, 1, 8, 8)).astype(np.float32)
    report = ember.verify.compare(ember_net, torch_net, (x,),
                                  pairs={"conv": "conv", "fc1": "fc1", "fc2": "fc2"})
    print(report)
    return report


if __name__ == "__main__":
    if len(sys.argv) > 1:
        sys.exit(0 if port(sys.argv[1]).ok else 1)
    with tempfile.TemporaryDirectory() as tmp:
        sys.exit(0 if port(tmp).ok else 1)
