// The pickle reader and writer: every protocol Python writes, plain data only, values shared through
// the memo kept shared, every length checked; the writer's output read back by the reader (and, in
// the e2e tests, by Python and by memory_viz's rules).
#include "memtrace/importers/pickle.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace memtrace::pickle;

std::string unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

// pickle.dumps(VALUE, protocol=p) for p = 0..5 (CPython 3.11), where VALUE is
// {'a': [1, -2, 3.5, None, True, False, 'xxx', '\u00e9', (1, 2, 3), (7,), (), 2**40, -2**63, 2**64-1, 300,
//        70000, 'y'*300], 'k': {'n': 'nested'}}
const char* const kEveryProtocol[] = {
    "286470300a56610a70310a286c70320a49310a61492d320a6146332e350a614e614930310a614930300a61567878780a70330a6156e90a7034"
    "0a612849310a49320a49330a7470350a612849370a7470360a612874614c313039393531313632373737364c0a614c2d393232333337323033"
    "363835343737353830384c0a614c31383434363734343037333730393535313631354c0a61493330300a614937303030300a61567979797979"
    "797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979"
    "797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979"
    "797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979"
    "797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979"
    "797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979"
    "797979797979797979790a70370a6173566b0a70380a286470390a566e0a7031300a566e65737465640a7031310a73732e",  // protocol 0
    "7d71002858010000006171015d7102284b014afeffffff47400c0000000000004e4930310a4930300a580300000078787871035802000000c3"
    "a97104284b014b024b03747105284b07747106294c313039393531313632373737364c0a4c2d39323233333732303336383534373735383038"
    "4c0a4c31383434363734343037333730393535313631354c0a4d2c014a70110100582c01000079797979797979797979797979797979797979"
    "797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979"
    "797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979"
    "797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979"
    "797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979"
    "797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797971076558"
    "010000006b71087d710958010000006e710a58060000006e6573746564710b73752e",  // protocol 1
    "80027d71002858010000006171015d7102284b014afeffffff47400c0000000000004e8889580300000078787871035802000000c3a971044b"
    "014b024b038771054b07857106298a060000000000018a0800000000000000808a09ffffffffffffffff004d2c014a70110100582c01000079"
    "797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979"
    "797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979"
    "797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979"
    "797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979"
    "797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979"
    "797979797979797979797979797971076558010000006b71087d710958010000006e710a58060000006e6573746564710b73752e",  // protocol
                                                                                                                 // 2
    "80037d71002858010000006171015d7102284b014afeffffff47400c0000000000004e8889580300000078787871035802000000c3a971044b"
    "014b024b038771054b07857106298a060000000000018a0800000000000000808a09ffffffffffffffff004d2c014a70110100582c01000079"
    "797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979"
    "797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979"
    "797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979"
    "797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979"
    "797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979"
    "797979797979797979797979797971076558010000006b71087d710958010000006e710a58060000006e6573746564710b73752e",  // protocol
                                                                                                                 // 3
    "800495a3010000000000007d94288c0161945d94284b014afeffffff47400c0000000000004e88898c03787878948c02c3a9944b014b024b03"
    "87944b078594298a060000000000018a0800000000000000808a09ffffffffffffffff004d2c014a70110100582c0100007979797979797979"
    "797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979"
    "797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979"
    "797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979"
    "797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979"
    "797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979"
    "7979797979797994658c016b947d948c016e948c066e65737465649473752e",  // protocol 4
    "800595a3010000000000007d94288c0161945d94284b014afeffffff47400c0000000000004e88898c03787878948c02c3a9944b014b024b03"
    "87944b078594298a060000000000018a0800000000000000808a09ffffffffffffffff004d2c014a70110100582c0100007979797979797979"
    "797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979"
    "797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979"
    "797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979"
    "797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979"
    "797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979"
    "7979797979797994658c016b947d948c016e948c066e65737465649473752e",  // protocol 5
};

Ref at(const Document& d, Ref dict, const char* key) {
  Ref v = 0;
  EXPECT_TRUE(d.find(dict, key, v)) << key;
  return v;
}

