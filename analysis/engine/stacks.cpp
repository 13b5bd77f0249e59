#include "memtrace/engine/stacks.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "memtrace.pb.h"

namespace memtrace {

bool StackView::is_library_frame(const FrameView& f) {
  // NVTX's functions are inlined from its headers into the program: the program's module, NVTX's code.
  return !f.python && (is_cuda_module(f.module) || f.file.find("/nvtx3/") != std::string::npos);
}

bool StackView::is_framework_plumbing(const FrameView& f) {
  if (f.python) return false;
  std::string name = std::filesystem::path(f.module).filename().string();
  bool torch_module = name.rfind("libtorch", 0) == 0 || name.rfind("libc10", 0) == 0;
  if (f.function.empty()) return torch_module;  // module+offset inside PyTorch says nothing to its user
  // PyTorch's allocator, dispatcher and autograd engine, the C++ library and the threads' start:
  // between the allocation and the operator or backward function that asked for it.
  for (const char* prefix :
       {"c10::", "at::", "void at::", "at::TensorBase ", "torch::autograd::VariableType", "torch::autograd::Engine::",
        "torch::autograd::Node::", "torch::autograd::python::", "torch::CapturedTraceback", "torch::unwind", "THP",
        "pybind11::", "std::", "void std::", "execute_native_thread_routine", "start_thread", "clone", "pthread_"})
    if (f.function.rfind(prefix, 0) == 0) return true;
  return false;
}

bool StackView::is_cuda_module(const std::string& module) {
  std::string name = std::filesystem::path(module).filename().string();
  for (const char* prefix : {"libcuda.so", "libcudart.so", "libcupti.so", "libmemtrace_inject.so"})
    if (name.rfind(prefix, 0) == 0) return true;
  return false;
}

FrameView StackView::frame(uint64_t frame_id) const {
  FrameView v;
  v.id = frame_id;
  if (const pb::Frame* f = reader_.frame(frame_id)) {
    v.python = f->frame_kind() == 1;
    v.function = std::string(reader_.string(f->function()));
    v.file = std::string(reader_.string(f->file()));
    v.line = f->line();
    v.module = std::string(reader_.string(f->module()));
    v.offset = f->offset();
    v.address = f->address();
    v.inlined = f->inlined();
  }
  return v;
}

bool StackView::is_cuda_entry_point(const std::string& function) {
  size_t prefix = function.rfind("cuda", 0) == 0 ? 4 : function.rfind("cu", 0) == 0 ? 2 : 0;
  if (!prefix || function.size() == prefix || !std::isupper(static_cast<unsigned char>(function[prefix]))) return false;
  for (char c : function)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

std::vector<FrameView> StackView::all_frames(uint64_t stack_id) const {
  std::vector<FrameView> out;
  if (const std::vector<uint64_t>* ids = reader_.stack(stack_id))
    for (uint64_t id : *ids) out.push_back(frame(id));
  return out;
}

std::vector<FrameView> StackView::frames(uint64_t stack_id) const {
  std::vector<FrameView> out;
  const std::vector<uint64_t>* ids = reader_.stack(stack_id);
  if (!ids) return out;
  bool top = !keep_cuda_;
  for (uint64_t id : *ids) {
    FrameView f = frame(id);
    if (top && is_library_frame(f)) continue;
    top = false;
    out.push_back(std::move(f));
  }
  if (!keep_cuda_) drop_static_runtime(out);
  return out;
}

void StackView::drop_static_runtime(std::vector<FrameView>& stack) {
  // A runtime linked statically (nvcc's default) lies in the program's own module: its frames
  // are those down to the outermost CUDA entry point (cudaMalloc) of the module on top.
  if (stack.empty() || stack.front().python) return;
  size_t cut = 0;
  for (size_t k = 0; k < stack.size() && !stack[k].python && stack[k].module == stack.front().module; ++k)
    if (is_cuda_entry_point(stack[k].function)) cut = k + 1;
  if (cut < stack.size()) stack.erase(stack.begin(), stack.begin() + static_cast<std::ptrdiff_t>(cut));
}

bool StackView::is_python_library(const std::string& file) {
  if (file.rfind("<frozen ", 0) == 0) return true;  // the standard library's frozen modules
  if (file.find("/site-packages/") != std::string::npos || file.find("/dist-packages/") != std::string::npos)
    return true;
  // The standard library: .../lib/python3.N/x.py.
  size_t lib = file.find("/lib/python3.");
  if (lib == std::string::npos) return false;
  size_t version_end = file.find_first_not_of("0123456789", lib + 13);
  if (version_end != std::string::npos && file[version_end] == 't') ++version_end;  // free-threaded: python3.13t
  return version_end != std::string::npos && version_end > lib + 13 && file[version_end] == '/';
}

std::optional<FrameView> StackView::site_frame(uint64_t stack_id, SiteGrouping grouping) const {
  if (grouping == SiteGrouping::kStack || grouping == SiteGrouping::kApi) return std::nullopt;
  if (grouping == SiteGrouping::kOwner) grouping = SiteGrouping::kNative;  // the frame that called CUDA
  const std::vector<uint64_t>* ids = reader_.stack(stack_id);
  if (!ids) return std::nullopt;
  // The CUDA libraries' frames on top, then a static runtime's, are never a site.
  std::vector<FrameView> stack;
  for (uint64_t id : *ids) {
    FrameView f = frame(id);
    if (!stack.empty() || !is_library_frame(f)) stack.push_back(std::move(f));
  }
  drop_static_runtime(stack);
  // Under Python the interpreter's own frames (ctypes' calls among them) name no site.
  const bool has_python = std::any_of(stack.begin(), stack.end(), [](const FrameView& f) { return f.python; });
  std::optional<FrameView> native, library_python;
  for (FrameView& f : stack) {
    if (f.python && grouping == SiteGrouping::kPython) return f;
    if (f.python && grouping == SiteGrouping::kUser) {
      if (!is_python_library(f.file)) return f;
      if (!library_python) library_python = std::move(f);  // all Python frames are libraries': the innermost
      continue;
    }
    if (!f.python && !native && !is_library_frame(f) && !(has_python && is_interpreter_frame(f)) &&
        !is_startup_frame(f) &&
        (grouping != SiteGrouping::kUser || (!is_framework_plumbing(f) && !is_interpreter_frame(f)))) {
      if (grouping == SiteGrouping::kNative) return f;
      native = std::move(f);
    }
  }
  return library_python ? library_python : native;
}

uint64_t StackView::site_key(uint64_t stack_id, SiteGrouping grouping) {
  if (grouping == SiteGrouping::kStack) return stack_id;
  if (grouping == SiteGrouping::kApi) return 0;
  if (grouping == SiteGrouping::kOwner) {
    auto [it, fresh] = keys_.try_emplace(stack_id, 0);
    if (fresh) {
      std::string label = owner_label(all_frames(stack_id));
      it->second = owners_.try_emplace(label, owners_.size()).first->second | (uint64_t(1) << 61);
    }
    return it->second;
  }
  auto [it, fresh] = keys_.try_emplace(stack_id, 0);
  if (fresh) {
    std::optional<FrameView> f = site_frame(stack_id, grouping);
    // Frame ids, stack ids and caller chains are different numbers: kept apart in one key space.
    if (!f) {
      it->second = stack_id | (uint64_t(1) << 63);
    } else if (grouping != SiteGrouping::kUser) {
      it->second = f->id;
    } else {
      // The user's site, split by who called it: a helper every allocation goes through is as
      // many sites as it has calling functions in the user's code (whatever their lines).
      std::vector<uint64_t> chain{f->id};
      const std::vector<uint64_t>* ids = reader_.stack(stack_id);
      bool below = false;
      for (uint64_t id : *ids) {
        if (!below) {
          below = id == f->id;
          continue;
        }
        FrameView caller = frame(id);
        if (!is_user_caller(caller)) continue;
        std::string function = caller.module + '\0' + caller.file + '\0' + caller.function;
        chain.push_back(functions_.try_emplace(function, functions_.size()).first->second);
      }
      auto [chain_key, made] = chains_.try_emplace(chain, chains_.size() | (uint64_t(1) << 62));
      if (made) ++chains_per_site_[f->id];
      it->second = chain_key->second;
    }
  }
  return it->second;
}

bool StackView::has_several_callers(uint64_t stack_id) const {
  std::optional<FrameView> f = site_frame(stack_id, SiteGrouping::kUser);
  if (!f) return false;
  auto it = chains_per_site_.find(f->id);
  return it != chains_per_site_.end() && it->second > 1;
}

std::string with_caller(const std::vector<FrameView>& stack, size_t site) {
  for (size_t k = site + 1; k < stack.size(); ++k) {
    if (!StackView::is_user_caller(stack[k])) continue;
    std::string label = short_function(stack[site]) + " \u2190 " + short_function(stack[k]);
    if (!stack[k].file.empty())
      label += " at " + std::filesystem::path(stack[k].file).filename().string() + ":" + std::to_string(stack[k].line);
    return label;
  }
  return site < stack.size() ? frame_label(stack[site]) : "(no stack)";
}

bool StackView::is_user_caller(const FrameView& f) {
  if (f.python) return !is_python_library(f.file);
  return !is_library_frame(f) && !is_framework_plumbing(f) && !is_interpreter_frame(f) && !is_startup_frame(f) &&
         !f.module.empty() && f.module.find("/lib/") != 0 && f.module.rfind("/usr/lib", 0) != 0 &&
         f.module.rfind("/lib", 0) != 0;
}

std::string frame_label(const FrameView& f) {
  std::string file = std::filesystem::path(f.file).filename().string();
  if (f.python && file.empty() && f.line == 0) return f.function;  // memtrace's own (live before memtrace attached)
  if (f.python) return file + ":" + std::to_string(f.line) + " in " + (f.function.empty() ? "?" : f.function);
  if (!f.function.empty()) {
    std::string label = f.function;
    if (!file.empty()) label += " at " + file + ":" + std::to_string(f.line);
    return label;
  }
  char offset[24];
  std::snprintf(offset, sizeof offset, "0x%llx",
                static_cast<unsigned long long>(f.module.empty() ? f.address : f.offset));
  return f.module.empty() ? std::string(offset) : std::filesystem::path(f.module).filename().string() + "+" + offset;
}

std::string short_function(const FrameView& f) {
  if (f.function.empty()) return frame_label(f);
  std::string name = f.function;
  for (size_t at; (at = name.find("(anonymous namespace)::")) != std::string::npos;) name.erase(at, 23);
  if (f.python) return name;
  for (const char* suffix : {" const", " &&", " &"})  // qualifiers after the parameters
    if (name.size() > std::strlen(suffix) &&
        name.compare(name.size() - std::strlen(suffix), std::string::npos, suffix) == 0)
      name.resize(name.size() - std::strlen(suffix));
  if (!name.empty() && name.back() == ')') {  // cut the parameter list: from its matching '('
    int depth = 0;
    for (size_t i = name.size(); i-- > 0;) {
      depth += name[i] == ')' ? 1 : name[i] == '(' ? -1 : 0;
      if (depth == 0) {
        if (i > 0) name.resize(i);
        break;
      }
    }
  }
  return name;
}

bool is_interpreter_frame(const FrameView& f) {
  if (f.python) return false;
  if (!f.module.empty()) {
    std::string name = std::filesystem::path(f.module).filename().string();
    // ctypes' foreign calls (its _ctypes extension, libffi) are the interpreter's too.
    return name.rfind("libpython", 0) == 0 || name.rfind("python", 0) == 0 || name.rfind("_ctypes.", 0) == 0 ||
           name.rfind("libffi.so", 0) == 0;
  }
  for (const char* function :
       {"ffi_call", "ffi_call_unix64", "ffi_call_int", "_ctypes_callproc", "_call_function_pointer"})
    if (f.function == function) return true;
  // No module (a PyTorch snapshot's frames): CPython's sources, or its functions by their names.
  for (const char* file : {"Python/", "Objects/", "Modules/main.c", "Include/internal/", "Include/cpython/"})
    if (f.file.find(file) != std::string::npos) return true;
  for (const char* prefix : {"_Py", "Py", "pymain_", "cfunction_", "method_vectorcall", "vectorcall_", "slot_tp_",
                             "call_function", "function_code_fastcall", "do_call_core", "builtin_"})
    if (f.function.rfind(prefix, 0) == 0) return true;
  return false;
}

const FrameView& first_said(const std::vector<FrameView>& stack) {
  const bool python = std::any_of(stack.begin(), stack.end(), [](const FrameView& f) { return f.python; });
  for (const FrameView& f : stack)
    if (!python || !is_interpreter_frame(f)) return f;
  return stack.front();
}

bool is_startup_frame(const FrameView& f) {
  return !f.python && (f.function == "_start" || f.function.rfind("__libc_start_main", 0) == 0 ||
                       f.function == "__libc_start_call_main");
}

void distinguish_labels(const std::vector<SiteLabel>& sites) {
  std::map<std::string, std::vector<const SiteLabel*>> alike;
  for (const SiteLabel& s : sites) alike[*s.label].push_back(&s);
  for (auto& [label, rows] : alike) {
    if (rows.size() < 2) continue;
    std::vector<std::string> extended(rows.size(), label);
    for (size_t callers = 1;; ++callers) {
      bool longer = false;  // some row has more callers to show
      for (size_t r = 0; r < rows.size(); ++r) {
        const std::vector<FrameView>& stack = *rows[r]->stack;
        const size_t first = rows[r]->named_frame;
        if (first >= stack.size()) continue;
        // The callers that say something: not the interpreter's frames, nor the C runtime's start.
        std::vector<size_t> shown{first};
        for (size_t k = first + 1; k < stack.size(); ++k)
          if (!is_interpreter_frame(stack[k]) && !is_startup_frame(stack[k])) shown.push_back(k);
        const size_t last = shown[std::min(callers, shown.size() - 1)];
        std::string chain;
        for (size_t k : shown) {
          if (k > last) break;
          chain += (k == first ? "" : " \u2190 ") + short_function(stack[k]);
        }
        if (!stack[last].file.empty())
          chain += " at " + std::filesystem::path(stack[last].file).filename().string() + ":" +
                   std::to_string(stack[last].line);
        extended[r] = chain;
        longer |= callers + 1 < shown.size();
      }
      if (std::set<std::string>(extended.begin(), extended.end()).size() == rows.size() || !longer) break;
    }
    if (std::set<std::string>(extended.begin(), extended.end()).size() < 2) continue;  // no caller tells them apart
    for (size_t r = 0; r < rows.size(); ++r) *rows[r]->label = extended[r];
  }
}

}  // namespace memtrace
