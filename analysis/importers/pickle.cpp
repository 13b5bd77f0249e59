#include "memtrace/importers/pickle.h"

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <new>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <unordered_set>

namespace memtrace::pickle {

namespace {

// A pickle's BINFLOAT holds a double's bits big-endian (memcpy, not std::bit_cast: the bundle's
// build root has g++ 10).
double double_from_big_endian(uint64_t n) {
  n = __builtin_bswap64(n);
  double d;
  std::memcpy(&d, &n, sizeof d);
  return d;
}
uint64_t big_endian_bits(double d) {
  uint64_t n;
  std::memcpy(&n, &d, sizeof n);
  return __builtin_bswap64(n);
}
const std::vector<Ref> kNoItems;
const std::vector<std::pair<Ref, Ref>> kNoEntries;

// Opcodes (CPython's Lib/pickletools.py names them).
enum Op : uint8_t {
  kMark = '(',
  kStop = '.',
  kPop = '0',
  kPopMark = '1',
  kDup = '2',
  kFloat = 'F',
  kInt = 'I',
  kBinInt = 'J',
  kBinInt1 = 'K',
  kLong = 'L',
  kBinInt2 = 'M',
  kNone = 'N',
  kPersId = 'P',
  kBinPersId = 'Q',
  kReduce = 'R',
  kString = 'S',
  kBinString = 'T',
  kShortBinString = 'U',
  kUnicode = 'V',
  kBinUnicode = 'X',
  kAppend = 'a',
  kBuild = 'b',
  kGlobal = 'c',
  kDict = 'd',
  kEmptyDict = '}',
  kAppends = 'e',
  kGet = 'g',
  kBinGet = 'h',
  kInst = 'i',
  kLongBinGet = 'j',
  kList = 'l',
  kEmptyList = ']',
  kObj = 'o',
  kPut = 'p',
  kBinPut = 'q',
  kLongBinPut = 'r',
  kSetItem = 's',
  kTuple = 't',
  kEmptyTuple = ')',
  kSetItems = 'u',
  kBinFloat = 'G',
  kProto = 0x80,
  kNewObj = 0x81,
  kExt1 = 0x82,
  kExt2 = 0x83,
  kExt4 = 0x84,
  kTuple1 = 0x85,
  kTuple2 = 0x86,
  kTuple3 = 0x87,
  kNewTrue = 0x88,
  kNewFalse = 0x89,
  kLong1 = 0x8a,
  kLong4 = 0x8b,
  kBinBytes = 'B',
  kShortBinBytes = 'C',
  kShortBinUnicode = 0x8c,
  kBinUnicode8 = 0x8d,
  kBinBytes8 = 0x8e,
  kEmptySet = 0x8f,
  kAddItems = 0x90,
  kFrozenSet = 0x91,
  kNewObjEx = 0x92,
  kStackGlobal = 0x93,
  kMemoize = 0x94,
  kFrame = 0x95,
  kByteArray8 = 0x96,
  kNextBuffer = 0x97,
  kReadOnlyBuffer = 0x98,
};

// What an opcode that is not plain data would have done.
const char* refused(uint8_t op) {
  switch (op) {
    case kGlobal:
    case kStackGlobal: return "imports a Python object (GLOBAL)";
    case kInst:
    case kObj:
    case kNewObj:
    case kNewObjEx: return "creates an instance of a class";
    case kReduce: return "calls a function (REDUCE)";
    case kBuild: return "sets an object's state (BUILD)";
    case kPersId:
    case kBinPersId: return "refers to a persistent object";
    case kExt1:
    case kExt2:
    case kExt4: return "refers to a registered extension";
    case kByteArray8:
    case kNextBuffer:
    case kReadOnlyBuffer: return "refers to an out-of-band buffer";
    default: return nullptr;
  }
}

// The bits set in X: the popcnt instruction where the build may use it, else a few inline
// instructions (std::popcount is a call into libgcc on x86-64's baseline, a hot one in rank()).
inline uint32_t popcount64(uint64_t x) {
#if defined(__POPCNT__)
  return static_cast<uint32_t>(__builtin_popcountll(x));
#else
  x = x - ((x >> 1) & 0x5555555555555555ull);
  x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
  x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
  return static_cast<uint32_t>((x * 0x0101010101010101ull) >> 56);
#endif
}

// A set of memo indices: bits up to the file's length (a pickle puts at most one entry per byte),
// a hash set for the rest (only a hostile pickle has them).
class MemoIds {
 public:
  explicit MemoIds(size_t dense_limit) : dense_limit_(dense_limit) {}
  // Whether ID was not in the set before.
  bool add(uint64_t id) {
    if (id < dense_limit_) {
      size_t word = id >> 6;
      if (word >= words_.size()) words_.resize(std::max(word + 1, 2 * words_.size()));
      uint64_t bit = uint64_t(1) << (id & 63);
      if (words_[word] & bit) return false;
      words_[word] |= bit;
    } else if (!sparse_.insert(id).second) {
      return false;
    }
    ++count_;
    return true;
  }
  __attribute__((always_inline)) bool has(uint64_t id) const {
    if (id >= dense_limit_) return sparse_.count(id) > 0;
    size_t word = id >> 6;
    return word < words_.size() && (words_[word] >> (id & 63)) & 1;
  }
  // Adds every index of OTHER (of the same dense limit).
  void merge(const MemoIds& other) {
    if (other.words_.size() > words_.size()) words_.resize(other.words_.size());
    for (size_t w = 0; w < other.words_.size(); ++w) words_[w] |= other.words_[w];
    sparse_.insert(other.sparse_.begin(), other.sparse_.end());
    count_ = sparse_.size();
    for (uint64_t word : words_) count_ += popcount64(word);
  }
  // Counts on from COUNT, the indices put before not known.
  void start_at(size_t count) { count_ = count; }
  size_t count() const { return count_; }

  // Once every index is in: each dense one numbered 0, 1, ... in order (rank), for a flat table.
  void number() {
    ranks_.resize(words_.size());
    uint32_t before = 0;
    for (size_t w = 0; w < words_.size(); ++w) {
      ranks_[w] = before;
      before += popcount64(words_[w]);
    }
    dense_count_ = before;
  }
  size_t dense_count() const { return dense_count_; }
  // The number of a dense index in the set; -1 for any other.
  int64_t rank(uint64_t id) const {
    if (!has(id) || id >= dense_limit_) return -1;
    size_t word = id >> 6;
    return ranks_[word] + popcount64(words_[word] & ((uint64_t(1) << (id & 63)) - 1));
  }

 private:
  size_t dense_limit_;
  std::vector<uint64_t> words_;
  std::vector<uint32_t> ranks_;
  size_t dense_count_ = 0;
  std::unordered_set<uint64_t> sparse_;
  size_t count_ = 0;
};

// The memo's values. Streaming, only the entries read back are kept, in a flat table by their
// number among those (dense indices) and hashed for the rest; otherwise all, hashed.
class Memo {
 public:
  explicit Memo(const MemoIds* reads) : reads_(reads) {
    if (reads_) flat_.assign(reads_->dense_count(), Document::kNoValue);
  }
  // Whether INDEX is kept at all.
  bool keeps(uint64_t index) const { return !reads_ || reads_->has(index); }
  void put(uint64_t index, Ref value) { slot(index) = value; }
  // The value put at INDEX; null when none was.
  const Ref* find(uint64_t index) const {
    int64_t n = reads_ ? reads_->rank(index) : -1;
    if (n >= 0) return flat_[static_cast<size_t>(n)] == Document::kNoValue ? nullptr : &flat_[static_cast<size_t>(n)];
    auto it = hashed_.find(index);
    return it == hashed_.end() ? nullptr : &it->second;
  }
  Ref& slot(uint64_t index) {
    int64_t n = reads_ ? reads_->rank(index) : -1;
    return n >= 0 ? flat_[static_cast<size_t>(n)] : hashed_[index];
  }

