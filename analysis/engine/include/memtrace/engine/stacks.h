// Stacks as people read them: frames resolved from a trace's tables, the frames of memtrace and
// of the CUDA libraries cut from the top, and the innermost frame of the user's own code.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "memtrace/format/trace_reader.h"

namespace memtrace {

struct FrameView {
  uint64_t id = 0;
  bool python = false;
  std::string function;
  std::string file;
  uint32_t line = 0;
  std::string module;
  uint64_t offset = 0;
  uint64_t address = 0;
  bool inlined = false;
};

// How report sites are grouped: by the innermost frame of the user's code (the innermost Python
// frame outside the standard library and installed packages, if there is one), by the innermost
// Python frame, by the innermost native frame, by the whole stack, or by API alone.
// By owner: the library whose code called CUDA, one site per call into it (owners.h).
enum class SiteGrouping { kUser, kPython, kNative, kStack, kApi, kOwner };

class StackView {
 public:
  StackView(const TraceReader& reader, bool keep_cuda_frames) : reader_(reader), keep_cuda_(keep_cuda_frames) {}

  // The shown stack, innermost first.
  std::vector<FrameView> frames(uint64_t stack_id) const;
  // Every frame, the CUDA libraries' too, innermost first.
  std::vector<FrameView> all_frames(uint64_t stack_id) const;
  uint32_t flags(uint64_t stack_id) const { return reader_.stack_flags(stack_id); }
  // The frame a site is named by under GROUPING (none for kStack, or an empty stack).
  std::optional<FrameView> site_frame(uint64_t stack_id, SiteGrouping grouping) const;
  // What a site groups by: a frame id; for kUser the site's frame with the user's frames that
  // called it (a helper is one site per caller); the stack id for kStack. Cached.
  uint64_t site_key(uint64_t stack_id, SiteGrouping grouping);
  // A frame of the user's own code below a site: Python outside the libraries, native code outside
  // the system's libraries, CUDA, the interpreter and the frameworks' plumbing.
  static bool is_user_caller(const FrameView& frame);
  // Whether the kUser site of STACK_ID is called from more than one function of the user's (after
  // site_key has seen every stack): then its name says its caller.
  bool has_several_callers(uint64_t stack_id) const;

  FrameView frame(uint64_t frame_id) const;
  static bool is_cuda_module(const std::string& module);
  // Frames of the CUDA libraries, and of NVTX's header-only functions: cut from the top of stacks.
  static bool is_library_frame(const FrameView& frame);
  // A CUDA API's C name (cudaMalloc, cuMemAlloc_v2): where a statically linked runtime's frames
  // end, also cut from the top.
  static bool is_cuda_entry_point(const std::string& function);
  // PyTorch's own C++ between an allocation and the operator or backward function that made it
  // (its allocator, dispatcher, autograd engine; libstdc++; a thread's start): passed over when a
  // user's site is named after a native frame (a backward pass's thread runs no Python).
  static bool is_framework_plumbing(const FrameView& frame);
  // Python code that is not the user's: the standard library, site-packages and dist-packages.
  // The default site of an allocation is the innermost Python frame outside them.
  static bool is_python_library(const std::string& file);

 private:
  static void drop_static_runtime(std::vector<FrameView>& stack);

  const TraceReader& reader_;
  bool keep_cuda_;
  std::unordered_map<uint64_t, uint64_t> keys_;
  std::map<std::vector<uint64_t>, uint64_t> chains_;        // a site's frame and its user callers -> key
  std::unordered_map<std::string, uint64_t> functions_;     // a caller's module, file and function -> number
  std::unordered_map<uint64_t, uint32_t> chains_per_site_;  // a site's frame id -> its caller chains
  std::unordered_map<std::string, uint64_t> owners_;        // an owner and its part -> number
};

// "train.py:88 in forward", "forward(int) at model.cpp:42", "libfoo.so+0x1a2b".
std::string frame_label(const FrameView& frame);
// A site grouped by owner: "NCCL: ncclCommInitRank ← setup at train.py:40", "the program".
// STACK: every frame (StackView::all_frames).
std::string owner_label(const std::vector<FrameView>& stack);
// A function's name as a chain of callers shows it: "device_alloc" for
// "(anonymous namespace)::device_alloc(unsigned long)"; module+offset when it has none.
std::string short_function(const FrameView& frame);
// The C runtime's start-up frames (_start, __libc_start_main): below every main, said by no one.
bool is_startup_frame(const FrameView& frame);
// The Python interpreter's own frames (its evaluation loop, calls, object machinery): between two
// Python frames they say nothing the Python frames do not.
bool is_interpreter_frame(const FrameView& frame);

// A site's name with its first caller of the user's: "device_alloc ← load_weights at train.py:40".
std::string with_caller(const std::vector<FrameView>& stack, size_t site);

// The innermost frame worth a name (not the interpreter's under Python); STACK is not empty.
const FrameView& first_said(const std::vector<FrameView>& stack);

// Labels of sites that read alike, extended with their callers until they differ:
// "device_alloc ← load_weights at train_loop.cpp:40". Each site is its label, its stack as shown
// and the index in it of the frame the label names.
struct SiteLabel {
  std::string* label;
  const std::vector<FrameView>* stack;
  size_t named_frame;
};
void distinguish_labels(const std::vector<SiteLabel>& sites);
template <typename SiteLike>
void distinguish_sites(std::vector<SiteLike>& sites) {
  std::vector<SiteLabel> labels;
  for (SiteLike& s : sites) labels.push_back({&s.location, &s.stack, s.named_frame});
  distinguish_labels(labels);
}

// Fills in a site's stack as shown and the label that names it under GROUPING: its frame, else
// its innermost one, else "(no stack)"; "every cudaMalloc call" when sites are APIs alone. SITE
// is a SiteTotal or a SiteGrowth: what has `site.api`, `stack`, `named_frame` and `location`.
template <typename SiteLike>
void resolve_site(SiteLike& s, uint64_t stack_id, const StackView& stacks, SiteGrouping grouping) {
  s.stack = stacks.frames(stack_id);
  std::optional<FrameView> named = stacks.site_frame(stack_id, grouping);
  if (!named && !s.stack.empty()) named = first_said(s.stack);
  s.named_frame = 0;
  for (size_t k = 0; named && k < s.stack.size(); ++k)
    if (s.stack[k].id == named->id) {
      s.named_frame = k;
      break;
    }
  s.location = grouping == SiteGrouping::kApi     ? "every " + std::string(api_name(s.site.api)) + " call"
               : grouping == SiteGrouping::kOwner ? owner_label(stacks.all_frames(stack_id))
               : named                            ? frame_label(*named)
                                                  : "(no stack)";
  if (named && grouping == SiteGrouping::kUser && stacks.has_several_callers(stack_id))
    s.location = with_caller(s.stack, s.named_frame);
}

}  // namespace memtrace
