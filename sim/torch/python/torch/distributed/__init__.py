"""torch.distributed, as far as memory goes: the NCCL process group (init_process_group,
all_reduce, destroy_process_group) over the stand-in NCCL, and DTensor (distributed/tensor) and
fully_shard (distributed/fsdp), on one rank.

As torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp (2.4 on) does: the communicator is made on the
first collective (getNCCLComm -> ncclCommInitRank(Config)), or at init_process_group when it is
given device_id (eager init); NCCL connects its rings on that first collective too. The ranks
exchange no unique id here: the stand-in NCCL moves no data."""

import ctypes
import os

from .. import _nvidia

_group = None


class _ProcessGroupNCCL:
    def __init__(self, rank, world_size):
        self.rank, self.world_size, self.comm = rank, world_size, None
        lib = self.nccl = _nvidia.library("nccl", "libnccl.so.2")
        lib.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, _UniqueId, ctypes.c_int]
        lib.ncclAllReduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                      ctypes.c_void_p, ctypes.c_void_p]
        lib.ncclCommDestroy.argtypes = [ctypes.c_void_p]

    def communicator(self):
        if self.comm is None:
            uid, comm = _UniqueId(), ctypes.c_void_p()
            self.nccl.ncclGetUniqueId(ctypes.byref(uid))
            if self.nccl.ncclCommInitRank(ctypes.byref(comm), self.world_size, uid, self.rank) != 0:
                raise RuntimeError("NCCL error: ncclCommInitRank failed")
            self.comm = comm.value
        return self.comm


class _UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


class ReduceOp:
    SUM = 0


def is_initialized():
    return _group is not None


def init_process_group(backend="nccl", rank=None, world_size=None, device_id=None, **kwargs):
    global _group
    if backend != "nccl":
        raise ValueError(f"the stand-in has the nccl backend only, not {backend!r}")
    rank = int(os.environ["RANK"]) if rank is None else rank
    world_size = int(os.environ["WORLD_SIZE"]) if world_size is None else world_size
    _group = _ProcessGroupNCCL(rank, world_size)
    if device_id is not None:
        _group.communicator()


def get_rank():
    return _group.rank


def get_world_size():
    return _group.world_size


def all_reduce(tensor, op=ReduceOp.SUM):
    comm = _group.communicator()
    ptr = tensor._storage.ptr if tensor._storage is not None else None
    if _group.nccl.ncclAllReduce(ptr, ptr, tensor.numel(), 7, op, comm, None) != 0:  # ncclFloat32
        raise RuntimeError("NCCL error: ncclAllReduce failed")


def destroy_process_group():
    global _group
    if _group is not None and _group.comm is not None:
        _group.nccl.ncclCommDestroy(_group.comm)
    _group = None