 private:
  const MemoIds* reads_;
  std::vector<Ref> flat_;
  std::unordered_map<uint64_t, Ref> hashed_;
};

template <typename T>
T load_le(const char* at) {  // x86-64 and aarch64 are little-endian, as pickles are
  T v;
  std::memcpy(&v, at, sizeof v);
  return v;
}

constexpr size_t kReleaseStep = 8 << 20;  // the walks tell DONE_WITH of what they read this much at a time

// Where walk_memo_reads stopped: at the end of its range (END: the offset after the last opcode
// it read, at or past the range's end), or short of it, at STOP or at what it does not know.
struct WalkEnd {
  size_t end = 0;
  bool whole = false;  // it read on to the range's end
};

// Walks a pickle's opcodes from FROM (where one begins) until one ends at or past TO, building
// nothing, and tells ON_GET(index, offset) of each memo read (GET). It stops at anything it does
// not know: the parse that follows says what is wrong there.
template <typename OnGet>
WalkEnd walk_memo_reads(std::string_view in, size_t from, size_t to,
                        const std::function<void(size_t, size_t)>& done_with, OnGet&& on_get) {
  const char* const data = in.data();
  const size_t size = in.size();
  size_t pos = from;
  auto uint = [&](size_t n, uint64_t& out) {  // N: 1, 4 or 8
    if (in.size() - pos < n) return false;
    const char* at = in.data() + pos;
    out = n == 1 ? static_cast<uint8_t>(*at) : n == 4 ? load_le<uint32_t>(at) : load_le<uint64_t>(at);
    pos += n;
    return true;
  };
  auto skip = [&](uint64_t n) {
    if (in.size() - pos < n) return false;
    pos += n;
    return true;
  };
  auto line = [&](std::string_view& out) {
    size_t end = in.find('\n', pos);
    if (end == std::string_view::npos) return false;
    out = in.substr(pos, end - pos);
    pos = end + 1;
    return true;
  };
  auto decimal = [](std::string_view text, uint64_t& out) {
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    return ec == std::errc() && end == text.data() + text.size();
  };
  size_t op_at = 0;  // where the opcode being read starts
  auto read = [&](uint64_t index) __attribute__((always_inline)) {
    on_get(index, op_at);
    return true;
  };
  size_t released = from, next_release = done_with ? from + kReleaseStep : SIZE_MAX;
  while (pos < to) {
    if (pos >= next_release) {
      done_with(released, pos);
      released = pos;
      next_release = pos + kReleaseStep;
    }
    op_at = pos;
    // The opcodes a snapshot's entries are made of, without a bound check each where more bytes
    // are left than any of them takes (a short string: its length is checked).
    if (size - pos > 9) {
      const char* at = data + pos;
      switch (static_cast<uint8_t>(*at)) {
        case kBinGet: read(static_cast<uint8_t>(at[1])), pos += 2; continue;
        case kLongBinGet: read(load_le<uint32_t>(at + 1)), pos += 5; continue;
        case kBinInt1:
        case kBinPut: pos += 2; continue;
        case kBinInt2: pos += 3; continue;
        case kBinInt:
        case kLongBinPut: pos += 5; continue;
        case kMark:
        case kEmptyDict:
        case kEmptyList:
        case kSetItems:
        case kAppends:
        case kAppend:
        case kMemoize:
        case kNone:
        case kNewTrue:
        case kNewFalse:
        case kTuple2: pos += 1; continue;
        case kLong1:
        case kShortBinUnicode:
        case kShortBinBytes: {
          size_t n = static_cast<uint8_t>(at[1]);
          if (size - pos - 2 < n) break;  // cut short: as the general case finds it
          pos += 2 + n;
          continue;
        }
        default: break;
      }
    }
    uint8_t op = static_cast<uint8_t>(in[pos++]);
    uint64_t n = 0;
    std::string_view text;
    bool ok = true;
    switch (op) {
      case kStop: return {pos, false};
      case kProto:
      case kBinInt1: ok = skip(1); break;
      case kBinInt2: ok = skip(2); break;
      case kBinInt: ok = skip(4); break;
      case kFrame:
      case kBinFloat: ok = skip(8); break;
      case kInt:
      case kLong:
      case kFloat:
      case kUnicode:
      case kString: ok = line(text); break;
      case kLong1:
      case kShortBinUnicode:
      case kShortBinString:
      case kShortBinBytes: ok = uint(1, n) && skip(n); break;
      case kLong4:
      case kBinUnicode:
      case kBinString:
      case kBinBytes: ok = uint(4, n) && skip(n); break;
      case kBinUnicode8:
      case kBinBytes8: ok = uint(8, n) && skip(n); break;
      case kPut: ok = line(text) && decimal(text, n); break;
      case kBinPut: ok = skip(1); break;
      case kLongBinPut: ok = skip(4); break;
      case kMemoize: break;
      case kGet: ok = line(text) && decimal(text, n) && read(n); break;
      case kBinGet: ok = uint(1, n) && read(n); break;
      case kLongBinGet: ok = uint(4, n) && read(n); break;
      case kMark:
      case kPop:
      case kPopMark:
      case kDup:
      case kNone:
      case kNewTrue:
      case kNewFalse:
      case kEmptyList:
      case kEmptyTuple:
      case kEmptySet:
      case kEmptyDict:
      case kList:
      case kTuple:
      case kFrozenSet:
      case kTuple1:
      case kTuple2:
      case kTuple3:
      case kDict:
      case kAppend:
      case kSetItem:
      case kAppends:
      case kSetItems:
      case kAddItems: break;
      default: ok = false;
    }
    if (!ok) return {op_at, false};
  }
  return {pos, pos >= to};
}

// Where the walk may start besides the beginning, to walk in PIECES at once: frames' starts (each
// FRAME opcode found from the one before by its length) about evenly apart, PIECES - 1 at most;
// none when the pickle has no frames or is too small to share. DONE_WITH is told of what it read
// as it goes (a file's mapping brings in the pages around each one read).
std::vector<size_t> walk_starts(std::string_view in, unsigned pieces,
                                const std::function<void(size_t, size_t)>& done_with) {
  constexpr size_t kMinPiece = 256 << 10;
  constexpr unsigned kMaxPieces = 4;  // each piece's second walk keeps 8 bytes a value read back
  pieces = std::min(pieces, kMaxPieces);
  std::vector<size_t> starts;
  if (pieces < 2 || in.size() < 2 * kMinPiece || static_cast<uint8_t>(in[0]) != kProto) return starts;
  const size_t want = in.size() / pieces;
  size_t next = std::max(want, kMinPiece), p = 2, released = 0;
  while (starts.size() + 1 < pieces && in.size() - p > 9 && static_cast<uint8_t>(in[p]) == kFrame) {
    if (p >= next && in.size() - p >= kMinPiece) {
      starts.push_back(p);
      next = p + want;
    }
    uint64_t length = load_le<uint64_t>(in.data() + p + 1);
    if (length > in.size() - p - 9) break;
    p += 9 + length;
    if (done_with && p - released >= kReleaseStep) {
      done_with(released, p);
      released = p;
    }
  }
  if (done_with) done_with(released, std::min(p, in.size()));
  return starts;
}

// Where a walk saw each memo index read the last time, while they are few (memtrace's exports read
// back a dict's keys and a few hundred stacks' frames lists, again and again): the first indices
// (a dict's keys are among the first put) in a table by index, the others in an open-addressing
// table of a fixed size; it gives up (full()) past kMaxFew indices.
class FewLastReads {
 public:
  __attribute__((always_inline)) void note(uint64_t index, size_t at) {
    if (full_) return;
    if (index < kDirect) {
      size_t& last = direct_[index];
      if (last == kEmpty && ++used_ > kMaxFew) {
        full_ = true;
        return;
      }
      last = at;
      return;
    }
    for (size_t slot = (index * 0x9E3779B97F4A7C15ull) >> (64 - kBits);; slot = (slot + 1) & (kSlots - 1)) {
      Slot& s = slots_[slot];
      if (s.at == kEmpty) {
        if (++used_ > kMaxFew) {
          full_ = true;
          return;
        }
        s.index = index;
      } else if (s.index != index) {
        continue;
      }
      s.at = at;  // a walk reads on: the latest
      return;
    }
  }
  bool full() const { return full_; }
  // F(index, at) of each index noted, with where it was read the last time.
  template <typename F>
  void each(F&& f) const {
    for (size_t index = 0; index < kDirect; ++index)
      if (direct_[index] != kEmpty) f(index, direct_[index]);
    for (const Slot& s : slots_)
      if (s.at != kEmpty) f(s.index, s.at);
  }

 private:
  static constexpr unsigned kBits = 13;
  static constexpr size_t kSlots = size_t{1} << kBits, kMaxFew = kSlots / 2, kDirect = 4096, kEmpty = SIZE_MAX;
  struct Slot {
    uint64_t index = 0;
    size_t at = kEmpty;
  };
  std::vector<size_t> direct_ = std::vector<size_t>(kDirect, kEmpty);  // 32 KiB
  std::vector<Slot> slots_ = std::vector<Slot>(kSlots);                // 128 KiB
  size_t used_ = 0;
  bool full_ = false;
};

}  // namespace

// What the memo's entries are read back for: which are (GET), and where each is read the last
// time, so that a streaming parse keeps a value only while something may still read it.
struct MemoReads {
  MemoIds ids;
  std::vector<uint64_t> last_read;  // by the index's rank among the dense ones
  unsigned pieces = 1;              // the walks', each on a thread of its own
  unsigned walks = 1;               // over the whole pickle: 2 where the values read back are many