TEST(Pickle, EveryProtocolPythonWritesReadsTheSame) {
  for (int protocol = 0; protocol < 6; ++protocol) {
    SCOPED_TRACE("protocol " + std::to_string(protocol));
    Document d;
    std::string error;
    ASSERT_TRUE(parse(unhex(kEveryProtocol[protocol]), d, error)) << error;
    ASSERT_TRUE(d.is(d.root(), Kind::kDict));
    const auto& a = d.items(at(d, d.root(), "a"));
    ASSERT_EQ(a.size(), 17u);
    EXPECT_EQ(d.integer(a[0]), 1);
    EXPECT_EQ(d.integer(a[1]), -2);
    EXPECT_DOUBLE_EQ(d.number(a[2]), 3.5);
    EXPECT_TRUE(d.is(a[3], Kind::kNone));
    EXPECT_TRUE(d.is(a[4], Kind::kBool));
    EXPECT_EQ(d.integer(a[4]), 1);
    EXPECT_EQ(d.integer(a[5]), 0);
    EXPECT_EQ(d.text(a[6]), "xxx");
    EXPECT_EQ(d.text(a[7]), "\xc3\xa9");  // UTF-8, whatever the protocol wrote
    EXPECT_EQ(d.items(a[8]).size(), 3u);
    EXPECT_EQ(d.integer(d.items(a[8])[2]), 3);
    EXPECT_EQ(d.items(a[9]).size(), 1u);
    EXPECT_TRUE(d.is(a[10], Kind::kTuple));
    EXPECT_EQ(d.integer(a[11]), int64_t(1) << 40);
    EXPECT_EQ(d.integer(a[12]), INT64_MIN);
    EXPECT_EQ(d.unsigned_integer(a[13]), UINT64_MAX);
    EXPECT_EQ(d.integer(a[14]), 300);
    EXPECT_EQ(d.integer(a[15]), 70000);
    EXPECT_EQ(d.text(a[16]), std::string(300, 'y'));
    EXPECT_EQ(d.text(at(d, at(d, d.root(), "k"), "n")), "nested");
  }
}

// a = [1]; 40 times: a = [a, a]. Kept as Python keeps it: each list once, shared.
TEST(Pickle, ValuesSharedThroughTheMemoStaySharedNotCopied) {
  Document d;
  std::string error;
  ASSERT_TRUE(parse(
      unhex("800495f6000000000000005d94285d94285d94285d94285d94285d94285d94285d94285d94285d94285d94285d94285d94285d9428"
            "5d94285d94285d94285d94285d94285d94285d94285d94285d94285d94285d94285d94285d94285d94285d94285d94285d94285d94"
            "285d94285d94285d94285d94285d94285d94285d94285d94285d944b01616828656827656826656825656824656823656822656821"
            "65682065681f65681e65681d65681c65681b65681a6568196568186568176568166568156568146568136568126568116568106568"
            "0f65680e65680d65680c65680b65680a656809656808656807656806656805656804656803656802656801652e"),
      d, error))
      << error;
  EXPECT_LT(d.size(), 200u);  // 2^40 leaves if copied
  Ref v = d.root();
  for (int depth = 0; depth < 40; ++depth) {
    ASSERT_EQ(d.items(v).size(), 2u);
    EXPECT_EQ(d.items(v)[0], d.items(v)[1]);
    v = d.items(v)[0];
  }
  EXPECT_EQ(d.integer(d.items(v)[0]), 1);
}

TEST(Pickle, AnythingButPlainDataIsRefusedWithTheByte) {
  Document d;
  std::string error;
  // pickle.dumps(datetime.date(2026, 1, 1), protocol=4): STACK_GLOBAL, then REDUCE.
  EXPECT_FALSE(
      parse(unhex("80049520000000000000008c086461746574696d65948c0464617465949394430407ea010194859452942e"), d, error));
  EXPECT_NE(error.find("byte 29: the pickle imports a Python object (GLOBAL)"), std::string::npos) << error;
  // A REDUCE with no GLOBAL before it is refused too, before it could run.
  EXPECT_FALSE(parse(unhex("8004294e52"), d, error));
  EXPECT_NE(error.find("calls a function (REDUCE)"), std::string::npos) << error;
  for (const char* op : {"62", "69", "6f", "81", "92", "50", "51", "82", "96", "97", "98"}) {
    EXPECT_FALSE(parse(unhex(std::string("80045d") + op), d, error)) << op;
    EXPECT_NE(error.find("byte 3: "), std::string::npos) << op << ": " << error;
  }
}

