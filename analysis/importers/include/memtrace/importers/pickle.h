// Python pickles of plain data, read and written without Python: what PyTorch's memory
// snapshots are (`torch.cuda.memory._dump_snapshot`: dicts, lists, tuples, numbers, strings).
// The reader never runs an opcode that imports or calls anything (GLOBAL, REDUCE, BUILD, ...):
// a pickle that asks for one is refused with a sentence naming the byte. It trusts nothing: every
// length is checked against what is left, and values shared through the memo stay shared (a
// pickle that nests one list in itself a thousand times costs a thousand references, not 2^1000
// copies), so memory grows with the file, never faster.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace memtrace::pickle {

// kInt holds 64 bits (from -2^63 to 2^64-1: read sizes and addresses as unsigned); kBigInt is an
// integer wider than that, whose value is not kept.
enum class Kind : uint8_t { kNone, kBool, kInt, kBigInt, kFloat, kString, kBytes, kList, kTuple, kDict, kSet };

// A value of a parsed pickle: an index into its Document.
using Ref = uint32_t;
struct Value;

class Document {
 public:
  // Every accessor takes any Ref: one that names no value (kNoValue) is None.
  static constexpr Ref kNoValue = ~Ref{0};
  Ref root() const { return root_; }
  Kind kind(Ref v) const { return node(v).kind; }
  bool is(Ref v, Kind k) const { return node(v).kind == k; }
  // kInt and kBool (0/1); 0 for anything else. As unsigned: the same 64 bits.
  int64_t integer(Ref v) const;
  uint64_t unsigned_integer(Ref v) const { return static_cast<uint64_t>(integer(v)); }
  // kFloat, kInt, kBool; 0 for anything else.
  double number(Ref v) const;
  // kString and kBytes; empty for anything else.
  std::string_view text(Ref v) const;
  // The items of a list, tuple or set; empty for anything else.
  const std::vector<Ref>& items(Ref v) const;
  // The entries of a dict, in the order the pickle gave them; empty for anything else.
  const std::vector<std::pair<Ref, Ref>>& entries(Ref v) const;
  // The value under string KEY of dict V, or none.
  bool find(Ref v, std::string_view key, Ref& out) const;
  size_t size() const { return nodes_.size(); }

 private:
  friend class Parser;
  friend void fill_value(const Document& doc, Ref v, Value& out);
  struct Node {
    Kind kind;
    uint32_t index;     // string, list or dict: where it is kept
    int64_t integer;    // kInt, kBool
    double number = 0;  // kFloat
  };
  const Node& node(Ref v) const {
    static const Node kNone{Kind::kNone, 0, 0};
    return v < nodes_.size() ? nodes_[v] : kNone;
  }
  std::vector<Node> nodes_;
  std::vector<std::string> strings_;
  std::vector<std::vector<Ref>> lists_;
  std::vector<std::vector<std::pair<Ref, Ref>>> dicts_;
  Ref root_ = 0;
};

// Parses BYTES as one pickle (protocols 0 to 5). False with ERROR set (one sentence naming the
// byte offset) when it is not one, or asks for anything but plain data.
bool parse(std::string_view bytes, Document& out, std::string& error);

// One value as a sink is offered it in a DictView: scalars and strings in full (TEXT views the
// pickle's bytes, or the Document's), anything else by its Ref.
struct Value {                   // in this order, 40 bytes: a batch of dicts read whole holds thousands
  std::string_view text;         // kString, kBytes
  int64_t integer = 0;           // kInt, kBool
  double number = 0;             // kFloat
  Ref ref = Document::kNoValue;  // the value in the Document, when it is one there
  Kind kind = Kind::kNone;
};
static_assert(sizeof(Value) == 40);
// V of DOC as a Value.
Value value_of(const Document& doc, Ref v);
void fill_value(const Document& doc, Ref v, Value& out);

// A dict as a streaming parse offers it (ItemSink::take_dict): read straight from the opcodes when
// its keys and values are scalars, strings or values of the memo, without building it.
struct DictView {
  // An item's key among the sink's field_names(): its index there, kNotAField for any other key.
  static constexpr int kNotAField = -1;
  struct Item {
    Value key, value;
    int field = kNotAField;  // set for a sink that names its fields
  };
  std::vector<Item> items;         // in the pickle's order; a key given twice is here twice, the last counts
  Ref built = Document::kNoValue;  // the parser's: the dict once it was built into the Document
};
// Dict V of DOC as a DictView (OUT's items replaced).
void view_dict(const Document& doc, Ref v, DictView& out);

// Where a streaming parse stood after a batch of a list's items: enough to parse on from there
// (StreamingParse::resume_list).
struct ResumePoint {
  size_t offset = 0;      // the next opcode
  size_t memo_count = 0;  // memo entries put so far (MEMOIZE puts at this index)
};

