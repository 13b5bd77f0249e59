"""fully_shard (FSDP2, torch.distributed.fsdp from 2.6; _composable.fsdp before): every parameter
of the module becomes a DTensor parameter over its shard (the whole tensor, on one rank), and its
gradients are DTensors too."""

from ..tensor import DTensor


def fully_shard(module):
    for m in [module] + list(_submodules(module)):
        for name, p in list(m._parameters.items()):
            sharded = DTensor.from_local(p, requires_grad=True)
            sharded._is_param = True
            m._parameters[name] = sharded
            object.__setattr__(m, name, sharded)
    return module


def _submodules(module):
    for m in module._modules.values():
        yield m
        yield from _submodules(m)
