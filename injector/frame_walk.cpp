#include "frame_walk.h"

#include <link.h>

#include <atomic>
#include <cstdint>
#include <cstring>

#include "thread_block.h"

namespace memtrace::inject {
namespace {

// How to step from a frame, standing at one instruction, to its caller: the canonical frame
// address (CFA: the caller's stack pointer) is rsp or rbp plus an offset, the return address lies
// at CFA-8, and rbp is either untouched or saved at CFA+rbp_offset. libunwind's fast trace keeps
// the same (src/x86_64/Gtrace.c, unw_tdep_frame_t).
enum RuleKind : uint8_t { kEmpty, kFromRsp, kFromRbp, kOutermost, kUnknown };
struct Rule {
  uint64_t pc;
  int32_t cfa_offset;
  int16_t rbp_offset;  // 0: rbp still holds the caller's value
  RuleKind kind;
};

// DWARF register numbers on x86-64 (System V psABI, figure 3.36).
constexpr uint64_t kRbp = 6, kRsp = 7, kReturnAddress = 16;

// Reads .eh_frame's encodings; a read past END or an encoding not understood clears ok.
struct Reader {
  const uint8_t* p;
  const uint8_t* end;
  bool ok = true;

  uint8_t byte() {
    if (p >= end) return fail();
    return *p++;
  }
  template <typename T>
  T fixed() {
    T value{};
    if (static_cast<size_t>(end - p) < sizeof value) return static_cast<T>(fail());
    std::memcpy(&value, p, sizeof value);
    p += sizeof value;
    return value;
  }
  uint64_t uleb() {
    uint64_t value = 0;
    for (int shift = 0; ok; shift += 7) {
      const uint8_t b = byte();
      if (shift < 64) value |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) break;
    }
    return value;
  }
  int64_t sleb() {
    uint64_t value = 0;
    int shift = 0;
    uint8_t b = 0;
    do {
      b = byte();
      if (shift < 64) value |= static_cast<uint64_t>(b & 0x7f) << shift;
      shift += 7;
    } while ((b & 0x80) && ok);
    if (shift < 64 && (b & 0x40)) value |= ~uint64_t(0) << shift;
    return static_cast<int64_t>(value);
  }
  void skip(uint64_t bytes) {
    if (bytes > static_cast<uint64_t>(end - p))
      fail();
    else
      p += bytes;
  }
  // A pointer in DW_EH_PE encoding ENCODING (LSB Core, "DWARF Exception Header Encoding");
  // DATA_BASE: what datarel is relative to (.eh_frame_hdr). Indirect pointers are not followed.
  uint64_t pointer(uint8_t encoding, uint64_t data_base) {
    const uint64_t here = reinterpret_cast<uint64_t>(p);
    uint64_t value = 0;
    switch (encoding & 0x0f) {
      case 0x00: value = fixed<uint64_t>(); break;  // absptr
      case 0x01: value = uleb(); break;
      case 0x02: value = fixed<uint16_t>(); break;
      case 0x03: value = fixed<uint32_t>(); break;
      case 0x04: value = fixed<uint64_t>(); break;
      case 0x09: value = static_cast<uint64_t>(sleb()); break;
      case 0x0a: value = static_cast<uint64_t>(static_cast<int64_t>(fixed<int16_t>())); break;
      case 0x0b: value = static_cast<uint64_t>(static_cast<int64_t>(fixed<int32_t>())); break;
      case 0x0c: value = fixed<uint64_t>(); break;
      default: return fail();
    }
    switch (encoding & 0x70) {
      case 0x00: return value;
      case 0x10: return value + here;       // pcrel
      case 0x30: return value + data_base;  // datarel
      default: return fail();               // textrel, funcrel, aligned: not seen on x86-64
    }
  }
  uint64_t fail() {
    ok = false;
    p = end;
    return 0;
  }
};

// What a Common Information Entry says for its FDEs.
struct Cie {
  uint64_t code_align = 1;
  int64_t data_align = -8;
  uint8_t pointer_encoding = 0;  // of the FDEs' addresses ('R')
  bool augmented = false;        // 'z': FDEs carry augmentation data, to skip
  Reader instructions{nullptr, nullptr};
};

bool read_cie(const uint8_t* at, Cie& cie) {
  uint32_t length = 0;
  std::memcpy(&length, at, 4);
  if (length == 0 || length == 0xffffffff) return false;  // a terminator, or 64-bit DWARF (not in .eh_frame)
  Reader r{at + 4, at + 4 + length};
  const uint8_t version = (r.fixed<uint32_t>() == 0) ? r.byte() : 0;  // a CIE's id is 0 in .eh_frame
  if (version != 1 && version != 3) return false;
  const auto* augmentation = reinterpret_cast<const char*>(r.p);
  const size_t letters = strnlen(augmentation, static_cast<size_t>(r.end - r.p));
  r.skip(letters + 1);
  cie.code_align = r.uleb();
  cie.data_align = r.sleb();
  const uint64_t return_column = version == 1 ? r.byte() : r.uleb();
  if (!r.ok || return_column != kReturnAddress) return false;
  if (letters > 0) {
    if (augmentation[0] != 'z') return false;  // "eh" and other old forms
    const uint64_t bytes = r.uleb();
    const uint8_t* data_end = r.p + bytes;
    for (size_t i = 1; i < letters && r.ok; ++i) {
      switch (augmentation[i]) {
        case 'R': cie.pointer_encoding = r.byte(); break;
        case 'P': r.pointer(r.byte() & 0x7f, 0); break;  // the personality routine: skipped
        case 'L': r.byte(); break;                       // the LSDA's encoding: in the FDE's data
        case 'B':
        case 'G': break;        // AArch64 keys, memory tags
        default: return false;  // 'S' (a signal frame) among them
      }
    }
    if (!r.ok || data_end > r.end) return false;
    r.p = data_end;
    cie.augmented = true;
  }
  cie.instructions = r;
  return r.ok;
}

// The rules a CFA program leaves for the registers a backtrace needs.
struct RegisterRule {
  enum How : uint8_t { kSame, kUndefined, kOffset, kOther } how = kSame;
  int64_t offset = 0;
};
struct FrameState {
  uint64_t cfa_register = kRsp;
  int64_t cfa_offset = 8;
  bool cfa_expression = false;
  RegisterRule rbp, rsp, return_address;