  MemoReads(std::string_view in, const std::function<void(size_t, size_t)>& done_with, unsigned walkers)
      : ids(in.size() + 1) {
    // Where each is read the last time is kept by rank, known once every read index is: the first
    // walk notes it while the indices read are few (FewLastReads), else a second walk finds it.
    // Each walk in pieces, on threads of their own, where the pickle has frames to start them at:
    // the first piece's walk, from the beginning, must end where the second begins (else the
    // frames lied, and one walk reads it all), and so on.
    std::vector<size_t> starts = walk_starts(in, walkers, done_with);
    std::vector<MemoIds> piece_ids(starts.size() + 1, MemoIds(in.size() + 1));
    std::vector<FewLastReads> piece_few(starts.size() + 1);
    auto first_walk = [&](size_t piece, size_t from, size_t to) {
      MemoIds& found = piece_ids[piece];
      FewLastReads& few = piece_few[piece];
      return walk_memo_reads(in, from, to, done_with, [&found, &few](uint64_t index, size_t at) {
        if (!found.has(index)) found.add(index);
        few.note(index, at);
      });
    };
    if (!in_pieces(in.size(), starts, first_walk)) {
      starts.clear();
      piece_ids.assign(1, MemoIds(in.size() + 1));
      piece_few.assign(1, FewLastReads());
      first_walk(0, 0, in.size());
    }
    pieces = static_cast<unsigned>(piece_ids.size());
    ids = std::move(piece_ids[0]);
    for (size_t i = 1; i < piece_ids.size(); ++i) ids.merge(piece_ids[i]);
    piece_ids.clear();
    ids.number();
    if (std::none_of(piece_few.begin(), piece_few.end(), [](const FewLastReads& f) { return f.full(); })) {
      last_read.assign(ids.dense_count(), 0);
      for (const FewLastReads& few : piece_few)  // a later piece's reads are later
        few.each([&](uint64_t index, size_t at) {
          if (int64_t n = ids.rank(index); n >= 0) last_read[static_cast<size_t>(n)] = at;
        });
      return;
    }
    piece_few.clear();
    walks = 2;
    std::vector<std::vector<uint64_t>> piece_last(starts.size() + 1, std::vector<uint64_t>(ids.dense_count(), 0));
    in_pieces(in.size(), starts, [&](size_t piece, size_t from, size_t to) {
      std::vector<uint64_t>& last = piece_last[piece];
      return walk_memo_reads(in, from, to, done_with, [&](uint64_t index, size_t at) {
        if (int64_t n = ids.rank(index); n >= 0) last[static_cast<size_t>(n)] = at;
      });
    });
    last_read = std::move(piece_last[0]);
    for (size_t i = 1; i < piece_last.size(); ++i)  // a later piece's reads are later
      for (size_t n = 0; n < last_read.size(); ++n) last_read[n] = std::max(last_read[n], piece_last[i][n]);
  }
  // WALK(piece, from, to) of each piece between STARTS, the first on this thread, the others at
  // once on threads of their own: whether every piece's walk ended where the next begins.
  template <typename Walk>
  static bool in_pieces(size_t size, const std::vector<size_t>& starts, Walk&& walk) {
    std::vector<WalkEnd> ends(starts.size() + 1);
    std::vector<std::thread> threads;
    std::mutex thrown_mutex;
    std::exception_ptr thrown;  // out of memory in a piece: thrown again here, once all are joined
    auto piece = [&](size_t i) {
      try {
        ends[i] = walk(i, i == 0 ? 0 : starts[i - 1], i < starts.size() ? starts[i] : size);
      } catch (const std::bad_alloc&) {
        std::lock_guard<std::mutex> lock(thrown_mutex);
        thrown = std::current_exception();
      } catch (const std::length_error&) {
        std::lock_guard<std::mutex> lock(thrown_mutex);
        thrown = std::current_exception();
      }
    };
    try {
      for (size_t i = 1; i < ends.size(); ++i) threads.emplace_back(piece, i);
    } catch (const std::system_error&) {  // no thread to be had: the rest here, one after the other
      for (size_t i = threads.size() + 1; i < ends.size(); ++i) piece(i);
    }
    piece(0);
    for (std::thread& t : threads) t.join();
    if (thrown) std::rethrow_exception(thrown);
    for (size_t i = 0; i < starts.size(); ++i)
      if (!ends[i].whole || ends[i].end != starts[i]) return false;
    return true;
  }
  // Whether INDEX may be read back at or after OFFSET.
  bool read_from(uint64_t index, size_t offset) const {
    int64_t n = ids.rank(index);
    return n < 0 ? ids.has(index) : last_read[static_cast<size_t>(n)] >= offset;
  }
};

int64_t Document::integer(Ref v) const {
  const Node& n = node(v);
  return n.kind == Kind::kInt || n.kind == Kind::kBool ? n.integer : 0;
}

double Document::number(Ref v) const {
  const Node& n = node(v);
  if (n.kind == Kind::kFloat) return n.number;
  return n.kind == Kind::kInt || n.kind == Kind::kBool ? static_cast<double>(n.integer) : 0;
}

std::string_view Document::text(Ref v) const {
  const Node& n = node(v);
  return n.kind == Kind::kString || n.kind == Kind::kBytes ? std::string_view(strings_[n.index]) : std::string_view();
}

const std::vector<Ref>& Document::items(Ref v) const {
  const Node& n = node(v);
  return n.kind == Kind::kList || n.kind == Kind::kTuple || n.kind == Kind::kSet ? lists_[n.index] : kNoItems;
}

const std::vector<std::pair<Ref, Ref>>& Document::entries(Ref v) const {
  const Node& n = node(v);
  return n.kind == Kind::kDict ? dicts_[n.index] : kNoEntries;
}

bool Document::find(Ref v, std::string_view key, Ref& out) const {
  for (const auto& [k, value] : entries(v))
    if (nodes_[k].kind == Kind::kString && strings_[nodes_[k].index] == key) {
      out = value;
      return true;
    }
  return false;
}

void fill_value(const Document& doc, Ref v, Value& out) {
  const Document::Node& n = doc.node(v);
  out.kind = n.kind;
  out.ref = v;
  switch (n.kind) {
    case Kind::kInt:
    case Kind::kBool: out.integer = n.integer; break;
    case Kind::kFloat: out.number = n.number; break;
    case Kind::kString:
    case Kind::kBytes: out.text = doc.strings_[n.index]; break;
    default: break;
  }
}

Value value_of(const Document& doc, Ref v) {
  Value out;
  fill_value(doc, v, out);
  return out;
}

void view_dict(const Document& doc, Ref v, DictView& out) {
  out.items.clear();
  out.built = v;
  for (auto [key, value] : doc.entries(v)) out.items.push_back({value_of(doc, key), value_of(doc, value)});
}

class Parser {
 public:
  Parser(std::string_view bytes, Document& doc) : in_(bytes), doc_(doc), put_ids_(bytes.size() + 1) {}
  // Streaming: list items offered to SINK; only the memo entries in READS kept.
  Parser(std::string_view bytes, ItemSink& sink, const MemoReads& reads)
      : in_(bytes), doc_(owned_), sink_(&sink), reads_(&reads.ids), last_reads_(&reads), put_ids_(bytes.size() + 1) {}
  // Streaming again from where FROM left a list: its values and memo, a new empty list on the stack.
  Parser(const Parser& from, const ResumePoint& at, ItemSink& sink)
      : in_(from.in_),
        doc_(owned_),
        pos_(std::min(at.offset, from.in_.size())),
        sink_(&sink),
        reads_(from.reads_),
        last_reads_(from.last_reads_),
        put_ids_(from.in_.size() + 1) {
    keep_memo_of(from);
    put_ids_.start_at(at.memo_count);
    push_list(Kind::kList);
    resumed_list_ = stack_.back();
  }
  const Document& document() const { return doc_; }
  Ref resumed_list() const { return resumed_list_; }
  size_t position() const { return pos_; }

  bool run(std::string& error) {
    doc_ = Document();
    while (pos_ < in_.size()) {
      size_t at = pos_;
      uint8_t op = static_cast<uint8_t>(in_[pos_++]);
      if (op == kStop) {
        if (stack_.size() != 1 || !marks_.empty()) return fail(at, "STOP leaves no single value", error);
        doc_.root_ = real(stack_.back());
        return true;
      }
      if (const char* what = refused(op))
        return fail(at,
                    std::string("the pickle ") + what +
                        "; memtrace reads only plain data (dicts, lists, numbers, strings), as PyTorch's "
                        "snapshots are",
                    error);
      if (!step(op)) return fail(at, problem_.empty() ? "unknown pickle opcode " + hex(op) : problem_, error);
    }
    return fail(pos_, "the pickle ends before its STOP opcode (cut short?)", error);
  }

  // Streaming again: parses on to END, or until a batch was offered to the sink.
  bool run_to(size_t end, std::string& error) {
    offered_ = false;
    while (pos_ < end && pos_ < in_.size() && !offered_) {
      size_t at = pos_;
      uint8_t op = static_cast<uint8_t>(in_[pos_++]);
      if (op == kStop || refused(op)) return fail(at, "the pickle changed while it was read", error);
      if (!step(op)) return fail(at, problem_.empty() ? "unknown pickle opcode " + hex(op) : problem_, error);
    }
    return true;
  }

 private:
  static std::string hex(uint8_t op) {
    static const char kHex[] = "0123456789abcdef";
    return std::string("0x") + kHex[op >> 4] + kHex[op & 15];
  }
  bool fail(size_t at, const std::string& what, std::string& error) {
    error = "byte " + std::to_string(at) + ": " + what;
    return false;
  }
  bool bad(const char* what) {
    problem_ = what;
    return false;
  }

