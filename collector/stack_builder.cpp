#include "stack_builder.h"

#include <cstring>

#include "memtrace.pb.h"
#include "memtrace/ring/protocol.h"

namespace memtrace {

namespace {
FrameInfo native_info(uint64_t address, std::string_view module, uint64_t offset) {
  FrameInfo f;
  f.address = address;
  f.module = module;
  f.offset = offset;
  return f;
}
}  // namespace

void StackBuilder::add_module(uint64_t bias, uint64_t start, uint64_t end, std::string path) {
  // A library loaded where an unloaded one was: frames resolved from now on name the new one.
  auto it = modules_.lower_bound(start);
  while (it != modules_.end() && it->first < end) it = modules_.erase(it);
  if (it != modules_.begin() && std::prev(it)->second.end > start) modules_.erase(std::prev(it));
  modules_[start] = Module{end, bias, std::move(path)};
  ++generation_;
  natives_.clear();  // addresses may now mean something else
  stacks_.clear();
  stack_keys_.clear();
}

size_t StackBuilder::WordsHash::operator()(std::string_view bytes) const {
  // Two words a step, each into its own lane: half the dependent multiplies of one lane.
  constexpr uint64_t kOdd = 0x9E3779B97F4A7C15ull, kOther = 0xC2B2AE3D27D4EB4Full;
  uint64_t a = bytes.size(), b = kOther;
  size_t i = 0;
  for (; i + 16 <= bytes.size(); i += 16) {
    uint64_t w[2];
    std::memcpy(w, bytes.data() + i, 16);
    a = (a ^ w[0]) * kOdd;
    b = (b ^ w[1]) * kOther;
  }
  uint64_t tail[2] = {0, 0};
  std::memcpy(tail, bytes.data() + i, bytes.size() - i);
  a = (a ^ tail[0]) * kOdd;
  b = (b ^ tail[1]) * kOther;
  uint64_t h = (a ^ (b >> 29) ^ (b << 35)) * kOdd;
  return static_cast<size_t>(h ^ (h >> 32));
}

void StackBuilder::add_code(CodeDescription code) {
  uint64_t id = code.id;
  code_[id] = std::move(code);
}

const StackBuilder::Native& StackBuilder::native_frame(uint64_t address) {
  auto [it, fresh] = natives_.try_emplace(address);
  if (!fresh) return it->second;
  Native& n = it->second;
  auto m = modules_.upper_bound(address);
  if (m != modules_.begin() && address < std::prev(m)->second.end) {
    const Module& module = std::prev(m)->second;
    const uint64_t vaddr = address - module.bias;
    const std::vector<SourceFrame>& frames = symbolizer_.symbolize(module.path, vaddr);
    for (const SourceFrame& f : frames) {
      FrameInfo info = native_info(address, module.path, vaddr);
      info.function = f.function;
      info.file = f.file;
      info.line = f.line;
      info.inlined = f.inlined;
      n.frame_ids.push_back(writer_.intern_frame(info));
      n.eval_loop |= f.function.rfind("_PyEval_EvalFrameDefault", 0) == 0;
    }
    if (frames.empty()) n.frame_ids.push_back(writer_.intern_frame(native_info(address, module.path, vaddr)));
  } else {
    n.frame_ids.push_back(writer_.intern_frame(native_info(address, {}, address)));  // no module: an address
  }
  return n;
}

uint64_t StackBuilder::python_frame(uint64_t code, uint64_t offset) {
  auto [it, fresh] = pythons_.try_emplace({code, offset}, 0);
  if (fresh) {
    auto c = code_.find(code);
    if (c != code_.end() && !hidden_python_dir_.empty() && c->second.file.rfind(hidden_python_dir_, 0) == 0) return 0;
    FrameInfo f;
    f.python = true;
    f.function = c != code_.end() ? std::string_view(c->second.name) : "(unknown Python code)";
    if (c != code_.end()) {
      const CodeDescription& d = c->second;
      f.file = d.file;
      int line = python::line_of(d.format, d.first_line, reinterpret_cast<const uint8_t*>(d.table.data()),
                                 d.table.size(), static_cast<int>(offset));
      f.line = static_cast<uint32_t>(line > 0 ? line : 0);
    }
    it->second = writer_.intern_frame(f);
  }
  return it->second;
}

uint64_t StackBuilder::intern(const uint64_t* native, size_t native_count, const uint64_t* python, size_t python_count,
                              uint8_t python_state, bool truncated) {
  if (native_count == 0 && python_count == 0 && python_state != ring::kPythonNoGil) return 0;
  uint32_t flags = (truncated ? pb::STACK_TRUNCATED : 0) |
                   (python_state == ring::kPythonNoGil ? pb::STACK_PYTHON_NO_GIL : 0) |
                   (python_state == ring::kPythonNoFrames ? pb::STACK_NO_PYTHON_FRAMES : 0);
  key_.assign(reinterpret_cast<const char*>(native), native_count * sizeof(uint64_t));
  key_.append(reinterpret_cast<const char*>(python), python_count * 2 * sizeof(uint64_t));
  key_.append(reinterpret_cast<const char*>(&flags), sizeof flags);
  if (auto known = stacks_.find(std::string_view(key_)); known != stacks_.end()) return known->second;
  auto it = stacks_.emplace(std::string_view(stack_keys_.emplace_back(key_)), 0).first;

  // Python frames replace the evaluation-loop frames, innermost first. Where the injector marked
  // the outermost frame of each call of the loop (ring::kEndsLoopCall), a loop frame takes the
  // frames of its call. Unmarked (frames read through the C API), one loop frame runs a whole
  // chain of Python calls since 3.11, so when there are more Python frames than loop frames the
  // innermost loop frame takes the extra ones.
  size_t loops = 0;
  bool marked = false;
  for (size_t i = 0; i < native_count; ++i) loops += native_frame(native[i]).eval_loop;
  for (size_t k = 0; k < python_count && !marked; ++k) marked = python[2 * k] & ring::kEndsLoopCall;
  size_t next_python = 0;
  auto take_one = [&]() {
    const uint64_t code = python[2 * next_python] & ~ring::kEndsLoopCall, offset = python[2 * next_python + 1];
    ++next_python;
    if (uint64_t id = python_frame(code, offset)) scratch_.push_back(id);
  };
  auto take_python = [&](size_t count) {
    for (size_t k = 0; k < count && next_python < python_count; ++k) take_one();
  };
  auto take_call = [&]() {  // through the next frame that ends a call of the loop
    while (next_python < python_count) {
      const bool ends = python[2 * next_python] & ring::kEndsLoopCall;
      take_one();
      if (ends) break;
    }
  };
  scratch_.clear();
  size_t loops_seen = 0;
  for (size_t i = 0; i < native_count; ++i) {
    const Native& n = native_frame(native[i]);
    if (n.eval_loop && python_count > 0) {
      if (marked)
        take_call();
      else
        take_python(loops_seen == 0 && python_count > loops ? python_count - loops + 1 : 1);
      ++loops_seen;
      continue;
    }
    scratch_.insert(scratch_.end(), n.frame_ids.begin(), n.frame_ids.end());
  }
  take_python(python_count);  // no loop frames seen (native stacks off): Python frames go last
  it->second = writer_.intern_stack(scratch_, flags);
  return it->second;
}

}  // namespace memtrace
