// Who owns an allocation, from its stack (innermost first, the CUDA libraries' frames included):
// the first module outside the CUDA libraries, named as users know it.
#include "memtrace/engine/owners.h"

#include <gtest/gtest.h>

namespace memtrace {
namespace {

FrameView native(const std::string& module, const std::string& function, const std::string& file = "",
                 uint32_t line = 0) {
  FrameView f;
  f.module = module;
  f.function = function;
  f.file = file;
  f.line = line;
  return f;
}

FrameView python(const std::string& file, uint32_t line, const std::string& function) {
  FrameView f;
  f.python = true;
  f.file = file;
  f.line = line;
  f.function = function;
  return f;
}

const FrameView kRuntime = native("/usr/lib/libcudart.so.13", "cudaMalloc");
const FrameView kInjector = native("/opt/memtrace/lib/libmemtrace_inject.so", "cudaMalloc");

TEST(Owners, NcclByTheCallIntoItAndWhoMadeIt) {
  const std::string nccl = "/venv/site-packages/nvidia/nccl/lib/libnccl.so.2";
  Owner o =
      owner_of({kInjector, native(nccl, "cuMemCreate"), native(nccl, "ncclCudaCalloc", "alloc.h", 9),
                native(nccl, "ncclCommInitRank", "init.cc", 40), native("/usr/bin/python3.11", "_PyEval_EvalFrame"),
                python("/venv/site-packages/torch/distributed/c10d.py", 12, "all_reduce"),
                python("/work/train.py", 40, "setup")});
  EXPECT_EQ(o.kind, OwnerKind::kLibrary);
  EXPECT_EQ(o.name, "NCCL");
  EXPECT_EQ(o.part, "ncclCommInitRank \u2190 setup at train.py:40");
  EXPECT_EQ(owner_label({native(nccl, "ncclCommInitRank", "init.cc", 40), python("/work/train.py", 40, "setup")}),
            "NCCL: ncclCommInitRank \u2190 setup at train.py:40");
}

TEST(Owners, NvidiasLibrariesByTheirNamesOthersByTheirFiles) {
  EXPECT_EQ(owner_of({kRuntime, native("/usr/lib/libcublasLt.so.13", "cublasLtMatmul")}).name, "cuBLASLt");
  EXPECT_EQ(owner_of({kRuntime, native("/usr/lib/libcublas.so.13.0.0", "cublasCreate_v2")}).name, "cuBLAS");
  EXPECT_EQ(owner_of({kRuntime, native("/usr/lib/libcudnn_ops.so.9", "cudnnCreate")}).name, "cuDNN");
  Owner other = owner_of({kRuntime, native("/opt/lib/libflash_attn.so.2", "alloc")});
  EXPECT_EQ(other.kind, OwnerKind::kLibrary);
  EXPECT_EQ(other.name, "libflash_attn");
}

TEST(Owners, TheProgramWhereItsOwnCodeOrItsPythonCalledCuda) {
  EXPECT_EQ(owner_of({kRuntime, native("/work/train_loop", "device_alloc")}).kind, OwnerKind::kProgram);
  // A statically linked runtime lies in the program's module: its frames are the program's.
  EXPECT_EQ(owner_of({native("/work/static_runtime", "cudaMalloc"), native("/work/static_runtime", "main")}).kind,
            OwnerKind::kProgram);
  // Python through ctypes: libffi and the interpreter between the runtime and the Python frames.
  EXPECT_EQ(owner_of({kRuntime, native("/usr/lib/libffi.so.8", "ffi_call"), python("/work/t.py", 3, "main")}).kind,
            OwnerKind::kProgram);
}

TEST(Owners, PyTorchByItsLibrariesOrItsNamespaces) {
  EXPECT_EQ(owner_of({kRuntime, native("/venv/torch/lib/libc10_cuda.so", "c10::cuda::malloc")}).kind,
            OwnerKind::kPyTorch);
  // A PyTorch snapshot's C++ frames have no module.
  EXPECT_EQ(owner_of({native("", "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc")}).kind,
            OwnerKind::kPyTorch);
}

TEST(Owners, NotPlacedWithoutAModuleOrAStack) {
  EXPECT_EQ(owner_of({}).kind, OwnerKind::kUnplaced);
  EXPECT_EQ(owner_of({kRuntime}).kind, OwnerKind::kUnplaced);
  EXPECT_EQ(owner_of({native("", "")}).kind, OwnerKind::kUnplaced);
  EXPECT_EQ(owner_label({native("", "")}), "not placed (no module in its stack)");
}

}  // namespace
}  // namespace memtrace