  bool take(size_t n, std::string_view& out) {
    if (in_.size() - pos_ < n) return bad("a length runs past the end of the file");
    out = in_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  bool take_uint(size_t n, uint64_t& out) {
    std::string_view b;
    if (!take(n, b)) return false;
    out = 0;
    for (size_t i = 0; i < n; ++i) out |= static_cast<uint64_t>(static_cast<uint8_t>(b[i])) << (8 * i);
    return true;
  }
  bool take_line(std::string_view& out) {
    size_t end = in_.find('\n', pos_);
    if (end == std::string_view::npos) return bad("a text argument has no end of line");
    out = in_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return true;
  }

  Ref add(Document::Node node) {
    doc_.nodes_.push_back(node);
    return static_cast<Ref>(doc_.nodes_.size() - 1);
  }
  bool push_int(int64_t v, Kind kind = Kind::kInt) {
    stack_.push_back(add({kind, 0, v}));
    return true;
  }
  bool push_float(double v) {
    Document::Node n{Kind::kFloat, 0, 0};
    n.number = v;
    stack_.push_back(add(n));
    return true;
  }
  bool push_text(std::string_view text, Kind kind) {
    doc_.strings_.emplace_back(text);
    stack_.push_back(add({kind, static_cast<uint32_t>(doc_.strings_.size() - 1), 0}));
    return true;
  }
  bool push_list(Kind kind, std::vector<Ref> items = {}) {
    doc_.lists_.push_back(std::move(items));
    stack_.push_back(add({kind, static_cast<uint32_t>(doc_.lists_.size() - 1), 0}));
    return true;
  }
  bool push_dict() {
    doc_.dicts_.emplace_back();
    stack_.push_back(add({Kind::kDict, static_cast<uint32_t>(doc_.dicts_.size() - 1), 0}));
    return true;
  }
  // Where the document stood at a MARK: what was built after it, and is not in the memo, belongs
  // to the items above it.
  struct Checkpoint {
    size_t nodes = 0, strings = 0, lists = 0, dicts = 0, puts = 0;
  };
  struct Mark {
    size_t stack;
    Checkpoint at;
    Ref lowest_target = Document::kNoValue;  // the oldest container given items since it
    // Whether a value from before it was given something built after it.
    bool tainted() const { return lowest_target < at.nodes; }
  };
  bool pop_mark(size_t& mark, Mark* popped = nullptr) {
    if (marks_.empty()) return bad("an opcode needs a MARK that is not there");
    mark = marks_.back().stack;
    if (popped) *popped = marks_.back();
    drop_mark();
    return true;
  }
  // What was given items inside the innermost mark was given them inside the one around it too.
  void drop_mark() {
    Ref lowest = marks_.back().lowest_target;
    marks_.pop_back();
    if (!marks_.empty()) marks_.back().lowest_target = std::min(marks_.back().lowest_target, lowest);
  }
  void push_mark() {
    Checkpoint at{doc_.nodes_.size(), doc_.strings_.size(), doc_.lists_.size(), doc_.dicts_.size(), puts_.size()};
    marks_.push_back({stack_.size(), at});
  }
  bool need(size_t n) {
    size_t floor = marks_.empty() ? 0 : marks_.back().stack;
    return stack_.size() >= floor + n || bad("an opcode needs values that are not on the stack");
  }
  bool add_items(Ref target, size_t from, const Mark* batch = nullptr) {
    if (!marks_.empty()) marks_.back().lowest_target = std::min(marks_.back().lowest_target, target);
    if (doc_.nodes_[target].kind == Kind::kList && sink_) return offer_items(target, from, batch);
    build_from(from);  // before N: building adds nodes
    const Document::Node& n = doc_.nodes_[target];
    if (n.kind == Kind::kList || n.kind == Kind::kSet) {
      auto& items = doc_.lists_[n.index];
      items.insert(items.end(), stack_.begin() + static_cast<std::ptrdiff_t>(from), stack_.end());
    } else if (n.kind == Kind::kDict) {
      if ((stack_.size() - from) % 2) return bad("SETITEMS has a key without a value");
      auto& entries = doc_.dicts_[n.index];
      entries.reserve(entries.size() + (stack_.size() - from) / 2);  // one allocation a batch
      for (size_t i = from; i < stack_.size(); i += 2) set_item(entries, stack_[i], stack_[i + 1]);
    } else {
      return bad("items are added to something that is not a list, dict or set");
    }
    stack_.resize(from);
    return true;
  }
  void set_item(std::vector<std::pair<Ref, Ref>>& entries, Ref key, Ref value) {
    // A key given again replaces the first, as a dict does (compared by value for strings and ints).
    const Document::Node& k = doc_.nodes_[key];
    for (auto& [old, v] : entries) {
      const Document::Node& o = doc_.nodes_[old];
      bool same = o.kind == k.kind && ((k.kind == Kind::kString && doc_.strings_[o.index] == doc_.strings_[k.index]) ||
                                       (k.kind == Kind::kInt && o.integer == k.integer));
      if (same) {
        v = value;
        return;
      }
    }
    entries.emplace_back(key, value);
  }
  void refresh(Value& v) const {
    if (v.ref != Document::kNoValue && (v.kind == Kind::kString || v.kind == Kind::kBytes)) v.text = doc_.text(v.ref);
  }
  // FIELD_NAMES's index of string KEY, or kNotAField.
  int field_of(std::string_view key) const {
    const std::vector<std::string_view>& names = sink_->field_names();
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] == key) return static_cast<int>(i);
    return DictView::kNotAField;
  }
  // Each item's field, where a sink names them and the scan did not know it.
  void name_fields(DictView& view) const {
    if (sink_->field_names().empty()) return;
    for (DictView::Item& it : view.items)
      if (it.field == DictView::kNotAField && it.key.kind == Kind::kString) it.field = field_of(it.key.text);
  }
  // Streaming: the items the sink does not take join the list. When it took a whole batch,
  // what was built since the batch's MARK is forgotten, but for the values the memo keeps (moved
  // down, in order).
  bool offer_items(Ref list, size_t from, const Mark* batch) {
    bool all_taken = true, any_taken = false;
    for (size_t i = from; i < stack_.size(); ++i) {
      Ref item = stack_[i];
      bool taken;
      if (is_read_whole(item)) {
        DictView& view = read_whole_[item - kFirstReadWhole];
        const std::vector<std::string_view>& names = sink_->field_names();
        for (DictView::Item& it : view.items) {  // the Document's strings may have moved since
          if (it.field >= 0)
            it.key.text = names[static_cast<size_t>(it.field)];  // the same text, without the lookup
          else
            refresh(it.key);
          refresh(it.value);
        }
        name_fields(view);
        taken = sink_->take_dict(doc_, list, view);
        if (!taken) item = real(item);
      } else {
        if (sink_->takes_dicts() && doc_.is(item, Kind::kDict)) {
          view_dict(doc_, item, built_view_);
          name_fields(built_view_);
          taken = sink_->take_dict(doc_, list, built_view_);
        } else {
          taken = sink_->take(doc_, list, item);
        }
      }
      if (taken) {
        any_taken = true;
        continue;
      }
      all_taken = false;
      doc_.lists_[doc_.nodes_[list].index].push_back(item);
    }
    stack_.resize(from);
    if (batch && all_taken && !batch->tainted() && batch->at.nodes < doc_.nodes_.size()) forget_since(batch->at);
    if (!any_taken) return true;
    offered_ = true;
    sink_->batch_done(list, ResumePoint{pos_, put_ids_.count()});
    return true;
  }
  // The values of D that TODO's reach, from FIRST on, in order; each a key of MOVED.
  static std::vector<Ref> reachable(const Document& d, std::vector<Ref> todo, Ref first,
                                    std::unordered_map<Ref, Ref>& moved) {
    std::vector<Ref> kept;
    while (!todo.empty()) {
      Ref r = todo.back();
      todo.pop_back();
      if (r < first || !moved.emplace(r, 0).second) continue;
      kept.push_back(r);
      const Document::Node& n = d.nodes_[r];
      if (n.kind == Kind::kList || n.kind == Kind::kTuple || n.kind == Kind::kSet)
        todo.insert(todo.end(), d.lists_[n.index].begin(), d.lists_[n.index].end());
      if (n.kind == Kind::kDict)
        for (auto [k, v] : d.dicts_[n.index]) todo.insert(todo.end(), {k, v});
    }
    std::sort(kept.begin(), kept.end());
    return kept;
  }
  void forget_since(const Checkpoint& at) {
    // What the memo will not read again goes with the rest (PyTorch's snapshots read each free's
    // frames back once, in the entry after it: kept to the end, they grew with the file).
    size_t live = at.puts;
    for (size_t i = at.puts; i < puts_.size(); ++i) {
      uint64_t index = puts_[i];
      if (last_reads_ && !last_reads_->read_from(index, pos_))
        memo_.slot(index) = Document::kNoValue;
      else
        puts_[live++] = index;
    }
    puts_.resize(live);
    std::unordered_map<Ref, Ref> moved;  // kept value -> where it goes
    std::vector<Ref> todo;
    for (size_t i = at.puts; i < puts_.size(); ++i) todo.push_back(memo_.slot(puts_[i]));
    std::vector<Ref> kept = reachable(doc_, std::move(todo), static_cast<Ref>(at.nodes), moved);
    Ref next = static_cast<Ref>(at.nodes);
    for (Ref r : kept) moved[r] = next++;
    auto to = [&](Ref r) { return r < at.nodes ? r : moved.at(r); };
    // Storage is made in the order of the nodes: each kept one moves down, never over another.
    size_t strings = at.strings, lists = at.lists, dicts = at.dicts;
    for (Ref r : kept) {
      Document::Node n = doc_.nodes_[r];
      if (n.kind == Kind::kString || n.kind == Kind::kBytes) {
        if (n.index != strings) doc_.strings_[strings] = std::move(doc_.strings_[n.index]);
        n.index = static_cast<uint32_t>(strings++);
      } else if (n.kind == Kind::kList || n.kind == Kind::kTuple || n.kind == Kind::kSet) {
        if (n.index != lists) doc_.lists_[lists] = std::move(doc_.lists_[n.index]);
        for (Ref& item : doc_.lists_[lists]) item = to(item);
        n.index = static_cast<uint32_t>(lists++);
      } else if (n.kind == Kind::kDict) {
        if (n.index != dicts) doc_.dicts_[dicts] = std::move(doc_.dicts_[n.index]);
        for (auto& [k, v] : doc_.dicts_[dicts]) k = to(k), v = to(v);
        n.index = static_cast<uint32_t>(dicts++);
      }
      doc_.nodes_[moved[r]] = n;
    }
    doc_.nodes_.resize(next);
    doc_.strings_.resize(strings);
    doc_.lists_.resize(lists);
    doc_.dicts_.resize(dicts);
    // Each index once: one put twice holds the value of its last put, moved once.
    std::unordered_set<uint64_t> relocated;
    for (size_t i = at.puts; i < puts_.size(); ++i)
      if (relocated.insert(puts_[i]).second) memo_.slot(puts_[i]) = to(memo_.slot(puts_[i]));
    sink_->forget_from(static_cast<Ref>(at.nodes));
    recalled_.clear();  // the values moved
  }
  // Streaming again: of FROM's values, those its memo keeps (all that can be read back), copied.
  void keep_memo_of(const Parser& from) {
    const Document& d = from.doc_;
    std::unordered_map<Ref, Ref> moved;
    std::vector<Ref> todo;
    std::vector<uint64_t> indices;
    for (uint64_t index : from.puts_)
      if (from.memo_.find(index)) indices.push_back(index);  // not let go (forget_since)
    std::sort(indices.begin(), indices.end());
    indices.erase(std::unique(indices.begin(), indices.end()), indices.end());
    for (uint64_t index : indices) todo.push_back(*from.memo_.find(index));
    std::vector<Ref> kept = reachable(d, std::move(todo), 0, moved);
    for (size_t i = 0; i < kept.size(); ++i) moved[kept[i]] = static_cast<Ref>(i);
    for (Ref r : kept) {
      Document::Node n = d.nodes_[r];
      if (n.kind == Kind::kString || n.kind == Kind::kBytes) {
        doc_.strings_.push_back(d.strings_[n.index]);
        n.index = static_cast<uint32_t>(doc_.strings_.size() - 1);
      } else if (n.kind == Kind::kList || n.kind == Kind::kTuple || n.kind == Kind::kSet) {
        doc_.lists_.push_back(d.lists_[n.index]);
        for (Ref& item : doc_.lists_.back()) item = moved.at(item);
        n.index = static_cast<uint32_t>(doc_.lists_.size() - 1);
      } else if (n.kind == Kind::kDict) {
        doc_.dicts_.push_back(d.dicts_[n.index]);
        for (auto& [k, v] : doc_.dicts_.back()) k = moved.at(k), v = moved.at(v);
        n.index = static_cast<uint32_t>(doc_.dicts_.size() - 1);
      }
      doc_.nodes_.push_back(n);
    }
    for (uint64_t index : indices) {
      memo_.put(index, moved.at(*from.memo_.find(index)));
      puts_.push_back(index);
    }
  }
  // Dicts read whole (scan_dict) stand on the stack as kFirstReadWhole + their index in
  // read_whole_ until a sink takes them, or something needs them in the Document (real()).
  static constexpr Ref kFirstReadWhole = Document::kNoValue - (Ref{1} << 20);
  static constexpr size_t kMaxReadWholeItems = 64;
  static bool is_read_whole(Ref r) { return r >= kFirstReadWhole && r != Document::kNoValue; }