// A reader that takes the items of lists as they are added (StreamingParse), so that a large
// pickle need not be held: TAKE is offered each item added to a list; an item it takes is not
// kept in the list, and once a whole batch of items (one APPENDS) is taken, what was built for
// them alone is forgotten. Values the pickle reads back later through its memo are kept.
class ItemSink {
 public:
  virtual ~ItemSink() = default;
  // Whether the reader took ITEM, being added to LIST: DOC's values are valid until it returns.
  virtual bool take(const Document& doc, Ref list, Ref item) = 0;
  // A sink that says yes is offered every dict added to a list as a DictView (take_dict): read
  // straight from the opcodes where the reader can, else a view of the dict it built. take() is
  // offered the rest.
  virtual bool takes_dicts() const { return false; }
  // As take(), for DICT: DOC and DICT are valid until it returns. Not taken, DICT is built into the
  // Document and joins the list.
  virtual bool take_dict(const Document& doc, Ref list, const DictView& dict) {
    (void)doc;
    (void)list;
    (void)dict;
    return false;
  }
  // The string keys a takes_dicts() sink reads: each item of a DictView it is offered says which
  // of them its key is (Item::field), so that the sink compares no key text. The parser learns a
  // memoized key's field once, not once per dict (every key of a snapshot's entries is memoized).
  virtual const std::vector<std::string_view>& field_names() const {
    static const std::vector<std::string_view> kNone;
    return kNone;
  }
  // The values from FIRST on are forgotten: a Ref the sink kept from there means something else now.
  virtual void forget_from(Ref first) { (void)first; }
  // After a batch of LIST's items of which it took some: where the parse is now.
  virtual void batch_done(Ref list, const ResumePoint& here) {
    (void)list;
    (void)here;
  }
};

class Parser;
class ListCursor;

// A parse whose memory grows with what its sink does not take (and with the values the pickle
// shares through its memo), not with the file. Walks the opcodes first, building nothing, to
// learn which memo entries are ever read back and where the last time.
class StreamingParse {
 public:
  // DONE_WITH(begin, end), when given, is told of the bytes the walks are done with. The walks
  // run in up to WALKERS pieces at once where the pickle has frames (Python's pickler writes them):
  // DONE_WITH may be called from several threads at once.
  explicit StreamingParse(std::string_view bytes,
                          const std::function<void(size_t begin, size_t end)>& done_with = nullptr,
                          unsigned walkers = 1);
  ~StreamingParse();
  // How many pieces the walks ran in (1: the pickle as one), and how many walks there were (2
  // where the memo values read back are many).
  unsigned walked_in() const;
  unsigned walks() const;
  // Parses the whole pickle as parse() does, offering list items to SINK. False with ERROR set
  // (one sentence naming the byte offset) as parse().
  bool run(ItemSink& sink, std::string& error);
  // What run() kept: all but what the sink took.
  const Document& document() const;
  // After run(): the items of one list again, from AT (a batch_done of it) to END (the offset its
  // last batch_done gave), offered to SINK as a new empty list, with the values and memo run() left.
  std::unique_ptr<ListCursor> resume_list(const ResumePoint& at, size_t end, ItemSink& sink) const;

 private:
  std::string_view bytes_;
  std::unique_ptr<struct MemoReads> reads_;
  std::unique_ptr<Parser> parser_;
};

class ListCursor {
 public:
  ~ListCursor();
  // The list as the sink is offered its items.
  Ref list() const;
  // Parses on until a batch of the list's items was offered, or to its end. False with ERROR set
  // when the bytes there are not what they were.
  bool next(std::string& error);
  bool done() const;
  // The byte it reads next.
  size_t position() const;

 private:
  friend class StreamingParse;
  explicit ListCursor(std::unique_ptr<Parser> parser, size_t end);
  std::unique_ptr<Parser> parser_;
  size_t end_;
};

// Whether BYTES start as a pickle of protocol 2 or later does (what PyTorch writes).
bool looks_like_pickle(std::string_view bytes);

// Writes plain data as a protocol 4 pickle, with only the opcodes that Python's pickle.dump
// writes for such data and that PyTorch's memory_viz page reads (its own unpickler knows a few
// dozen). Strings are memoized, so a file name repeated a million times is written once; any other
// value can be memoized under a key of the caller's (a stack shared by many events).
class Writer {
 public:
  Writer();
  void none();
  void boolean(bool v);
  void integer(int64_t v);
  void real(double v);
  void str(std::string_view v);
  // Containers: begin, write the items (a dict's: key, value, key, value, ...), end.
  void begin_list();
  void end_list();
  void begin_dict();
  void end_dict();
  void tuple2(int64_t a, int64_t b);
  // Writes the value memoized under KEY and returns true; false when there is none (write it,
  // then memoize(KEY)).
  bool recall(uint64_t key);
  void memoize(uint64_t key);
  // The document: everything written, and STOP.
  std::string finish();

 private:
  struct Open {
    bool dict;
    bool marked = false;
    uint32_t items = 0;  // in the current batch
  };
  void item();  // before every value: a mark, and a batch closed when it is full
  void close_batch(Open& c);
  void put_memo();
  void get_memo(uint32_t index);
  void open_frame();
  void commit_frame();
  std::string out_;
  size_t frame_at_ = 0;  // the header of the frame being written
  std::vector<Open> open_;
  std::unordered_map<std::string, uint32_t> strings_;
  std::unordered_map<uint64_t, uint32_t> keys_;
  uint32_t next_memo_ = 0;
};

}  // namespace memtrace::pickle