TEST(Pickle, BrokenPicklesSayWhatIsWrong) {
  Document d;
  std::string error;
  const std::string whole = unhex(kEveryProtocol[4]);
  for (size_t cut : {size_t(0), size_t(1), size_t(5), whole.size() / 2, whole.size() - 1}) {
    EXPECT_FALSE(parse(whole.substr(0, cut), d, error)) << cut;
    EXPECT_FALSE(error.empty());
  }
  EXPECT_FALSE(parse(whole.substr(0, whole.size() - 1), d, error));
  EXPECT_NE(error.find("ends before its STOP"), std::string::npos) << error;
  EXPECT_FALSE(parse(unhex("8004"
                           "8cff"
                           "61"),
                     d, error));  // a string longer than the file
  EXPECT_NE(error.find("runs past the end"), std::string::npos) << error;
  EXPECT_FALSE(parse(unhex("8004"
                           "68"
                           "07"
                           "2e"),
                     d, error));  // BINGET of nothing put
  EXPECT_NE(error.find("never put"), std::string::npos) << error;
  EXPECT_FALSE(parse(unhex("8004"
                           "65"
                           "2e"),
                     d, error));  // APPENDS without a MARK
  EXPECT_NE(error.find("MARK"), std::string::npos) << error;
  EXPECT_FALSE(parse(unhex("8004"
                           "4b01"
                           "4b02"
                           "2e"),
                     d, error));  // two values left at STOP
  EXPECT_NE(error.find("single value"), std::string::npos) << error;
  EXPECT_FALSE(parse(unhex("8006"
                           "4e2e"),
                     d, error));
  EXPECT_NE(error.find("protocol newer than 5"), std::string::npos) << error;
  EXPECT_FALSE(looks_like_pickle("MEMTRACE"));
  EXPECT_TRUE(looks_like_pickle(unhex("80049500")));
}

TEST(Pickle, WriterOutputReadsBackWithSharedStrings) {
  Writer w;
  w.begin_dict();
  w.str("segments");
  w.begin_list();
  for (int i = 0; i < 2500; ++i) {  // more than one APPENDS batch
    w.begin_dict();
    w.str("address");
    w.integer(int64_t(1) << 47 | i);
    w.str("name");
    w.str("forward");
    w.str("pool");
    w.tuple2(0, i);
    w.str("big");
    w.integer(i % 2 ? INT64_MIN : -70000);
    w.str("float");
    w.real(0.25);
    w.end_dict();
  }
  w.end_list();
  w.str("stack");
  w.begin_list();
  w.integer(7);
  w.end_list();
  w.memoize(42);
  w.str("again");
  EXPECT_TRUE(w.recall(42));
  EXPECT_FALSE(w.recall(43));
  w.str("flags");
  w.begin_list();
  w.boolean(true);
  w.none();
  w.end_list();
  w.end_dict();
  std::string bytes = w.finish();
  Document d;
  std::string error;
  ASSERT_TRUE(parse(bytes, d, error)) << error;
  const auto& segments = d.items(at(d, d.root(), "segments"));
  ASSERT_EQ(segments.size(), 2500u);
  EXPECT_EQ(d.integer(at(d, segments[2499], "address")), int64_t(1) << 47 | 2499);
  EXPECT_EQ(d.text(at(d, segments[10], "name")), "forward");
  EXPECT_EQ(d.integer(d.items(at(d, segments[9], "pool"))[1]), 9);
  EXPECT_EQ(d.integer(at(d, segments[1], "big")), INT64_MIN);
  EXPECT_EQ(d.integer(at(d, segments[2], "big")), -70000);
  EXPECT_DOUBLE_EQ(d.number(at(d, segments[3], "float")), 0.25);
  EXPECT_EQ(at(d, d.root(), "stack"), at(d, d.root(), "again"));  // one list, recalled
  EXPECT_EQ(d.items(at(d, d.root(), "flags")).size(), 2u);
  // "forward" is written once, then recalled from the memo.
  EXPECT_EQ(bytes.find("forward"), bytes.rfind("forward"));
}