  // After EMPTY_DICT: reads the dict through its SETITEMS when its keys are scalars, strings or
  // values of the memo, its values those or lists of values of the memo (built here: the memo may
  // read them back), and it is not read back itself; stands it on the stack as a DictView. False,
  // having changed nothing, for any other dict. The memo entries it puts are put as the opcodes
  // would (a value read back is built then).
  bool scan_dict() {
    if (read_whole_used_ == 0 || stack_.size() <= read_whole_base_) {  // none is on the stack now
      read_whole_used_ = 0;
      read_whole_base_ = stack_.size();
    }
    if (read_whole_used_ + 1 >= (size_t{1} << 20) || doc_.nodes_.size() >= kFirstReadWhole) return false;
    if (read_whole_used_ == read_whole_.size()) read_whole_.emplace_back();
    DictView& view = read_whole_[read_whole_used_];
    view.items.clear();
    view.built = Document::kNoValue;
    scan_puts_.clear();
    scan_lists_.clear();
    scan_refs_.clear();
    size_t p = pos_;
    // In locals: the stores into the view below could alias the members, which the compiler would
    // then load again at every opcode.
    const char* const data = in_.data();
    const size_t size = in_.size();
    uint64_t next_memoize = put_ids_.count();
    bool named_put = false;
    auto uint = [&](size_t n, uint64_t & out) __attribute__((always_inline)) {  // N: 1, 2, 4 or 8, little-endian
      if (size - p < n) return false;
      out = 0;
      const char* at = data + p;
      switch (n) {
        case 1: out = static_cast<uint8_t>(*at); break;
        case 2: out = load_le<uint16_t>(at); break;
        case 4: out = load_le<uint32_t>(at); break;
        default: out = load_le<uint64_t>(at); break;
      }
      p += n;
      return true;
    };
    auto bytes = [&](size_t n, std::string_view & out) __attribute__((always_inline)) {
      if (size - p < n) return false;
      out = std::string_view(data + p, n);
      p += n;
      return true;
    };
    auto next_op = [&](uint8_t & op) __attribute__((always_inline)) {
      if (p == size) return false;
      op = static_cast<uint8_t>(data[p++]);
      if (__builtin_expect(op != kFrame, 1)) return true;
      --p;  // frames are rare: one every 64 KiB
      while (p < size && static_cast<uint8_t>(data[p]) == kFrame && size - p > 8) p += 9;
      if (p == size) return false;
      op = static_cast<uint8_t>(data[p++]);
      return true;
    };
    // A put of the value read last (VALUE: its place among the keys and values, SIZE_MAX: the dict).
    auto put = [&](uint8_t op, size_t value) __attribute__((always_inline)) {
      uint64_t index = 0;
      if (op == kMemoize) {
        if (named_put || put_ids_.has(next_memoize)) return false;  // as the memo counts, not as we do
        index = next_memoize++;
      } else if (!uint(op == kBinPut ? 1 : 4, index)) {
        return false;
      } else {
        named_put = true;
      }
      if (value == SIZE_MAX && memo_.keeps(index)) return false;  // the dict is read back
      scan_puts_.push_back({index, value});
      return true;
    };
    auto is_put = [](uint8_t op) { return op == kMemoize || op == kBinPut || op == kLongBinPut; };
    uint8_t op;
    if (!next_op(op)) return false;
    if (is_put(op) && (!put(op, SIZE_MAX) || !next_op(op))) return false;
    if (op != kMark) return false;
    // A put of the value just read, if the next opcode is one (VALUE: its place among the keys and
    // values). Looked at without taking the opcode: most values have none.
    auto put_after = [&](size_t value) __attribute__((always_inline)) {
      if (p == size || !is_put(static_cast<uint8_t>(data[p]))) return true;
      return put(static_cast<uint8_t>(data[p++]), value);
    };
    // The key or value OP begins, into V (VALUE: its place among the keys and values).
    auto read_value = [&](uint8_t op, Value & v, int* field, size_t value) __attribute__((always_inline)) {
      uint64_t n = 0;
      std::string_view b;
      switch (op) {
        case kBinGet:
        case kLongBinGet: return uint(op == kBinGet ? 1 : 4, n) && recall(n, v, field);
        case kShortBinUnicode:
        case kBinUnicode:
        case kShortBinBytes:
        case kBinBytes:
          if (!uint(op == kShortBinUnicode || op == kShortBinBytes ? 1 : 4, n) || !bytes(n, b)) return false;
          v.kind = op == kShortBinUnicode || op == kBinUnicode ? Kind::kString : Kind::kBytes;
          v.text = b;
          return true;
        case kBinInt1:
        case kBinInt2:
          if (!uint(op == kBinInt1 ? 1 : 2, n)) return false;
          v.kind = Kind::kInt;
          v.integer = static_cast<int64_t>(n);
          return true;
        case kBinInt:
          if (!uint(4, n)) return false;
          v.kind = Kind::kInt;
          v.integer = static_cast<int32_t>(static_cast<uint32_t>(n));
          return true;
        case kLong1:
          if (!uint(1, n) || !bytes(n, b)) return false;
          v.kind = long_value(b, v.integer);
          return true;
        case kBinFloat:
          if (!uint(8, n)) return false;
          v.kind = Kind::kFloat;
          v.number = double_from_big_endian(n);
          return true;
        case kNone: return true;
        case kEmptyList: {          // a list of memo values (a stack's frames, shared by every entry that has it)
          if (field) return false;  // not as a key
          ScanList list{value, scan_refs_.size(), 0};
          if (!put_after(value)) return false;
          auto memo_value = [&](uint8_t get) __attribute__((always_inline)) {  // a frame, shared
            uint64_t index = 0;
            Value item;
            if ((get != kBinGet && get != kLongBinGet) || !uint(get == kBinGet ? 1 : 4, index) ||
                !recall(index, item, nullptr))
              return false;
            scan_refs_.push_back(item.ref);
            return true;
          };
          // Whether the get OP began (its index still to read) is followed by APPEND.
          auto appended_alone = [&](uint8_t get) {
            size_t after = p + (get == kBinGet ? 1 : 4);
            return after < size && static_cast<uint8_t>(data[after]) == kAppend;
          };
          for (;;) {  // batches: MARK gets APPENDS, or one get APPEND
            size_t at = p;
            if (!next_op(op)) return false;
            if (op == kMark) {
              while (next_op(op) && op != kAppends)
                if (!memo_value(op)) return false;
              if (op != kAppends) return false;
            } else if ((op == kBinGet || op == kLongBinGet) && appended_alone(op)) {
              if (!memo_value(op) || !next_op(op)) return false;  // and its APPEND
            } else {
              p = at;  // the dict's next key (a memo get too, without an APPEND), or its SETITEMS
              break;
            }
          }
          list.end = scan_refs_.size();
          scan_lists_.push_back(list);
          v.kind = Kind::kList;
          return true;
        }
        case kNewTrue:
        case kNewFalse:
          v.kind = Kind::kBool;
          v.integer = op == kNewTrue;
          return true;
        default: return false;
      }
    };
    size_t values = 0;
    for (;; values += 2) {  // a key and its value each time round
      if (!next_op(op)) return false;
      if (op == kSetItems) break;
      if (values == 2 * kMaxReadWholeItems) return false;
      // Filled in place: a Value copied through the stack stalls on store forwarding.
      DictView::Item& item = view.items.emplace_back();
      if (!read_value(op, item.key, &item.field, values) || !put_after(values)) return false;
      if (!next_op(op) || op == kSetItems) return false;  // a key without a value
      if (!read_value(op, item.value, nullptr, values + 1) || !put_after(values + 1)) return false;
    }
    // Read: now as the opcodes would have done it.
    for (const ScanList& list : scan_lists_) {
      doc_.lists_.emplace_back(scan_refs_.begin() + static_cast<std::ptrdiff_t>(list.begin),
                               scan_refs_.begin() + static_cast<std::ptrdiff_t>(list.end));
      view.items[list.value / 2].value.ref = add({Kind::kList, static_cast<uint32_t>(doc_.lists_.size() - 1), 0});
    }
    for (const ScanPut& sp : scan_puts_) {
      put_ids_.add(sp.index);
      if (sp.value == SIZE_MAX || !memo_.keeps(sp.index)) continue;  // the dict's own is not kept
      DictView::Item& item = view.items[sp.value / 2];
      Ref r = build(sp.value % 2 ? item.value : item.key);
      memo_.put(sp.index, r);
      forget_recalled(sp.index);
      puts_.push_back(sp.index);
    }
    pos_ = p;
    stack_.push_back(kFirstReadWhole + static_cast<Ref>(read_whole_used_++));
    return true;
  }
  // The memo's value at INDEX into V (a string's text left to offer_items), and, for a key, its
  // field (FIELD). False when nothing was put there. What it finds is remembered by index.
  __attribute__((always_inline)) bool recall(uint64_t index, Value& v, int* field) {
    if (index < recalled_.size() && recalled_[index].ref != Document::kNoValue) {
      const Recalled& known = recalled_[index];
      v.kind = known.kind;
      v.ref = known.ref;
      if (known.kind == Kind::kInt || known.kind == Kind::kBool) v.integer = doc_.nodes_[known.ref].integer;
      if (known.kind == Kind::kFloat) v.number = doc_.nodes_[known.ref].number;
      if (field) *field = known.field;
      return true;
    }
    return recall_first(index, v, field);
  }
  bool recall_first(uint64_t index, Value& v, int* field) {
    const Ref* r = memo_.find(index);
    if (!r) return false;
    fill_value(doc_, *r, v);
    int f = v.kind == Kind::kString ? field_of(v.text) : DictView::kNotAField;
    if (field) *field = f;
    if (index < kMaxRecalled) {
      if (index >= recalled_.size()) recalled_.resize(index + 1);
      recalled_[index] = {*r, v.kind, f};
    }
    return true;
  }
  void forget_recalled(uint64_t index) {
    if (index < recalled_.size()) recalled_[index].ref = Document::kNoValue;
  }
  // V as a value of the Document: the one it came from, or a new one (then V names it).
  Ref build(Value& v) {
    if (v.ref != Document::kNoValue) return v.ref;
    Document::Node n{v.kind, 0, v.integer};
    if (v.kind == Kind::kFloat) n.number = v.number;
    if (v.kind == Kind::kString || v.kind == Kind::kBytes) {
      doc_.strings_.emplace_back(v.text);
      n.index = static_cast<uint32_t>(doc_.strings_.size() - 1);
    }
    v.ref = add(n);
    return v.ref;
  }
  // R as a value of the Document: a dict read whole is built there (once).
  Ref real(Ref r) {
    if (!is_read_whole(r)) return r;
    DictView& view = read_whole_[r - kFirstReadWhole];
    if (view.built != Document::kNoValue) return view.built;
    doc_.dicts_.emplace_back();
    size_t index = doc_.dicts_.size() - 1;
    view.built = add({Kind::kDict, static_cast<uint32_t>(index), 0});
    for (DictView::Item& item : view.items) {
      Ref k = build(item.key), v = build(item.value);
      set_item(doc_.dicts_[index], k, v);
    }
    return view.built;
  }
  // The stack's values from FROM (to END) as values of the Document.
  void build_from(size_t from, size_t end = SIZE_MAX) {
    for (size_t i = from; i < std::min(end, stack_.size()); ++i) stack_[i] = real(stack_[i]);
  }