  RegisterRule* rule(uint64_t reg) {
    return reg == kRbp ? &rbp : reg == kRsp ? &rsp : reg == kReturnAddress ? &return_address : nullptr;
  }
  void set(uint64_t reg, RegisterRule::How how, int64_t offset = 0) {
    if (RegisterRule* r = rule(reg)) *r = RegisterRule{how, offset};
  }
  void restore(uint64_t reg, FrameState initial) {
    if (RegisterRule* r = rule(reg)) *r = *initial.rule(reg);
  }
};

// Runs the CFA instructions in R from address LOC until the row that holds PC (DWARF 5, 6.4.2).
// INITIAL: the CIE's rows, for DW_CFA_restore. False for an instruction not understood.
bool run_cfa_program(Reader r, uint64_t loc, uint64_t pc, const Cie& cie, const FrameState& initial,
                     FrameState& state) {
  FrameState remembered[8];
  int depth = 0;
  auto advance = [&](uint64_t delta) {
    loc += delta * cie.code_align;
    return loc <= pc;
  };
  while (r.ok && r.p < r.end) {
    const uint8_t op = r.byte();
    const uint8_t operand = op & 0x3f;
    switch (op & 0xc0) {
      case 0x40:  // DW_CFA_advance_loc
        if (!advance(operand)) return true;
        continue;
      case 0x80:  // DW_CFA_offset
        state.set(operand, RegisterRule::kOffset, static_cast<int64_t>(r.uleb()) * cie.data_align);
        continue;
      case 0xc0:  // DW_CFA_restore
        state.restore(operand, initial);
        continue;
    }
    uint64_t reg = 0;
    switch (op) {
      case 0x00: break;  // nop
      case 0x01:         // set_loc
        loc = r.pointer(cie.pointer_encoding, 0);
        if (loc > pc) return r.ok;
        break;
      case 0x02:
        if (!advance(r.byte())) return r.ok;
        break;
      case 0x03:
        if (!advance(r.fixed<uint16_t>())) return r.ok;
        break;
      case 0x04:
        if (!advance(r.fixed<uint32_t>())) return r.ok;
        break;
      case 0x05:  // offset_extended
        reg = r.uleb();
        state.set(reg, RegisterRule::kOffset, static_cast<int64_t>(r.uleb()) * cie.data_align);
        break;
      case 0x06:  // restore_extended
        state.restore(r.uleb(), initial);
        break;
      case 0x07: state.set(r.uleb(), RegisterRule::kUndefined); break;
      case 0x08: state.set(r.uleb(), RegisterRule::kSame); break;
      case 0x09:  // register: saved in another register
        reg = r.uleb();
        r.uleb();
        state.set(reg, RegisterRule::kOther);
        break;
      case 0x0a:  // remember_state: the whole row, CFA included (as libgcc's unwind-dw2.c does)
        if (depth == 8) return false;
        remembered[depth++] = state;
        break;
      case 0x0b:  // restore_state
        if (depth == 0) return false;
        state = remembered[--depth];
        break;
      case 0x0c:  // def_cfa
        state.cfa_register = r.uleb();
        state.cfa_offset = static_cast<int64_t>(r.uleb());
        state.cfa_expression = false;
        break;
      case 0x0d:
        state.cfa_register = r.uleb();
        state.cfa_expression = false;
        break;
      case 0x0e: state.cfa_offset = static_cast<int64_t>(r.uleb()); break;
      case 0x0f:  // def_cfa_expression
        r.skip(r.uleb());
        state.cfa_expression = true;
        break;
      case 0x10:  // expression
      case 0x16:  // val_expression
        reg = r.uleb();
        r.skip(r.uleb());
        state.set(reg, RegisterRule::kOther);
        break;
      case 0x11:  // offset_extended_sf
        reg = r.uleb();
        state.set(reg, RegisterRule::kOffset, r.sleb() * cie.data_align);
        break;
      case 0x12:  // def_cfa_sf
        state.cfa_register = r.uleb();
        state.cfa_offset = r.sleb() * cie.data_align;
        state.cfa_expression = false;
        break;
      case 0x13: state.cfa_offset = r.sleb() * cie.data_align; break;
      case 0x14:  // val_offset
        reg = r.uleb();
        r.uleb();
        state.set(reg, RegisterRule::kOther);
        break;
      case 0x15:  // val_offset_sf
        reg = r.uleb();
        r.sleb();
        state.set(reg, RegisterRule::kOther);
        break;
      case 0x2e: r.uleb(); break;  // GNU_args_size
      case 0x2f:                   // GNU_negative_offset_extended
        reg = r.uleb();
        state.set(reg, RegisterRule::kOffset, -static_cast<int64_t>(r.uleb()) * cie.data_align);
        break;
      default: return false;
    }
  }
  return r.ok;
}

// A module's code (the loaded segment holding an address) and its .eh_frame_hdr (null: none).
struct Module {
  uint64_t start, end;
  const uint8_t* header;
  size_t bytes;
};
// The modules a thread's walks met most recently: the loader's list is searched only for others.
constexpr int kKnownModules = 8;
struct KnownModules {
  Module at[kKnownModules];
  int next;
};

struct ModuleSearch {
  uint64_t pc;
  Module found{};
};

int find_module(dl_phdr_info* info, size_t, void* data) {
  auto* search = static_cast<ModuleSearch*>(data);
  Module module{};
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    const uint64_t start = info->dlpi_addr + ph.p_vaddr;
    if (ph.p_type == PT_LOAD && search->pc >= start && search->pc < start + ph.p_memsz) {
      module.start = start;
      module.end = start + ph.p_memsz;
    }
    if (ph.p_type == PT_GNU_EH_FRAME) {
      module.header = reinterpret_cast<const uint8_t*>(start);
      module.bytes = ph.p_memsz;
    }
  }
  if (!module.end) return 0;
  search->found = module;
  return 1;
}

