"""lavapipe's loop cap: how many loop iterations one invocation may run.

lavapipe (Mesa's Vulkan CPU driver) counts every loop iteration of an invocation, over
all its loops and every iteration of nested ones, and past 65,535 leaves every loop
after one more iteration, keeping what was written so far: no error, wrong results.
(Measured: a softmax row of 7.68M elements, three loops of 30,000 iterations in each of
256 invocations, came back summing to 0.18.) Launch code keeps each invocation's worst
case, counted by the functions here, at most BUDGET, which leaves room below the cap
for the few fixed-length loops (dims of strided(), workgroup trees) not counted.

Tests lower BUDGET (monkeypatch loopcap.BUDGET) to reach the long-input paths with
small inputs; read it as `loopcap.BUDGET` at call time, never import the number.
"""

from ...intmath import ceil_div

BUDGET = 60000


def strided_loops(n, lanes, passes):
    """Iterations of `passes` loops that each stride over n elements `lanes` apart,
    plus the workgroup trees (log2 lanes each) combining the lanes after each pass."""
    return passes * (ceil_div(n, lanes) + max(lanes, 1).bit_length())


def fits(loops):
    return loops <= BUDGET