  bool memo_put(uint64_t index) {
    if (stack_.empty()) return bad("PUT with nothing on the stack");
    build_from(stack_.size() - 1);
    put_ids_.add(index);
    if (!memo_.keeps(index)) return true;  // never read back: not kept
    memo_.put(index, stack_.back());
    forget_recalled(index);
    if (sink_) puts_.push_back(index);
    return true;
  }
  bool memo_get(uint64_t index) {
    const Ref* value = memo_.find(index);
    if (!value) return bad("GET of a memo entry that was never put");
    stack_.push_back(*value);
    return true;
  }
  static bool parse_decimal(std::string_view text, uint64_t& out) {
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    return ec == std::errc() && end == text.data() + text.size();
  }
  // Integers are kept as 64 bits, from -2^63 to 2^64-1 (sizes and addresses are unsigned; real
  // snapshots hold line numbers of 2^64-1). Wider ones are kBigInt, their value not kept.
  static Kind long_value(std::string_view b, int64_t& out) {
    out = 0;
    while (b.size() > 8 && (b.back() == 0 || (static_cast<uint8_t>(b.back()) == 0xff && b.size() > 9)))
      b.remove_suffix(1);  // a sign byte (or bytes) beyond the 64 that carry the value
    if (b.size() > 9 || (b.size() == 9 && static_cast<uint8_t>(b.back()) != 0xff)) return Kind::kBigInt;
    bool negative = !b.empty() && (static_cast<uint8_t>(b.back()) & 0x80) && b.size() <= 8;
    if (b.size() == 9) {  // negative, 0xff beyond 64 bits: fits int64 only if bit 63 is set
      if (!(static_cast<uint8_t>(b[7]) & 0x80)) return Kind::kBigInt;
      b.remove_suffix(1);
      negative = true;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < b.size(); ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(b[i])) << (8 * i);
    if (negative && b.size() < 8) v |= ~0ull << (8 * b.size());
    out = static_cast<int64_t>(v);
    return Kind::kInt;
  }
  bool long_bytes(std::string_view b) {
    int64_t v;
    Kind kind = long_value(b, v);
    return push_int(v, kind);
  }
  bool text_int(std::string_view t) {
    if (t == "00") return push_int(0, Kind::kBool);  // protocol 0's False and True
    if (t == "01") return push_int(1, Kind::kBool);
    if (!t.empty() && t.back() == 'L') t.remove_suffix(1);
    bool negative = !t.empty() && t.front() == '-';
    if (negative || (!t.empty() && t.front() == '+')) t.remove_prefix(1);
    if (t.empty() || t.find_first_not_of("0123456789") != std::string_view::npos)
      return bad("a text integer that is not one");
    uint64_t v;
    if (!parse_decimal(t, v) || (negative && v > (uint64_t(1) << 63))) return push_int(0, Kind::kBigInt);
    return push_int(negative ? static_cast<int64_t>(~v + 1) : static_cast<int64_t>(v));
  }
  // Protocol 0 text strings: raw-unicode-escape (UNICODE) and Python 2's quoted repr (STRING).
  bool unicode_line(std::string_view t) {
    std::string out;
    for (size_t i = 0; i < t.size(); ++i) {
      if (t[i] == '\\' && i + 1 < t.size() && (t[i + 1] == 'u' || t[i + 1] == 'U')) {
        size_t digits = t[i + 1] == 'u' ? 4 : 8;
        uint64_t cp = 0;
        if (i + 2 + digits > t.size()) return bad("a \\u escape is cut short");
        for (size_t d = 0; d < digits; ++d) {
          char c = t[i + 2 + d];
          int v = c >= '0' && c <= '9'   ? c - '0'
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                         : -1;
          if (v < 0) return bad("a \\u escape with a digit that is not hexadecimal");
          cp = cp * 16 + static_cast<uint64_t>(v);
        }
        append_utf8(out, cp);
        i += 1 + digits;
      } else {
        append_utf8(out, static_cast<uint8_t>(t[i]));
      }
    }
    return push_text(out, Kind::kString);
  }
  static void append_utf8(std::string& out, uint64_t cp) {
    if (cp > 0x10ffff) cp = 0xfffd;
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }
  bool quoted_string(std::string_view t) {
    if (t.size() < 2 || t.front() != t.back() || (t.front() != '\'' && t.front() != '"'))
      return bad("a STRING argument that is not quoted");
    t = t.substr(1, t.size() - 2);
    std::string out;
    for (size_t i = 0; i < t.size(); ++i) {
      if (t[i] != '\\' || i + 1 == t.size()) {
        out += t[i];
        continue;
      }
      char c = t[++i];
      switch (c) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'x': {
          if (i + 2 >= t.size()) return bad("a \\x escape is cut short");
          unsigned v = 0;
          auto [end, ec] = std::from_chars(t.data() + i + 1, t.data() + i + 3, v, 16);
          if (ec != std::errc() || end != t.data() + i + 3) return bad("a bad \\x escape");
          out += static_cast<char>(v);
          i += 2;
          break;
        }
        default: out += c;
      }
    }
    return push_text(out, Kind::kString);
  }

  bool step(uint8_t op) {
    std::string_view b;
    uint64_t n = 0;
    size_t mark = 0;
    switch (op) {
      case kProto:
        if (!take_uint(1, n)) return false;
        return n <= 5 || bad("a pickle protocol newer than 5");
      case kFrame: return take_uint(8, n);  // framing only groups opcodes: nothing to do
      case kMark: push_mark(); return true;
      case kPop:
        if (!marks_.empty() && marks_.back().stack == stack_.size()) {  // POP of a mark, as Python allows
          drop_mark();
          return true;
        }
        if (!need(1)) return false;
        stack_.pop_back();
        return true;
      case kPopMark:
        if (!pop_mark(mark)) return false;
        stack_.resize(mark);
        return true;
      case kDup:
        if (!need(1)) return false;
        stack_.push_back(stack_.back());
        return true;
      case kNone: stack_.push_back(add({Kind::kNone, 0, 0})); return true;
      case kNewTrue: return push_int(1, Kind::kBool);
      case kNewFalse: return push_int(0, Kind::kBool);
      case kInt:
      case kLong: return take_line(b) && text_int(b);
      case kBinInt: return take_uint(4, n) && push_int(static_cast<int32_t>(static_cast<uint32_t>(n)));
      case kBinInt1: return take_uint(1, n) && push_int(static_cast<int64_t>(n));
      case kBinInt2: return take_uint(2, n) && push_int(static_cast<int64_t>(n));
      case kLong1: return take_uint(1, n) && take(n, b) && long_bytes(b);
      case kLong4: return take_uint(4, n) && take(n, b) && long_bytes(b);
      case kFloat: {
        if (!take_line(b)) return false;
        std::string text(b);
        char* end = nullptr;
        double v = std::strtod(text.c_str(), &end);
        return (end && *end == '\0' && !text.empty()) ? push_float(v) : bad("a text float that is not one");
      }
      case kBinFloat: {
        if (!take_uint(8, n)) return false;
        return push_float(double_from_big_endian(n));
      }
      case kShortBinUnicode: return take_uint(1, n) && take(n, b) && push_text(b, Kind::kString);
      case kBinUnicode: return take_uint(4, n) && take(n, b) && push_text(b, Kind::kString);
      case kBinUnicode8: return take_uint(8, n) && take(n, b) && push_text(b, Kind::kString);
      case kShortBinString: return take_uint(1, n) && take(n, b) && push_text(b, Kind::kString);
      case kBinString: return take_uint(4, n) && take(n, b) && push_text(b, Kind::kString);
      case kShortBinBytes: return take_uint(1, n) && take(n, b) && push_text(b, Kind::kBytes);
      case kBinBytes: return take_uint(4, n) && take(n, b) && push_text(b, Kind::kBytes);
      case kBinBytes8: return take_uint(8, n) && take(n, b) && push_text(b, Kind::kBytes);
      case kUnicode: return take_line(b) && unicode_line(b);
      case kString: return take_line(b) && quoted_string(b);
      case kEmptyList: return push_list(Kind::kList);
      case kEmptyTuple: return push_list(Kind::kTuple);
      case kEmptySet: return push_list(Kind::kSet);
      case kEmptyDict: return (sink_ && sink_->takes_dicts() && scan_dict()) || push_dict();
      case kList:
      case kTuple:
      case kFrozenSet: {
        if (!pop_mark(mark)) return false;
        build_from(mark);
        std::vector<Ref> items(stack_.begin() + static_cast<std::ptrdiff_t>(mark), stack_.end());
        stack_.resize(mark);
        return push_list(op == kList ? Kind::kList : op == kTuple ? Kind::kTuple : Kind::kSet, std::move(items));
      }
      case kTuple1:
      case kTuple2:
      case kTuple3: {
        size_t count = op - kTuple1 + 1;
        if (!need(count)) return false;
        build_from(stack_.size() - count);
        std::vector<Ref> items(stack_.end() - static_cast<std::ptrdiff_t>(count), stack_.end());
        stack_.resize(stack_.size() - count);
        return push_list(Kind::kTuple, std::move(items));
      }
      case kDict: {
        if (!pop_mark(mark)) return false;
        push_dict();
        Ref d = stack_.back();
        stack_.pop_back();
        if (!add_items(d, mark)) return false;
        stack_.push_back(d);
        return true;
      }
      case kAppend:
      case kSetItem: {
        size_t count = op == kAppend ? 1 : 2;
        if (!need(count + 1)) return false;
        build_from(stack_.size() - count - 1, stack_.size() - count);  // a dict read whole gets more
        return add_items(stack_[stack_.size() - count - 1], stack_.size() - count);
      }
      case kAppends:
      case kSetItems:
      case kAddItems: {
        Mark batch;
        if (!pop_mark(mark, &batch)) return false;
        if (mark == 0) return bad("items are added to nothing");
        if (!marks_.empty() && marks_.back().stack > mark - 1) return bad("items are added across a MARK");
        build_from(mark - 1, mark);
        return add_items(stack_[mark - 1], mark, &batch);
      }
      case kPut: return take_line(b) && (parse_decimal(b, n) || bad("a PUT index that is not a number")) && memo_put(n);
      case kBinPut: return take_uint(1, n) && memo_put(n);
      case kLongBinPut: return take_uint(4, n) && memo_put(n);
      case kMemoize: return memo_put(put_ids_.count());
      case kGet: return take_line(b) && (parse_decimal(b, n) || bad("a GET index that is not a number")) && memo_get(n);
      case kBinGet: return take_uint(1, n) && memo_get(n);
      case kLongBinGet: return take_uint(4, n) && memo_get(n);
      default: return false;
    }
  }

  std::string_view in_;
  Document owned_;  // streaming: the parser's own
  Document& doc_;
  size_t pos_ = 0;
  std::vector<Ref> stack_;
  std::vector<Mark> marks_;
  ItemSink* sink_ = nullptr;
  const MemoIds* reads_ = nullptr;         // streaming: the memo entries ever read back
  const MemoReads* last_reads_ = nullptr;  // and where each is read the last time
  Memo memo_{reads_};
  MemoIds put_ids_;                   // every index put (MEMOIZE puts at their count)
  std::vector<uint64_t> puts_;        // streaming: the indices kept, in the order put
  std::vector<DictView> read_whole_;  // dicts read whole, reused: those from read_whole_base_ up
  DictView built_view_;               // offer_items': a built dict as a takes_dicts() sink sees it
  size_t read_whole_used_ = 0, read_whole_base_ = 0;
  struct ScanPut {
    uint64_t index;
    size_t value;  // among the dict's keys and values; SIZE_MAX: the dict itself
  };
  std::vector<ScanPut> scan_puts_;
  struct ScanList {
    size_t value;       // among the dict's keys and values
    size_t begin, end;  // its items in scan_refs_
  };
  std::vector<ScanList> scan_lists_;
  std::vector<Ref> scan_refs_;
  // What scan_dict found at small memo indices (a dict's keys are among the first put), until the
  // index is put again or the values move.
  struct Recalled {
    Ref ref = Document::kNoValue;
    Kind kind = Kind::kNone;
    int field = DictView::kNotAField;
  };
  static constexpr uint64_t kMaxRecalled = uint64_t{1} << 16;
  std::vector<Recalled> recalled_;
  bool offered_ = false;  // run_to: a batch went to the sink
  Ref resumed_list_ = 0;
  std::string problem_;
};