// A streaming parse offers dicts read straight from the opcodes (DictView) to a sink that asks:
// it must see what a sink offered the built values sees, and leave the same Document behind.
std::string render(const Document& d, const Value& v, int depth = 0);
std::string render_dict(const std::vector<std::pair<std::string, std::string>>& items) {
  std::map<std::string, std::string> last;  // a key given again: the last value counts
  for (const auto& [k, v] : items) last[k] = v;
  std::string out = "{";
  for (const auto& [k, v] : last) out += k + ":" + v + ",";
  return out + "}";
}
std::string render(const Document& d, const Value& v, int depth) {
  if (depth > 20) return "...";
  switch (v.kind) {
    case Kind::kNone: return "None";
    case Kind::kBool: return v.integer ? "True" : "False";
    case Kind::kInt: return std::to_string(v.integer);
    case Kind::kBigInt: return "big";
    case Kind::kFloat: return std::to_string(v.number);
    case Kind::kString: return "'" + std::string(v.text) + "'";
    case Kind::kBytes: return "b'" + std::string(v.text) + "'";
    case Kind::kList:
    case Kind::kTuple:
    case Kind::kSet: {
      std::string out = v.kind == Kind::kList ? "[" : "(";
      for (Ref item : d.items(v.ref)) out += render(d, value_of(d, item), depth + 1) + ",";
      return out + (v.kind == Kind::kList ? "]" : ")");
    }
    case Kind::kDict: {
      std::vector<std::pair<std::string, std::string>> items;
      for (auto [k, value] : d.entries(v.ref))
        items.emplace_back(render(d, value_of(d, k), depth + 1), render(d, value_of(d, value), depth + 1));
      return render_dict(items);
    }
  }
  return "?";
}

// Takes the dicts with an 'action' (as the snapshot importer does), writing down each.
// With NAMES, it names those fields (ItemSink::field_names) and checks each item's.
class ActionSink : public ItemSink {
 public:
  explicit ActionSink(bool views, std::vector<std::string_view> names = {}) : views_(views), names_(std::move(names)) {}
  bool takes_dicts() const override { return views_; }
  const std::vector<std::string_view>& field_names() const override { return names_; }
  bool take(const Document& doc, Ref, Ref item) override {
    if (!doc.is(item, Kind::kDict)) return false;
    DictView view;
    view_dict(doc, item, view);
    return take_view(doc, view);
  }
  bool take_dict(const Document& doc, Ref, const DictView& dict) override {
    EXPECT_TRUE(views_);
    views_taken += dict.built == Document::kNoValue;  // read whole, not a view of one built
    return take_view(doc, dict);
  }
  std::vector<std::string> taken;
  size_t views_taken = 0;

 private:
  bool take_view(const Document& doc, const DictView& dict) {
    std::vector<std::pair<std::string, std::string>> items;
    bool action = false;
    for (const auto& [k, v, field] : dict.items) {
      if (field >= 0) {
        EXPECT_EQ(k.text, names_[static_cast<size_t>(field)]);
      } else if (k.kind == Kind::kString) {
        EXPECT_EQ(std::find(names_.begin(), names_.end(), k.text), names_.end()) << k.text << " has a field";
      }
      action |= k.kind == Kind::kString && k.text == "action";
      items.emplace_back(render(doc, k), render(doc, v));
    }
    if (action) taken.push_back(render_dict(items));
    return action;
  }
  bool views_;
  std::vector<std::string_view> names_;
};

void expect_same_with_views(const std::string& bytes, bool takes_some = true) {
  ActionSink built(false), viewed(true), named(true, {"size", "action", "frames", "addr"});
  StreamingParse a(bytes), b(bytes), c(bytes);
  std::string error_a, error_b, error_c;
  bool ok_a = a.run(built, error_a), ok_b = b.run(viewed, error_b), ok_c = c.run(named, error_c);
  EXPECT_TRUE(ok_a) << error_a;  // every case here is a pickle Python reads
  ASSERT_EQ(ok_a, ok_b) << error_a << " / " << error_b;
  ASSERT_EQ(ok_a, ok_c) << error_a << " / " << error_c;
  EXPECT_EQ(error_a, error_b);
  EXPECT_EQ(built.taken, viewed.taken);
  EXPECT_EQ(built.taken, named.taken);
  EXPECT_EQ(!built.taken.empty(), takes_some);
  std::string whole = render(a.document(), value_of(a.document(), a.document().root()));
  EXPECT_EQ(whole, render(b.document(), value_of(b.document(), b.document().root())));
  EXPECT_EQ(whole, render(c.document(), value_of(c.document(), c.document().root())));
}

