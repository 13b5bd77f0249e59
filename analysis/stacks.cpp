#include "memtrace/analysis/stacks.h"

#include <cstdio>
#include <filesystem>

#include "memtrace.pb.h"

namespace memtrace {

bool StackView::is_library_frame(const FrameView& f) {
  // NVTX's functions are inlined from its headers into the program: the program's module, NVTX's code.
  return !f.python && (is_cuda_module(f.module) || f.file.find("/nvtx3/") != std::string::npos);
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
  return out;
}

std::optional<FrameView> StackView::site_frame(uint64_t stack_id, SiteGrouping grouping) const {
  if (grouping == SiteGrouping::kStack || grouping == SiteGrouping::kApi) return std::nullopt;
  const std::vector<uint64_t>* ids = reader_.stack(stack_id);
  if (!ids) return std::nullopt;
  std::optional<FrameView> native;
  for (uint64_t id : *ids) {
    FrameView f = frame(id);
    if (f.python && grouping != SiteGrouping::kNative) return f;
    if (!f.python && !native && !is_library_frame(f)) {
      if (grouping == SiteGrouping::kNative) return f;
      native = std::move(f);
    }
  }
  return native;
}

uint64_t StackView::site_key(uint64_t stack_id, SiteGrouping grouping) {
  if (grouping == SiteGrouping::kStack) return stack_id;
  if (grouping == SiteGrouping::kApi) return 0;
  auto [it, fresh] = keys_.try_emplace(stack_id, 0);
  if (fresh) {
    std::optional<FrameView> f = site_frame(stack_id, grouping);
    // Frame ids and stack ids are different numbers: keep them apart in one key space.
    it->second = f ? f->id : (stack_id | (uint64_t(1) << 63));
  }
  return it->second;
}

std::string frame_label(const FrameView& f) {
  std::string file = std::filesystem::path(f.file).filename().string();
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

}  // namespace memtrace
