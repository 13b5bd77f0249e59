// format/FORMAT.md describes every message and field of memtrace.proto: each message has a
// section whose heading names it (### `Name`), and each of its fields is named in that section.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "memtrace.pb.h"

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