// The snapshot-like value below, pickled by CPython 3.11 with protocols 3 (BINPUT, BINUNICODE) and
// 4 (MEMOIZE, FRAME): entries sharing their frames, one dict read back (not read whole), one in a
// tuple, one that is no entry, every kind of scalar.
//   F = [{'filename': 'a.py', 'line': 1, 'name': 'f'}]; shared = {'action': 'alloc', 'addr': 1, 'size': 2}
//   e1 = {'action': 'alloc', 'addr': 2**47+5, 'size': 512, 'stream': 0, 'time_us': 123, 'frames': F,
//         'f': 1.5, 'n': None, 'b': True, 'big': 2**70, 'neg': -5, 'u': '\u00e9', 'by': b'xy'}
//   e2 = {'action': 'free_requested', 'addr': 2**47+5, 'size': 512, 'frames': F}
//   G = [F[0], F[0]]; H = [F[0]]  (lists first written inside an entry, as PyTorch's new tracebacks are)
//   {'segments': [{'address': 1, 'blocks': [{'size': 3, 'state': 'active_allocated', 'frames': F}]}],
//    'device_traces': [[e1, e2, shared, shared, {'name': 'not an entry', 'v': [1, 2]},
//                       {'action': 'alloc', 'frames': F, 'addr': 7}, {'action': 'segment_alloc', 'addr': 9},
//                       {'action': 'alloc', 'addr': 11, 'frames': G},
//                       {'action': 'free_requested', 'addr': 11, 'frames': G},
//                       {'action': 'alloc', 'addr': 13, 'frames': H}], []],
//    'again': shared, 'tuple': (e2,)}
const char* const kSnapshotLike[] = {
    // protocol 3
    "80037d71002858080000007365676d656e747371015d71027d71032858070000006164647265737371044b0158060000"
    "00626c6f636b7371055d71067d710728580400000073697a6571084b0358050000007374617465710958100000006163"
    "746976655f616c6c6f6361746564710a58060000006672616d6573710b5d710c7d710d28580800000066696c656e616d"
    "65710e5804000000612e7079710f58040000006c696e6571104b0158040000006e616d65711158010000006671127561"
    "75617561580d0000006465766963655f74726163657371135d7114285d7115287d7116285806000000616374696f6e71"
    "175805000000616c6c6f63711858040000006164647271198a070500000000800068084d000258060000007374726561"
    "6d711a4b00580700000074696d655f7573711b4b7b680b680c6812473ff800000000000058010000006e711c4e580100"
    "000062711d885803000000626967711e8a0900000000000000004058030000006e6567711f4afbffffff580100000075"
    "71205802000000c3a97121580200000062797122430278797123757d7124286817580e000000667265655f7265717565"
    "73746564712568198a070500000000800068084d0002680b680c757d7126286817681868194b0168084b027568267d71"
    "27286811580c0000006e6f7420616e20656e747279712858010000007671295d712a284b014b0265757d712b28681768"
    "18680b680c68194b07757d712c286817580d0000007365676d656e745f616c6c6f63712d68194b09757d712e28681768"
    "1868194b0b680b5d712f28680d680d65757d7130286817682568194b0b680b682f757d7131286817681868194b0d680b"
    "5d7132680d6175655d7133655805000000616761696e7134682658050000007475706c6571356824857136752e",
    // protocol 4
    "80049507020000000000007d94288c087365676d656e7473945d947d94288c0761646472657373944b018c06626c6f63"
    "6b73945d947d94288c0473697a65944b038c057374617465948c106163746976655f616c6c6f6361746564948c066672"
    "616d6573945d947d94288c0866696c656e616d65948c04612e7079948c046c696e65944b018c046e616d65948c016694"
    "7561756175618c0d6465766963655f747261636573945d94285d94287d94288c06616374696f6e948c05616c6c6f6394"
    "8c0461646472948a070500000000800068084d00028c0673747265616d944b008c0774696d655f7573944b7b680b680c"
    "6812473ff80000000000008c016e944e8c016294888c03626967948a090000000000000000408c036e6567944afbffff"
    "ff8c0175948c02c3a9948c026279944302787994757d942868178c0e667265655f7265717565737465649468198a0705"
    "00000000800068084d0002680b680c757d94286817681868194b0168084b027568267d942868118c0c6e6f7420616e20"
    "656e747279948c0176945d94284b014b0265757d942868176818680b680c68194b07757d942868178c0d7365676d656e"
    "745f616c6c6f639468194b09757d94286817681868194b0b680b5d9428680d680d65757d94286817682568194b0b680b"
    "682f757d94286817681868194b0d680b5d94680d6175655d94658c05616761696e9468268c057475706c659468248594"
    "752e",
};

