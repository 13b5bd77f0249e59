#include "memtrace/importers/pickle.h"

#include <bit>
#include <charconv>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace memtrace::pickle {

namespace {
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

}  // namespace

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

class Parser {
 public:
  Parser(std::string_view bytes, Document& doc) : in_(bytes), doc_(doc) {}

  bool run(std::string& error) {
    doc_ = Document();
    while (pos_ < in_.size()) {
      size_t at = pos_;
      uint8_t op = static_cast<uint8_t>(in_[pos_++]);
      if (op == kStop) {
        if (stack_.size() != 1 || !marks_.empty()) return fail(at, "STOP leaves no single value", error);
        doc_.root_ = stack_.back();
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
  bool pop_mark(size_t& mark) {
    if (marks_.empty()) return bad("an opcode needs a MARK that is not there");
    mark = marks_.back();
    marks_.pop_back();
    return true;
  }
  bool need(size_t n) {
    size_t floor = marks_.empty() ? 0 : marks_.back();
    return stack_.size() >= floor + n || bad("an opcode needs values that are not on the stack");
  }
  bool add_items(Ref target, size_t from) {
    Document::Node& n = doc_.nodes_[target];
    if (n.kind == Kind::kList || n.kind == Kind::kSet) {
      auto& items = doc_.lists_[n.index];
      items.insert(items.end(), stack_.begin() + static_cast<std::ptrdiff_t>(from), stack_.end());
    } else if (n.kind == Kind::kDict) {
      if ((stack_.size() - from) % 2) return bad("SETITEMS has a key without a value");
      auto& entries = doc_.dicts_[n.index];
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
  bool memo_put(uint64_t index) {
    if (stack_.empty()) return bad("PUT with nothing on the stack");
    memo_[index] = stack_.back();
    return true;
  }
  bool memo_get(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) return bad("GET of a memo entry that was never put");
    stack_.push_back(it->second);
    return true;
  }
  static bool parse_decimal(std::string_view text, uint64_t& out) {
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    return ec == std::errc() && end == text.data() + text.size();
  }
  // Integers are kept as 64 bits, from -2^63 to 2^64-1 (sizes and addresses are unsigned; real
  // snapshots hold line numbers of 2^64-1). Wider ones are kBigInt, their value not kept.
  bool long_bytes(std::string_view b) {
    while (b.size() > 8 && (b.back() == 0 || (static_cast<uint8_t>(b.back()) == 0xff && b.size() > 9)))
      b.remove_suffix(1);  // a sign byte (or bytes) beyond the 64 that carry the value
    if (b.size() > 9 || (b.size() == 9 && static_cast<uint8_t>(b.back()) != 0xff)) return push_int(0, Kind::kBigInt);
    bool negative = !b.empty() && (static_cast<uint8_t>(b.back()) & 0x80) && b.size() <= 8;
    if (b.size() == 9) {  // negative, 0xff beyond 64 bits: fits int64 only if bit 63 is set
      if (!(static_cast<uint8_t>(b[7]) & 0x80)) return push_int(0, Kind::kBigInt);
      b.remove_suffix(1);
      negative = true;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < b.size(); ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(b[i])) << (8 * i);
    if (negative && b.size() < 8) v |= ~0ull << (8 * b.size());
    return push_int(static_cast<int64_t>(v));
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
      case kMark: marks_.push_back(stack_.size()); return true;
      case kPop:
        if (!marks_.empty() && marks_.back() == stack_.size()) {  // POP of a mark, as Python allows
          marks_.pop_back();
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
        return push_float(std::bit_cast<double>(__builtin_bswap64(n)));  // stored big-endian
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
      case kEmptyDict: return push_dict();
      case kList:
      case kTuple:
      case kFrozenSet: {
        if (!pop_mark(mark)) return false;
        std::vector<Ref> items(stack_.begin() + static_cast<std::ptrdiff_t>(mark), stack_.end());
        stack_.resize(mark);
        return push_list(op == kList ? Kind::kList : op == kTuple ? Kind::kTuple : Kind::kSet, std::move(items));
      }
      case kTuple1:
      case kTuple2:
      case kTuple3: {
        size_t count = op - kTuple1 + 1;
        if (!need(count)) return false;
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
        return add_items(stack_[stack_.size() - count - 1], stack_.size() - count);
      }
      case kAppends:
      case kSetItems:
      case kAddItems: {
        if (!pop_mark(mark)) return false;
        if (mark == 0) return bad("items are added to nothing");
        if (!marks_.empty() && marks_.back() > mark - 1) return bad("items are added across a MARK");
        return add_items(stack_[mark - 1], mark);
      }
      case kPut: return take_line(b) && (parse_decimal(b, n) || bad("a PUT index that is not a number")) && memo_put(n);
      case kBinPut: return take_uint(1, n) && memo_put(n);
      case kLongBinPut: return take_uint(4, n) && memo_put(n);
      case kMemoize: return memo_put(memo_.size());
      case kGet: return take_line(b) && (parse_decimal(b, n) || bad("a GET index that is not a number")) && memo_get(n);
      case kBinGet: return take_uint(1, n) && memo_get(n);
      case kLongBinGet: return take_uint(4, n) && memo_get(n);
      default: return false;
    }
  }

  std::string_view in_;
  Document& doc_;
  size_t pos_ = 0;
  std::vector<Ref> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Ref> memo_;
  std::string problem_;
};

bool parse(std::string_view bytes, Document& out, std::string& error) { return Parser(bytes, out).run(error); }

bool looks_like_pickle(std::string_view bytes) {
  return bytes.size() >= 3 && static_cast<uint8_t>(bytes[0]) == kProto && static_cast<uint8_t>(bytes[1]) >= 2 &&
         static_cast<uint8_t>(bytes[1]) <= 5;
}

// The writer.

namespace {
constexpr uint32_t kBatch = 1000;  // items per APPENDS/SETITEMS, as Python's pickler writes them
}

Writer::Writer() {
  out_ += static_cast<char>(kProto);
  out_ += static_cast<char>(4);
}

void Writer::item() {
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
  uint64_t u = __builtin_bswap64(std::bit_cast<uint64_t>(v));
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
  return std::move(out_);
}

}  // namespace memtrace::pickle