bool parse(std::string_view bytes, Document& out, std::string& error) { return Parser(bytes, out).run(error); }

StreamingParse::StreamingParse(std::string_view bytes, const std::function<void(size_t, size_t)>& done_with,
                               unsigned walkers)
    : bytes_(bytes), reads_(std::make_unique<MemoReads>(bytes, done_with, walkers)) {}
StreamingParse::~StreamingParse() = default;
unsigned StreamingParse::walked_in() const { return reads_->pieces; }
unsigned StreamingParse::walks() const { return reads_->walks; }

bool StreamingParse::run(ItemSink& sink, std::string& error) {
  parser_ = std::make_unique<Parser>(bytes_, sink, *reads_);
  return parser_->run(error);
}

const Document& StreamingParse::document() const {
  static const Document kEmpty;
  return parser_ ? parser_->document() : kEmpty;
}

std::unique_ptr<ListCursor> StreamingParse::resume_list(const ResumePoint& at, size_t end, ItemSink& sink) const {
  if (!parser_) return nullptr;
  return std::unique_ptr<ListCursor>(new ListCursor(std::make_unique<Parser>(*parser_, at, sink), end));
}

ListCursor::ListCursor(std::unique_ptr<Parser> parser, size_t end) : parser_(std::move(parser)), end_(end) {}
ListCursor::~ListCursor() = default;
Ref ListCursor::list() const { return parser_->resumed_list(); }
bool ListCursor::next(std::string& error) { return parser_->run_to(end_, error); }
bool ListCursor::done() const { return parser_->position() >= end_; }
size_t ListCursor::position() const { return parser_->position(); }