TEST(StreamingParse, DictsReadWholeAreWhatTheParserWouldBuild) {
  for (const char* hex : kSnapshotLike) expect_same_with_views(unhex(hex));
  std::string bytes = unhex(kSnapshotLike[1]);
  ActionSink viewed(true);
  StreamingParse parse(bytes);
  std::string error;
  ASSERT_TRUE(parse.run(viewed, error)) << error;
  EXPECT_EQ(viewed.taken.size(), 9u);
  // Offered as views: e1 and the last five entries (shared, e2 and the frame's dict are read back).
  EXPECT_EQ(viewed.views_taken, 6u);
}

// PyTorch gives every entry a frames list of its own. Where 'frames' is not the last key, the next
// key (a memo get) follows the list: it is no item of it (an APPEND would say so), and the entry
// is still read whole. Pickled by CPython 3.11, protocol 4:
//   F = {'filename': 'a.py', 'line': 1, 'name': 'f'}; G = {'filename': 'b.py', 'line': 2, 'name': 'g'}
//   {'segments': [], 'device_traces': [[{'action': 'alloc', 'frames': [F, G], 'addr': i, 'size': 512}
//                                         for i in range(3)] +
//                                        [{'action': 'free_requested', 'frames': [G], 'addr': 1, 'size': 512}]]}
TEST(StreamingParse, AFramesListBeforeAnotherKeyIsReadWhole) {
  std::string bytes = unhex(
      "800495fc000000000000007d94288c087365676d656e7473945d948c0d6465766963655f747261636573945d945d9428"
      "7d94288c06616374696f6e948c05616c6c6f63948c066672616d6573945d94287d94288c0866696c656e616d65948c04"
      "612e7079948c046c696e65944b018c046e616d65948c016694757d9428680c8c04622e707994680e4b02680f8c016794"
      "75658c0461646472944b008c0473697a65944d0002757d94286807680868095d9428680b68116568144b0168154d0002"
      "757d94286807680868095d9428680b68116568144b0268154d0002757d942868078c0e667265655f7265717565737465"
      "649468095d9468116168144b0168154d0002756561752e");
  expect_same_with_views(bytes);
  ActionSink viewed(true);
  StreamingParse parse(bytes);
  std::string error;
  ASSERT_TRUE(parse.run(viewed, error)) << error;
  EXPECT_EQ(viewed.taken.size(), 4u);
  EXPECT_EQ(viewed.views_taken, 3u);  // all but the first, whose list holds F and G themselves
}

// A snapshot-like pickle of FREES free_requested/free_completed pairs, each pair sharing its
// frames list through the memo (pair i the list LIST_OF(i), when given: lists shared by many
// pairs, as stacks are), and a string MARKER an entry (MARKER(i), when given) that a test may
// rewrite.
std::string free_pairs(int frees, const std::function<std::string(int)>& marker = nullptr,
                       const std::function<int(int)>& list_of = nullptr) {
  Writer w;
  w.begin_dict();
  w.str("device_traces");
  w.begin_list();
  w.begin_list();
  for (int i = 0; i < frees; ++i) {
    for (const char* action : {"free_requested", "free_completed"}) {
      w.begin_dict();
      w.str("action");
      w.str(action);
      w.str("addr");
      w.integer(i);
      if (marker) {
        w.str("note");
        w.str(marker(i) + action[5]);  // 'r' or 'c': each its own
      }
      w.str("frames");
      const int list = list_of ? list_of(i) : i;
      if (!w.recall(static_cast<uint64_t>(list))) {
        w.begin_list();
        w.integer(list);
        w.integer(list + 1);
        w.end_list();
        w.memoize(static_cast<uint64_t>(list));
      }
      w.end_dict();
    }
  }
  w.end_list();
  w.end_list();
  w.end_dict();
  return w.finish();
}

