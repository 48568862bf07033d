"""A jinja2 sandbox whose work and memory are bounded, for chat templates from model files.

jinja2's sandbox stops a template from reaching Python internals but not from running
forever or filling memory: nested `range(100000)` loops never end, `'x' * 10**10`
allocates 10 GB, a macro calling itself ends in a RecursionError. A template is code
from the model's files, so rendering here is bounded by counting, never by a clock:

- a step budget: every loop iteration and every call (function, method, macro, filter)
  costs one step, at most MAX_STEPS per render;
- a call depth: macros (and calls) nested at most MAX_DEPTH deep;
- value sizes: strings, lists and dicts made by `*`, `+`, `~`, `%`, `**`, `replace`,
  `join`, `center`, `indent`, format widths, ... at most MAX_VALUE chars or items, checked
  *before* the value is made where its size is known from the operands (after, for the
  rest), and no int argument larger than MAX_VALUE;
- the output: at most MAX_OUTPUT chars.

Going past a bound raises TemplateLimit, which the chat template turns into its own
error naming the template's file.
"""

import re
import threading

from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer

MAX_STEPS = 1_000_000
MAX_DEPTH = 64
MAX_VALUE = 4_000_000
MAX_OUTPUT = 4_000_000

_LOOP = "__ember_loop"
_CONCAT = "__ember_concat"
# "%10000000s", "%.9999999f", "{:>10000000}": the widths a format string asks for
_PERCENT_WIDTHS = re.compile(r"%[#0\- +]*(\d*|\*)(?:\.(\d+|\*))?")
_BRACE_WIDTHS = re.compile(r"\{[^{}]*:[^{}\d]*(\d*)(?:\.(\d+))?")


class TemplateLimit(Exception):
    """A chat template went past one of the bounds above."""


def _size(value):
    return len(value) if isinstance(value, (str, bytes, list, tuple, dict, set)) else 0


def _check_size(size, what):
    if size > MAX_VALUE:
        raise TemplateLimit(
            f"{what} would make a value of {size:,} chars or items (at most {MAX_VALUE:,})"
        )


def _check_format(fmt):
    for pattern in (_PERCENT_WIDTHS, _BRACE_WIDTHS):
        for m in pattern.finditer(fmt):
            for width in m.groups():
                if width == "*":
                    raise TemplateLimit(
                        "a format width taken from the arguments ('*') is not allowed"
                    )
                if width and int(width) > MAX_VALUE:
                    raise TemplateLimit(f"a format width of {int(width):,} (at most {MAX_VALUE:,})")


def _check_args(args, kwargs):
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, int) and not isinstance(a, bool) and abs(a) > MAX_VALUE:
            raise TemplateLimit(f"an argument of {a:,} (at most {MAX_VALUE:,} in a call)")


def _replace_bound(s, old, new, count=-1):
    if not isinstance(s, str) or not isinstance(new, str):
        return 0
    n = len(s) + 1 if count is None or count < 0 else count
    return len(s) + n * len(new)


def _join_bound(items, sep=""):
    if isinstance(items, (list, tuple)):
        return sum(_size(x) if isinstance(x, str) else 0 for x in items) + len(items) * _size(sep)
    return 0


def _indent_bound(s, width=4, *args, **kwargs):
    w = width if isinstance(width, int) else _size(width)
    return _size(s) + (s.count("\n") + 1) * w if isinstance(s, str) else 0