const Module* module_of(uint64_t pc, KnownModules& known) {
  for (const Module& m : known.at)
    if (pc >= m.start && pc < m.end) return &m;
  ModuleSearch search{pc};
  if (!dl_iterate_phdr(find_module, &search)) return nullptr;
  Module& slot = known.at[known.next];
  known.next = (known.next + 1) % kKnownModules;
  slot = search.found;
  return &slot;
}

// The FDE whose range may hold PC: .eh_frame_hdr's sorted table, searched (LSB Core, ".eh_frame_hdr").
const uint8_t* find_fde(uint64_t pc, KnownModules& known) {
  const Module* module = module_of(pc, known);
  if (!module || !module->header || module->bytes < 4 || module->header[0] != 1) return nullptr;
  const uint8_t* header = module->header;
  const auto base = reinterpret_cast<uint64_t>(header);
  Reader r{header + 4, header + module->bytes};
  r.pointer(header[1], base);  // .eh_frame's address
  const uint64_t count = r.pointer(header[2], base);
  // Pairs of (function start, FDE) as signed 4-byte offsets from the header: what every linker writes.
  if (!r.ok || header[3] != 0x3b || count == 0 || count > static_cast<uint64_t>(r.end - r.p) / 8) return nullptr;
  const uint8_t* table = r.p;
  auto entry = [&](uint64_t i, int field) {
    int32_t value = 0;
    std::memcpy(&value, table + 8 * i + 4 * field, 4);
    return base + static_cast<uint64_t>(static_cast<int64_t>(value));
  };
  uint64_t low = 0, high = count;  // the last entry starting at or before PC
  while (high - low > 1) {
    const uint64_t middle = low + (high - low) / 2;
    (entry(middle, 0) <= pc ? low : high) = middle;
  }
  return entry(low, 0) <= pc ? reinterpret_cast<const uint8_t*>(entry(low, 1)) : nullptr;
}