// PyTorch records both halves of a free with one context: each free_completed reads its
// free_requested's frames list back through the memo. A streaming parse lets such a value go once
// nothing will read it again, so that what it holds does not grow with the file.
TEST(StreamingParse, WhatTheMemoReadsBackIsLetGoAfterItsLastRead) {
  constexpr int kFrees = 20000;
  std::string bytes = free_pairs(kFrees);
  ActionSink sink(true, {"action", "frames"});
  StreamingParse parse(bytes);
  std::string error;
  ASSERT_TRUE(parse.run(sink, error)) << error;
  ASSERT_EQ(sink.taken.size(), 2u * kFrees);
  EXPECT_EQ(sink.taken[1], sink.taken[0].replace(sink.taken[0].find("requested"), 9, "completed"));
  // Kept to the end, the lists were 3 values each (60,000); what is left is the containers.
  EXPECT_LT(parse.document().size(), 100u);
  EXPECT_EQ(parse.walks(), 2u);  // 20,000 values read back: where each is read last, found by rank
}

// What a parse of BYTES took, and how many values it kept; walked in WALKERS pieces at most.
struct Parsed {
  std::vector<std::string> taken;
  size_t kept = 0;
  unsigned pieces = 0;
};
Parsed parse_walked(const std::string& bytes, unsigned walkers) {
  ActionSink sink(true, {"action", "frames"});
  StreamingParse parse(bytes, nullptr, walkers);
  std::string error;
  EXPECT_TRUE(parse.run(sink, error)) << error;
  return {sink.taken, parse.document().size(), parse.walked_in()};
}

// The walks that learn what the memo reads back run in pieces on threads of their own, each from
// a frame's start (Python's pickler and memtrace's writer frame every 64 KiB): what they find is
// what one walk finds, so the parse takes and keeps the same.
TEST(StreamingParse, WalkedInPiecesAtFramesAsInOne) {
  std::string bytes = free_pairs(60000);
  ASSERT_GT(bytes.size(), 2u << 20);
  Parsed one = parse_walked(bytes, 1);
  EXPECT_EQ(one.pieces, 1u);
  ASSERT_EQ(one.taken.size(), 120000u);
  EXPECT_LT(one.kept, 100u);  // each pair's list let go after its second read
  for (unsigned walkers : {2u, 3u, 4u, 64u}) {
    Parsed many = parse_walked(bytes, walkers);
    EXPECT_EQ(many.pieces, std::min(walkers, 4u)) << walkers;  // 4 at most: 8 bytes a value read back each
    EXPECT_EQ(many.taken, one.taken) << walkers;
    EXPECT_EQ(many.kept, one.kept) << walkers;
  }
  // Too small to share: one walk.
  EXPECT_EQ(parse_walked(free_pairs(100), 4).pieces, 1u);
}

// Where the values read back are few (a dict's keys, and frames lists shared by many entries, as
// in memtrace's own exports), one walk learns where each is read the last time: the same values
// are let go after it, in one piece or several.
TEST(StreamingParse, FewValuesReadBackAreLearnedInOneWalk) {
  // 3,100 lists: the first 3,000 pairs' each its own, the rest share 100. Their memo indices small
  // (the first few thousand), or large (a new string each entry, put and never read, before them).
  auto list_of = [](int i) { return i < 3000 ? i : 3000 + i % 100; };
  std::function<std::string(int)> note = [](int i) { return "note " + std::to_string(i); };
  for (bool large : {false, true}) {
    std::string bytes = free_pairs(80000, large ? note : nullptr, list_of);
    ASSERT_GT(bytes.size(), 2u << 20);
    Parsed one = parse_walked(bytes, 1);
    ASSERT_EQ(one.taken.size(), 160000u);
    ActionSink sink(true, {"action", "frames"});
    StreamingParse parse(bytes);
    std::string error;
    ASSERT_TRUE(parse.run(sink, error)) << error;
    EXPECT_EQ(parse.walks(), 1u) << large;
    EXPECT_EQ(sink.taken, one.taken);
    // The first 3,000 pairs' lists let go after their second read (3 values each: kept to the
    // end, 9,300 values); the 100 shared ones read to the end.
    EXPECT_LT(one.kept, 400u) << large;
    EXPECT_GT(one.kept, 300u) << large;
    for (unsigned walkers : {2u, 4u}) {
      Parsed many = parse_walked(bytes, walkers);
      EXPECT_EQ(many.pieces, walkers);
      EXPECT_EQ(many.taken, one.taken) << walkers;
      EXPECT_EQ(many.kept, one.kept) << walkers;
    }
  }
}