bool looks_like_pickle(std::string_view bytes) {
  return bytes.size() >= 3 && static_cast<uint8_t>(bytes[0]) == kProto && static_cast<uint8_t>(bytes[1]) >= 2 &&
         static_cast<uint8_t>(bytes[1]) <= 5;
}

// The writer.

namespace {
constexpr uint32_t kBatch = 1000;  // items per APPENDS/SETITEMS, as Python's pickler writes them
// Frames as Python's pickler writes them from protocol 4 on (Lib/pickle.py _Framer, the C
// pickler's _Pickler_CommitFrame, 3.4 to 3.13): FRAME and a length before each run of whole
// opcodes of at least 64 KiB, none before a last run under 4 bytes. A reader can start at any of
// them: memtrace's walks a large pickle's frames on several cores (MemoReads).
constexpr size_t kFrameTarget = 64 * 1024, kFrameMin = 4, kFrameHeader = 9;
}  // namespace

Writer::Writer() {
  out_ += static_cast<char>(kProto);
  out_ += static_cast<char>(4);
  open_frame();
}

void Writer::open_frame() {
  frame_at_ = out_.size();
  out_.append(kFrameHeader, '\0');  // its length once it is whole (commit_frame)
}

void Writer::commit_frame() {
  uint64_t length = out_.size() - frame_at_ - kFrameHeader;
  if (length < kFrameMin) {
    out_.erase(frame_at_, kFrameHeader);
    return;
  }
  out_[frame_at_] = static_cast<char>(kFrame);
  for (size_t i = 0; i < 8; ++i) out_[frame_at_ + 1 + i] = static_cast<char>((length >> (8 * i)) & 0xff);
}

void Writer::item() {
  if (out_.size() - frame_at_ - kFrameHeader >= kFrameTarget) {  // between two opcodes: a frame may end
    commit_frame();
    open_frame();
  }
  if (open_.empty()) return;
  Open& c = open_.back();
  uint32_t limit = c.dict ? 2 * kBatch : kBatch;
  if (c.marked && c.items == limit) close_batch(c);
  if (!c.marked) {
    out_ += static_cast<char>(kMark);
    c.marked = true;
  }
  ++c.items;
}

void Writer::close_batch(Open& c) {
  out_ += static_cast<char>(c.dict ? kSetItems : kAppends);
  c.marked = false;
  c.items = 0;
}

void Writer::none() {
  item();
  out_ += static_cast<char>(kNone);
}

void Writer::boolean(bool v) {
  item();
  out_ += static_cast<char>(v ? kNewTrue : kNewFalse);
}

void Writer::integer(int64_t v) {
  item();
  if (v >= 0 && v < 256) {
    out_ += static_cast<char>(kBinInt1);
    out_ += static_cast<char>(v);
  } else if (v >= 0 && v < 65536) {
    out_ += static_cast<char>(kBinInt2);
    out_ += static_cast<char>(v & 0xff);
    out_ += static_cast<char>(v >> 8);
  } else if (v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max()) {
    out_ += static_cast<char>(kBinInt);
    auto u = static_cast<uint32_t>(static_cast<int32_t>(v));
    for (int i = 0; i < 4; ++i) out_ += static_cast<char>((u >> (8 * i)) & 0xff);
  } else {
    // LONG1: the fewest little-endian two's-complement bytes that keep the sign, as Python writes.
    auto u = static_cast<uint64_t>(v);
    int bytes = 8;
    while (bytes > 1) {
      uint8_t top = (u >> (8 * (bytes - 1))) & 0xff, next = (u >> (8 * (bytes - 2))) & 0xff;
      if ((top == 0 && !(next & 0x80)) || (top == 0xff && (next & 0x80)))
        --bytes;
      else
        break;
    }
    out_ += static_cast<char>(kLong1);
    out_ += static_cast<char>(bytes);
    for (int i = 0; i < bytes; ++i) out_ += static_cast<char>((u >> (8 * i)) & 0xff);
  }
}

void Writer::real(double v) {
  item();
  out_ += static_cast<char>(kBinFloat);
  uint64_t u = big_endian_bits(v);
  out_.append(reinterpret_cast<const char*>(&u), 8);
}

void Writer::get_memo(uint32_t index) {
  if (index < 256) {
    out_ += static_cast<char>(kBinGet);
    out_ += static_cast<char>(index);
  } else {
    out_ += static_cast<char>(kLongBinGet);
    for (int i = 0; i < 4; ++i) out_ += static_cast<char>((index >> (8 * i)) & 0xff);
  }
}

void Writer::put_memo() {
  out_ += static_cast<char>(kMemoize);
  ++next_memo_;
}

void Writer::str(std::string_view v) {
  item();
  auto [it, fresh] = strings_.try_emplace(std::string(v), next_memo_);
  if (!fresh) return get_memo(it->second);
  if (v.size() < 256) {
    out_ += static_cast<char>(kShortBinUnicode);
    out_ += static_cast<char>(v.size());
  } else {
    out_ += static_cast<char>(kBinUnicode);
    auto n = static_cast<uint32_t>(v.size());
    for (int i = 0; i < 4; ++i) out_ += static_cast<char>((n >> (8 * i)) & 0xff);
  }
  out_.append(v);
  put_memo();
}

void Writer::begin_list() {
  item();
  out_ += static_cast<char>(kEmptyList);
  open_.push_back({false});
}

void Writer::begin_dict() {
  item();
  out_ += static_cast<char>(kEmptyDict);
  open_.push_back({true});
}

void Writer::end_list() {
  if (open_.back().marked) close_batch(open_.back());
  open_.pop_back();
}

void Writer::end_dict() { end_list(); }

void Writer::tuple2(int64_t a, int64_t b) {
  item();
  std::vector<Open> saved;
  saved.swap(open_);  // the two items belong to the tuple, not to the open container
  integer(a);
  integer(b);
  saved.swap(open_);
  out_ += static_cast<char>(kTuple2);
}

bool Writer::recall(uint64_t key) {
  auto it = keys_.find(key);
  if (it == keys_.end()) return false;
  item();
  get_memo(it->second);
  return true;
}

void Writer::memoize(uint64_t key) {
  keys_[key] = next_memo_;
  put_memo();
}

std::string Writer::finish() {
  out_ += static_cast<char>(kStop);
  commit_frame();
  return std::move(out_);
}

}  // namespace memtrace::pickle
