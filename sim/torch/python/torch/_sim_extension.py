"""A C++ extension's tensor factory (pybind11), as far as memory goes: at::empty called with the GIL
held, since pybind11 keeps it unless the binding releases it (py::call_guard<py::gil_scoped_release>).
Not PyTorch's API: the stand-in's way to take that path."""

from ._tensor import Tensor, _Storage


def empty_holding_gil(*shape, device="cuda"):
    t = Tensor._make_wrapper_subclass(Tensor, shape, device)
    t._storage = _Storage(t.numel() * t.element_size(), t.device, holding_gil=True)
    return t
