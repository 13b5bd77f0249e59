// format/FORMAT.md describes every message and field of memtrace.proto: each message has a
// section whose heading names it (### `Name`), and each of its fields is named in that section.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "memtrace.pb.h"
#include "memtrace/format/api.h"

namespace {

// FORMAT.md's `###` sections: heading -> text.
std::map<std::string, std::string> sections() {
  std::ifstream in(MEMTRACE_FORMAT_DOC);
  EXPECT_TRUE(in) << "cannot read " << MEMTRACE_FORMAT_DOC;
  std::map<std::string, std::string> out;
  std::string line, heading;
  while (std::getline(in, line)) {
    if (line.rfind("### ", 0) == 0)
      heading = line;
    else if (line.rfind("## ", 0) == 0)
      heading.clear();
    else if (!heading.empty())
      out[heading] += line + "\n";
  }
  return out;
}

TEST(FormatDoc, EveryMessageAndFieldOfTheSchemaIsDescribed) {
  const auto* file = memtrace::pb::Chunk::descriptor()->file();
  auto docs = sections();
  ASSERT_GT(file->message_type_count(), 10);
  for (int m = 0; m < file->message_type_count(); ++m) {
    const auto* message = file->message_type(m);
    const std::string name = "`" + message->name() + "`";
    std::string text;
    for (const auto& [heading, body] : docs)
      if (heading.find(name) != std::string::npos) text += body;
    ASSERT_FALSE(text.empty()) << "FORMAT.md has no section headed " << name;
    for (int f = 0; f < message->field_count(); ++f)
      EXPECT_NE(text.find("`" + message->field(f)->name() + "`"), std::string::npos)
          << message->name() << "." << message->field(f)->name() << " is not described in its FORMAT.md section";
  }
}

}  // namespace

namespace {

// The rows of FORMAT.md's table under HEADING (a ### line that starts with it): its cells, the
// backticks taken off.
std::vector<std::vector<std::string>> table(const std::string& heading) {
  std::ifstream in(MEMTRACE_FORMAT_DOC);
  std::vector<std::vector<std::string>> rows;
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("### ", 0) == 0) inside = line.rfind("### " + heading, 0) == 0;
    if (!inside || line.rfind("| ", 0) != 0 || line.rfind("| value", 0) == 0) continue;
    std::vector<std::string> cells;
    std::stringstream cells_in(line.substr(1));
    for (std::string cell; std::getline(cells_in, cell, '|');) {
      std::string clean;
      for (char c : cell)
        if (c != '`' && c != ' ') clean += c;
      cells.push_back(clean);
    }
    rows.push_back(cells);
  }
  return rows;
}

TEST(FormatDoc, EveryNumberedValueIsTheCodes) {
  using namespace memtrace;
  auto apis = table("API");
  ASSERT_EQ(apis.size(), static_cast<size_t>(Api::kCount)) << "FORMAT.md's API table misses values";
  for (const auto& row : apis) {
    const ApiInfo& info = api_info(static_cast<Api>(std::stoul(row.at(0))));
    EXPECT_EQ(row.at(1), info.name) << "API " << row[0];
    EXPECT_EQ(row.at(2), info.op == Op::kAlloc ? "alloc" : info.op == Op::kFree ? "free" : "mark") << row[1];
    EXPECT_EQ(row.at(3), mem_kind_name(info.kind)) << row[1];
    EXPECT_EQ(row.at(4), layer_name(info.layer)) << row[1];
  }
  auto kinds = table("Kind");
  ASSERT_EQ(kinds.size(), static_cast<size_t>(MemKind::kCount));
  for (const auto& row : kinds) EXPECT_EQ(row.at(1), mem_kind_name(static_cast<MemKind>(std::stoul(row[0]))));
  for (const auto& row : table("Layer")) EXPECT_EQ(row.at(1), layer_name(static_cast<Layer>(std::stoul(row[0]))));
  auto flags = table("Stack flags");
  const auto* flag_enum = pb::StackFlags_descriptor();
  ASSERT_EQ(flags.size(), static_cast<size_t>(flag_enum->value_count()));
  for (const auto& row : flags) EXPECT_EQ(flag_enum->FindValueByNumber(std::stoi(row[0]))->name(), row.at(1));
  auto reasons = table("Snapshot reasons");
  const auto* reason_enum = pb::Snapshot::Reason_descriptor();
  ASSERT_EQ(reasons.size(), static_cast<size_t>(reason_enum->value_count()));
  for (const auto& row : reasons) EXPECT_EQ(reason_enum->FindValueByNumber(std::stoi(row[0]))->name(), row.at(1));
}

}  // namespace