Rule rule_for(uint64_t pc, KnownModules& known) {
  Rule rule{pc, 0, 0, kUnknown};
  const uint8_t* fde = find_fde(pc, known);
  if (!fde) return rule;
  uint32_t length = 0;
  std::memcpy(&length, fde, 4);
  if (length == 0 || length == 0xffffffff) return rule;
  Reader r{fde + 4, fde + 4 + length};
  const uint8_t* cie_pointer = r.p;
  const uint32_t cie_offset = r.fixed<uint32_t>();
  Cie cie;
  if (!r.ok || cie_offset == 0 || !read_cie(cie_pointer - cie_offset, cie)) return rule;
  const uint64_t start = r.pointer(cie.pointer_encoding, 0);
  const uint64_t range = r.pointer(cie.pointer_encoding & 0x0f, 0);
  if (cie.augmented) r.skip(r.uleb());
  if (!r.ok || pc < start || pc - start >= range) return rule;  // code without unwind information
  FrameState initial;
  if (!run_cfa_program(cie.instructions, start, ~uint64_t(0), cie, initial, initial)) return rule;
  FrameState state = initial;
  if (!run_cfa_program(r, start, pc, cie, initial, state)) return rule;
  if (state.return_address.how == RegisterRule::kUndefined) {  // the thread's first frame (_start, clone)
    rule.kind = kOutermost;
    return rule;
  }
  const bool cfa_ok = !state.cfa_expression && (state.cfa_register == kRsp || state.cfa_register == kRbp) &&
                      state.cfa_offset > INT32_MIN && state.cfa_offset < INT32_MAX;
  const bool return_ok = state.return_address.how == RegisterRule::kOffset && state.return_address.offset == -8;
  const bool rbp_ok = state.rbp.how == RegisterRule::kSame ||
                      (state.rbp.how == RegisterRule::kOffset && state.rbp.offset < 0 && state.rbp.offset > INT16_MIN &&
                       state.rbp.offset % 8 == 0);  // a word's slot (WalkedFrame::step keeps a flag in its low bit)
  if (!cfa_ok || !return_ok || !rbp_ok || state.rsp.how != RegisterRule::kSame) return rule;
  rule.kind = state.cfa_register == kRsp ? kFromRsp : kFromRbp;
  rule.cfa_offset = static_cast<int32_t>(state.cfa_offset);
  rule.rbp_offset = static_cast<int16_t>(state.rbp.how == RegisterRule::kOffset ? state.rbp.offset : 0);
  return rule;
}

// A frame as a walk found it, before stepping it. STEP: where stepping it read rbp (0: it left rbp
// as it was), plus kCfaFromRbp when its canonical frame address came from rbp (the slot is a
// word's address: its low bit is free). Only such a frame's rbp decides where the frames past it
// lie: another frame's rbp may be anything (a register the function uses for its own values).
struct WalkedFrame {
  uint64_t rip, rsp, rbp, step;
};
constexpr uint64_t kCfaFromRbp = 1;
// A thread's last walk: COUNT frames; COMPLETE when its last frame's rule said the stack ends there
// (not when it ended at its WalkStop's frame).
constexpr int kMostFrames = 320;
struct Walk {
  int count;
  bool complete;
  WalkedFrame frames[kMostFrames];
};