class _Budget(threading.local):
    steps = 0
    depth = 0


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """The sandbox with the bounds of this module (the chat template's settings)."""

    intercepted_binops = frozenset(["*", "**", "+", "%", "//"])

    def __init__(self, **options):
        super().__init__(**options)
        self.budget = _Budget()
        self.globals[_LOOP] = self._loop
        self.globals[_CONCAT] = self._concat
        self.filters = {name: self._bounded_filter(name, f) for name, f in self.filters.items()}

    # -- the budget ---------------------------------------------------------------------
    def reset(self):
        self.budget.steps = 0
        self.budget.depth = 0

    def step(self):
        b = self.budget
        b.steps += 1
        if b.steps > MAX_STEPS:
            raise TemplateLimit(
                f"rendering took more than {MAX_STEPS:,} steps (loop iterations and calls)"
            )

    def _loop(self, iterable):
        for item in iterable:
            self.step()
            yield item

    def _concat(self, *parts):
        texts = [str(p) for p in parts]
        _check_size(sum(map(len, texts)), "joining with '~'")
        return "".join(texts)

    # -- calls, filters and operators ---------------------------------------------------
    def call(__self, __context, __obj, *args, **kwargs):  # jinja's own signature
        __self.step()
        _check_args(args, kwargs)
        method = getattr(__obj, "__wrapped__", __obj)  # the sandbox wraps str.format
        owner = getattr(method, "__self__", None)
        name = getattr(method, "__name__", "")
        if isinstance(owner, str):
            if name == "replace":
                _check_size(_replace_bound(owner, *args, **kwargs), "replace")
            elif name == "join":
                _check_size(_join_bound(*args, owner), "join")
            elif name in ("format", "format_map"):
                _check_format(owner)
        b = __self.budget
        b.depth += 1
        try:
            if b.depth > MAX_DEPTH:
                raise TemplateLimit(f"calls nested more than {MAX_DEPTH} deep")
            result = super().call(__context, __obj, *args, **kwargs)
        finally:
            b.depth -= 1
        _check_size(_size(result), f"calling {name or 'a function'}")
        return result

    def _bounded_filter(self, name, f):
        bound = {"replace": _replace_bound, "join": _join_bound, "indent": _indent_bound}.get(name)
        pass_arg = getattr(f, "jinja_pass_arg", None)

        def bounded(*args, **kwargs):
            self.step()
            value_args = args[1:] if pass_arg is not None else args  # after context/eval_ctx
            _check_args(value_args[1:], kwargs)
            if bound is not None:
                _check_size(bound(*value_args, **kwargs), name)
            if name == "format" and value_args and isinstance(value_args[0], str):
                _check_format(value_args[0])
            result = f(*args, **kwargs)
            _check_size(_size(result), f"the {name} filter")
            return result

        bounded.__name__ = getattr(f, "__name__", name)
        if pass_arg is not None:
            bounded.jinja_pass_arg = pass_arg
        return bounded

    def call_binop(self, context, op, left, right):
        self.step()
        if op == "*":
            seq, n = (left, right) if isinstance(right, int) else (right, left)
            if isinstance(n, int) and isinstance(seq, (str, list, tuple)):
                _check_size(_size(seq) * max(n, 0), "'*'")
        elif op == "**":
            if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
                bits = abs(left).bit_length() * right
                if bits > 4096:
                    raise TemplateLimit(f"'**' would make an integer of about {bits:,} bits")
        elif op == "+":
            if isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
                _check_size(_size(left) + _size(right), "'+'")
        elif op == "%" and isinstance(left, str):
            _check_format(left)
        result = self.binop_table[op](left, right)
        _check_size(_size(result), f"'{op}'")
        return result

    # -- loops and '~' through the budget ---------------------------------------------------
    def _parse(self, source, name, filename):
        return _Guard().visit(super()._parse(source, name, filename))


class _Guard(NodeTransformer):
    """Rewrites every `for` to iterate through the step budget and every `~` to a
    size-checked join."""

    def visit_For(self, node):
        self.generic_visit(node)
        node.iter = nodes.Call(
            nodes.Name(_LOOP, "load", lineno=node.lineno),
            [node.iter],
            [],
            None,
            None,
            lineno=node.lineno,
        )
        return node

    def visit_Concat(self, node):
        self.generic_visit(node)
        return nodes.Call(
            nodes.Name(_CONCAT, "load", lineno=node.lineno),
            list(node.nodes),
            [],
            None,
            None,
            lineno=node.lineno,
        )


def render_bounded(template, env, **context):
    """template.render(**context) within the bounds (jinja2.Template from `env`)."""
    env.reset()
    out, total = [], 0
    for chunk in template.generate(**context):
        total += len(chunk)
        if total > MAX_OUTPUT:
            raise TemplateLimit(f"the output passed {MAX_OUTPUT:,} chars")
        out.append(chunk)
    return "".join(out)
