"""Autograd, as memory sees it: an op's result keeps its inputs alive for backward (activations);
backward walks the graph from the loss, hands each parameter its gradient (dense, or what the op
makes of it: nn.Embedding(sparse=True) gives a sparse one), makes a temporary gradient for every
other input, and lets each node's saved inputs go as it passes."""


def _dense_gradient(inp):
    from ._tensor import zeros_like
    return zeros_like(inp)


def _op(shape, inputs, gradient=_dense_gradient):
    from ._tensor import Tensor
    dev = next((t.device for t in inputs if t.is_cuda), inputs[0].device)
    out = Tensor(shape, dev, any(t.requires_grad for t in inputs), inputs[0].dtype)
    if out.requires_grad:
        out._ctx = (inputs, gradient)
    return out


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, grad_variables=None, inputs=None):
    from ._tensor import zeros_like
    roots = tensors if isinstance(tensors, (list, tuple)) else [tensors]
    pending = []
    for root in roots:
        pending.append((root, zeros_like(root)))
    while pending:
        node, grad = pending.pop()
        ctx, node._ctx = node._ctx, None  # the saved inputs go once the node has run
        if ctx is None:
            if node.requires_grad and node.grad is None:
                node.grad = grad  # a leaf: the gradient is its own
            continue
        inputs, gradient = ctx
        for inp in inputs:
            if inp.requires_grad:
                pending.append((inp, gradient(inp)))
        del ctx, inputs, grad


class grad_mode:
    pass
