"""torch._dynamo, as far as what a compiled region traces: not imported with torch (torch.compile
imports it), it traces every Python function the compiled region calls unless that function is
skipped (torch/_dynamo/trace_rules.py: user code is inlined by default), and:
  - a function wrapped by torch._dynamo.disable is skipped, with the functions it calls
    (decorators.py: "Dynamo is completely skipped on the decorated function frame as well as the
    recursively invoked functions");
  - torch.autograd.backward is a SkipFunctionVariable (trace_rules.py, keyed by the object the name
    holds when the rules are first built), and Tensor.backward is "Unsupported Tensor.backward()";
  - torch._dynamo.graph_break() breaks the graph (optimizer.step calls it twice, in
    _use_grad_for_differentiable);
  - each of these is a graph break, an error under fullgraph=True (torch._dynamo.exc.Unsupported);
    a break with no tensor op traced since the one before splits no graph again (a graph holds
    ops: the stand-in's are the functions of torch/_tensor.py and torch/autograd.py).
What tracing a function would do beyond that the stand-in does not model: it counts the frames
Dynamo would have traced, by file (traced_files), and the graph breaks that split a graph, for
the tests.
"""

import functools
import sys

from . import exc

traced_files = {}  # file -> frames Dynamo would have traced
graph_breaks = 0


def disable(fn=None, recursive=True, reason=None):
    if fn is None:
        return functools.partial(disable, recursive=recursive, reason=reason)

    @functools.wraps(fn)
    def _fn(*args, **kwargs):
        return fn(*args, **kwargs)

    _fn._torchdynamo_disable = True
    return _fn


def graph_break():
    pass  # eager: nothing


_DISABLED = disable(lambda: None).__code__
_OPS = ("/torch/_tensor.py", "/torch/autograd.py")
_skip_rules = None


def _skipped_codes():
    """The trace rules, built once, from what the names hold then."""
    global _skip_rules
    if _skip_rules is None:
        import torch
        _skip_rules = {torch.autograd.backward.__code__, torch.Tensor.backward.__code__, graph_break.__code__}
    return _skip_rules


class _Tracer:
    def __init__(self):
        self.skipping = 0
        self.breaks = []
        self.traced_since_break = False

    def profile(self, frame, event, arg):
        global graph_breaks
        if event == "call":
            if self.skipping:
                self.skipping += 1
                return
            code = frame.f_code
            if code is _DISABLED or code in _skipped_codes():
                self.skipping = 1
                self.breaks.append(code.co_name)
                if self.traced_since_break:
                    graph_breaks += 1
                    self.traced_since_break = False
                return
            traced_files[code.co_filename] = traced_files.get(code.co_filename, 0) + 1
            if code.co_filename.endswith(_OPS):
                self.traced_since_break = True
        elif event == "return" and self.skipping:
            self.skipping -= 1


def optimize(fullgraph=False):
    def wrap(fn):
        @functools.wraps(fn)
        def compiled(*args, **kwargs):
            tracer = _Tracer()
            previous = sys.getprofile()
            sys.setprofile(tracer.profile)
            try:
                result = fn(*args, **kwargs)
            finally:
                sys.setprofile(previous)
            if fullgraph and tracer.breaks:
                raise exc.Unsupported(f"graph break in {tracer.breaks[0]} under fullgraph=True")
            return result
        return compiled
    return wrap
