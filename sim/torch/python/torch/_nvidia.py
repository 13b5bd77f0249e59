"""NVIDIA's libraries as PyTorch's wheels install them: site-packages/nvidia/<name>/lib (the
nvidia-nccl and nvidia-cublas packages; the stand-ins are sim/nccl and sim/cublas), loaded with
ctypes.CDLL so that calls release the GIL as PyTorch's C++ does."""

import ctypes
import os

_site_packages = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_loaded = {}


def library(package, soname):
    if package not in _loaded:
        _loaded[package] = ctypes.CDLL(os.path.join(_site_packages, "nvidia", package, "lib", soname))
    return _loaded[package]