// This thread's rules, by instruction address (a slot an address, the last one read kept), and
// its last two walks: the one read from and the one being written.
constexpr int kRuleBits = 11;
struct ThreadWalks {
  uint64_t generation;
  uint64_t serial;  // walks that succeeded
  int last;
  Walk walks[2];
  Rule rules[size_t(1) << kRuleBits];
  KnownModules modules;
};
std::atomic<uint64_t> g_generation{0};  // a thread's block starts zero-filled: nothing to clear

__attribute__((noinline)) void read_rule(Rule& slot, uint64_t pc, KnownModules& known) { slot = rule_for(pc, known); }

// The walk reads other frames' words, which a sanitizer build would take for overflows.
__attribute__((no_sanitize("address"))) uint64_t word_at(uint64_t address) {
  uint64_t word;
  std::memcpy(&word, reinterpret_cast<const void*>(address), 8);
  return word;
}

// Frame K's rbp as it is now, where the walk reached the last walk's frame J with rbp RBP and took
// its frames from there to K: the word the last of them that restored rbp restores it from (only
// where a step uses it, or the walk steps on from K: the last walk's may differ, a register the
// function uses for values of its own).
__attribute__((no_sanitize("address"))) uint64_t rbp_now(const Walk& last, int j, int k, uint64_t rbp) {
  for (int i = k - 1; i >= j; --i)
    if (const uint64_t slot = last.frames[i].step & ~kCfaFromRbp) return word_at(slot);
  return rbp;
}

// Where the walk reached the last walk's frame J (its rbp RBP), the frames after it that it takes,
// from K on: those whose step reads what it read then (the return address, and rbp where the CFA
// came from it), into OUT (the last walk's frame I is OUT[I]), up to END or, with STOPS, the stop's
// frame (STOPPED then). Returns the last frame taken.
template <bool kStops>
__attribute__((noinline, no_sanitize("address"))) int take_frames(const Walk& last, int j, int k, int end, uint64_t rbp,
                                                                  void** out, uint64_t stop_start, uint64_t stop_length,
                                                                  int& stops_left, bool& stopped) {
  for (; k + 1 < end; ++k) {
    const WalkedFrame &from = last.frames[k], &to = last.frames[k + 1];
    if (((from.step & kCfaFromRbp) && rbp_now(last, j, k, rbp) != from.rbp) || word_at(to.rsp - 8) != to.rip) break;
    out[k + 1] = reinterpret_cast<void*>(to.rip);
    if constexpr (kStops) {
      if (to.rip - stop_start < stop_length && --stops_left == 0) [[unlikely]] {
        stopped = true;
        return k + 1;
      }
    }
  }
  return k;
}

}  // namespace

void forget_frame_rules() { g_generation.fetch_add(1, std::memory_order_relaxed); }