// A frame's length may lie (nothing but our own walk reads them: Python's C unpickler and our
// parse do not). A piece's walk that does not end where the next piece begins finds the lie, and
// one walk reads the pickle.
TEST(StreamingParse, FramesThatLieAreWalkedAsOne) {
  // Strings that look like a frame's header once rewritten: FRAME and eight bytes.
  std::string bytes = free_pairs(60000, [](int i) { return "\x95" + std::to_string(10000000 + i); });
  std::vector<size_t> frames;  // the frames' starts, as chained by their lengths
  for (size_t p = 2; p + 9 < bytes.size() && static_cast<uint8_t>(bytes[p]) == 0x95;) {
    frames.push_back(p);
    uint64_t length = 0;
    std::memcpy(&length, bytes.data() + p + 1, 8);
    p += 9 + length;
  }
  ASSERT_GT(frames.size(), 10u);
  // The frame that holds the middle leads to a marker inside it past the middle (inside a string,
  // not at an opcode), and the marker's eight bytes on to the next frame, as a true chain would.
  size_t middle = bytes.size() / 2;
  size_t j = 0;
  while (j + 1 < frames.size() && frames[j + 1] <= middle) ++j;
  size_t fake = bytes.find(std::string("\x8c\x0a\x95", 3), middle) + 2;  // SHORT_BINUNICODE of ten bytes
  ASSERT_LT(fake + 9, frames[j + 1]);
  ASSERT_GT(fake, frames[j] + 9);
  uint64_t to_fake = fake - frames[j] - 9, to_next = frames[j + 1] - fake - 9;
  ASSERT_EQ(parse_walked(bytes, 2).pieces, 2u);  // before the lie
  std::memcpy(bytes.data() + frames[j] + 1, &to_fake, 8);
  std::memcpy(bytes.data() + fake + 1, &to_next, 8);

  Parsed one = parse_walked(bytes, 1), two = parse_walked(bytes, 2);
  EXPECT_EQ(two.pieces, 1u);
  ASSERT_EQ(one.taken.size(), 120000u);
  EXPECT_EQ(two.taken, one.taken);
  EXPECT_EQ(two.kept, one.kept);
}

// Opcodes Python does not write, each around a dict the parser could read whole.
TEST(StreamingParse, DictsReadWholeAreBuiltWhenTheOpcodesAskForThem) {
  const std::string head = std::string("\x80\x04]\x94(", 5);
  const std::string entry = std::string("}(\x8c\x06", 4) + "action" + "\x8c\x05" + "alloc";
  // {'x': 5, 'y': 6}, its keys put in the memo at 1 and 2 (the list at 0).
  const std::string strings = std::string("}(\x8c\x01", 4) + "x\x94K\x05\x8c\x01" + "y\x94K\x06u";
  const std::string cases[] = {
      head + entry + "\x8c\x04" + "addr" + "K\x01" + "\x8c\x04" + "addr" + "K\x02" + "u" + "e.",  // a key twice
      head + entry + "u" + "2" + "e.",                                                            // DUP: the dict twice
      head + entry + "u" + "\x85" + "e.",                                // in a tuple, not the list
      head + entry + "u" + "(\x8c\x04" + "addr" + "K\x05" + "u" + "e.",  // items added after
      head + entry + "u" + "\x94" + "h\x01" + "e.",                      // memoized after, read back
      head + std::string("}(\x95\x00\x00\x00\x00\x00\x00\x00\x00\x8c\x06", 13) + "action" + "\x8c\x05" + "alloc" + "u" +
          "e.",  // a FRAME inside
      head + std::string("}(\x8c\x06", 4) + "action" + "\x94\x8c\x05" + "alloc" + "\x94" + "u" + "}(h\x01h\x02u" +
          "e.",                                                       // its strings read back by the next
      head + entry + "\x8c\x01" + "l" + "]K\x01" + "a" + "u" + "e.",  // a list of a number inside: built
      head + strings + entry + "\x8c\x01" + "l" +
          "]\x94h\x01"
          "ah\x01"
          "ah\x02"
          "a" +
          "u" + "h\x03" + "e.",  // a list of memo values inside, one get at a time, read back after
      head + strings + entry + "\x8c\x01" + "l" +
          "](h\x01h\x02"
          "e(h\x01"
          "e" +
          "u" + "e.",  // the same in batches
  };
  for (size_t i = 0; i < std::size(cases); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    expect_same_with_views(cases[i], i != 2);
  }
}

}  // namespace
