"""torch.compiler (2.1 on): disable, over torch._dynamo's, imported when called."""


def disable(fn=None, recursive=True):
    import torch._dynamo
    return torch._dynamo.disable(fn, recursive)