// A step is a function of the frame's rip, rsp and rbp, its rule (a function of its instruction)
// and the words it reads from the stack. So where this walk reaches a frame the last walk passed
// through (the same three registers), the last walk's outer frames are this walk's too for as long
// as the words its steps read hold what they held then: checked word by word, two loads a frame
// instead of a rule's lookup. A loop allocating from the same place walks its own frames only.
__attribute__((noinline, no_sanitize("address"))) int walk_frames(void** frames, int max, WalkTail* tail,
                                                                  const WalkStop* stop) {
  auto* thread = static_cast<ThreadWalks*>(thread_block(ThreadBlock::kFrameRules, sizeof(ThreadWalks)));
  if (!thread) return -1;
  if (const uint64_t now = g_generation.load(std::memory_order_relaxed); thread->generation != now) {
    std::memset(thread->rules, 0, sizeof thread->rules);
    std::memset(&thread->modules, 0, sizeof thread->modules);
    thread->walks[0].count = thread->walks[1].count = 0;
    thread->generation = now;
  }
  Walk& last = thread->walks[thread->last];
  Walk& walk = thread->walks[1 - thread->last];
  if (max > kMostFrames) max = kMostFrames;
  // STOP's frames still to pass before the walk ends (never, without one): a subtraction and a
  // comparison a frame.
  const uint64_t stop_start = stop ? stop->start : 0, stop_length = stop ? stop->length : 0;
  int stops_left = stop && stop->count > 0 ? stop->count : -1;
  uint64_t rip, rsp, rbp;
  asm volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2" : "=r"(rip), "=r"(rsp), "=r"(rbp));
  int n = 0, j = 0;  // J: the last walk's first frame not below this one
  bool complete = false;
  int shared = 0;  // outermost frames that are the last walk's, to its end
  while (n < max) {
    while (j < last.count && last.frames[j].rsp < rsp) ++j;
    int step_from = n;  // the frame stepped next (in this walk)
    // (The first frame's rule is its own instruction's, a caller's its call's: first matches first.)
    if (j < last.count && last.frames[j].rsp == rsp && last.frames[j].rip == rip && last.frames[j].rbp == rbp &&
        (j == 0) == (n == 0)) {
      const int end = last.count - j < max - n ? last.count : j + (max - n);
      void** out = frames + (n - j);  // the last walk's frame K is this walk's OUT[K]
      out[j] = reinterpret_cast<void*>(rip);
      int k = j;
      bool stopped = rip - stop_start < stop_length && --stops_left == 0;
      if (!stopped)
        k = stop_length ? take_frames<true>(last, j, k, end, rbp, out, stop_start, stop_length, stops_left, stopped)
                        : take_frames<false>(last, j, k, end, rbp, out, 0, 0, stops_left, stopped);
      const int taken = k - j + 1;
      // Both walks end with the last walk's last frame: it was the stack's outermost, or STOP's.
      const bool ends_together = k + 1 == last.count && (last.complete || stopped);
      if (ends_together && n == j) {
        // The last walk's frames from J on, below as many new ones as it had there (a loop at
        // the same depth): the new ones go into it, which stays the last walk. Copying ~40
        // frames the other way cost ~150 instructions a walk.
        std::memcpy(last.frames, walk.frames, static_cast<size_t>(n) * sizeof(WalkedFrame));
        ++thread->serial;
        if (tail) *tail = WalkTail{thread->serial, taken};
        return n + taken;
      }
      std::memcpy(&walk.frames[n], &last.frames[j], static_cast<size_t>(taken) * sizeof(WalkedFrame));
      n += taken;
      if (ends_together) {
        complete = last.complete;
        shared = taken;
        break;
      }
      if (stopped || n == max) break;
      step_from = n - 1;
      rip = last.frames[k].rip;
      rsp = last.frames[k].rsp;
      rbp = walk.frames[n - 1].rbp = rbp_now(last, j, k, rbp);  // the walk steps on from it
      j = k;
    } else {
      walk.frames[n] = WalkedFrame{rip, rsp, rbp, 0};
      frames[n++] = reinterpret_cast<void*>(rip);
      if (rip - stop_start < stop_length && --stops_left == 0) break;
    }
    // A caller's rule is its call instruction's, the return address less one.
    const uint64_t pc = step_from == 0 ? rip : rip - 1;
    Rule* rule = &thread->rules[(pc * 0x9E3779B97F4A7C15ull) >> (64 - kRuleBits)];
    if (rule->pc != pc) read_rule(*rule, pc, thread->modules);
    if (rule->kind == kOutermost) {
      complete = true;
      break;
    }
    if (rule->kind != kFromRsp && rule->kind != kFromRbp) return -1;
    const uint64_t cfa = (rule->kind == kFromRsp ? rsp : rbp) + static_cast<int64_t>(rule->cfa_offset);
    // A CFA below this frame's, or not word-aligned, is no stack libunwind would walk either.
    if (cfa <= rsp || (cfa & 7) != 0) return -1;
    rip = word_at(cfa - 8);
    walk.frames[step_from].step = rule->kind == kFromRbp ? kCfaFromRbp : 0;
    if (rule->rbp_offset) {
      walk.frames[step_from].step |= cfa + rule->rbp_offset;
      rbp = word_at(cfa + rule->rbp_offset);
    }
    rsp = cfa;
    if (rip < 0x4000) break;  // where libunwind's fast trace stops too
  }
  walk.count = n;
  walk.complete = complete;
  thread->last = 1 - thread->last;
  ++thread->serial;
  if (tail) *tail = WalkTail{thread->serial, shared};
  return n;
}

}  // namespace memtrace::inject
