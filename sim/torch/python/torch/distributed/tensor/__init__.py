"""DTensor (torch.distributed.tensor, public from 2.5; torch.distributed._tensor before): a
wrapper subclass around the rank's local shard (_local_tensor). Made with
_make_wrapper_subclass, it has no memory of its own: data_ptr() is 0 (see _tensor.py)."""

from ..._tensor import Tensor, zeros_like


class DTensor(Tensor):
    @staticmethod
    def from_local(local, requires_grad=False):
        t = Tensor._make_wrapper_subclass(DTensor, local.shape, local.device, requires_grad, local.dtype)
        t._local_tensor = local
        return t

    @staticmethod
    def _zeros_like(t):
        return DTensor.from_local(zeros_like(t._local_tensor))

    def to_local(self):
        return self._local_tensor
