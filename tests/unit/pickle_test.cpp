// The pickle reader and writer: every protocol Python writes, plain data only, values shared through
// the memo kept shared, every length checked; the writer's output read back by the reader (and, in
// the e2e tests, by Python and by memory_viz's rules).
#include "memtrace/importers/pickle.h"

#include <gtest/gtest.h>

#include <string>

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

}  // namespace
