// The collector's stacks on this test program's own code: the symbolizer names a return address
// by function, file and line (inlined calls as frames of their own), and the stack builder
// merges Python frames where the interpreter's evaluation loop stood, and interns stacks.
#include "stack_builder.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <link.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "memtrace/format/trace_reader.h"
#include "memtrace/ring/protocol.h"
#include "symbolizer.h"

namespace {

using namespace memtrace;
namespace fs = std::filesystem;

uint32_t line_of(const std::string& mark) {
  std::ifstream in(__FILE__);
  std::string line;
  for (uint32_t n = 1; std::getline(in, line); ++n)
    if (line.find("// stack-test: " + mark) != std::string::npos && line.find("find(") == std::string::npos) return n;
  ADD_FAILURE() << "no line marked " << mark;
  return 0;
}

__attribute__((noinline)) uint64_t return_address() { return reinterpret_cast<uint64_t>(__builtin_return_address(0)); }

__attribute__((always_inline)) inline uint64_t inlined_call() {
  return return_address();  // stack-test: inlined
}

__attribute__((noinline, noipa)) uint64_t outer_call() {
  uint64_t address = inlined_call();  // stack-test: outer
  asm volatile("" ::: "memory");
  return address;
}

// Named like CPython's evaluation loop, so the builder puts Python frames in its place.
extern "C" __attribute__((noinline, noipa)) uint64_t _PyEval_EvalFrameDefault_probe() {
  uint64_t address = return_address();
  asm volatile("" ::: "memory");
  return address;
}

// The module (path, load bias, executable range) ADDRESS lies in.
struct Module {
  std::string path;
  uint64_t bias = 0, start = 0, end = 0;
};
Module module_of(uint64_t address) {
  Dl_info info{};
  EXPECT_TRUE(::dladdr(reinterpret_cast<void*>(address), &info));
  Module m;
  m.path = fs::canonical("/proc/self/exe").string();
  m.bias = reinterpret_cast<uint64_t>(info.dli_fbase);
  m.start = address - 0x100000 < address ? address - 0x100000 : 0;
  m.end = address + 0x100000;
  return m;
}

TEST(Symbolizer, NamesAReturnAddressWithItsInlinedCalls) {
  uint64_t address = outer_call();
  Module m = module_of(address);
  Symbolizer symbolizer;
  const std::vector<SourceFrame>& frames = symbolizer.symbolize(m.path, address - m.bias);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_NE(frames[0].function.find("inlined_call"), std::string::npos) << frames[0].function;
  EXPECT_TRUE(frames[0].inlined);
  EXPECT_EQ(fs::path(frames[0].file).filename(), "stack_builder_test.cpp");
  EXPECT_EQ(frames[0].line, line_of("inlined"));
  EXPECT_NE(frames[1].function.find("outer_call"), std::string::npos) << frames[1].function;
  EXPECT_FALSE(frames[1].inlined);
  EXPECT_EQ(frames[1].line, line_of("outer"));
  // Asked again, the same answer (cached).
  EXPECT_EQ(&symbolizer.symbolize(m.path, address - m.bias), &frames);
}

TEST(Symbolizer, AModuleThatCannotBeReadGivesNoFrames) {
  Symbolizer symbolizer;
  EXPECT_TRUE(symbolizer.symbolize("/no/such/library.so", 0x1234).empty());
}

class StackBuilderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (fs::temp_directory_path() / ("memtrace-stacks-" + std::to_string(::getpid()) + ".memtrace")).string();
    fs::remove(path_);
    std::string error;
    writer_ = TraceWriter::create(path_, error);
    ASSERT_TRUE(writer_) << error;
    writer_->write_header(pb::TraceHeader());
    builder_ = std::make_unique<StackBuilder>(symbolizer_, *writer_);
  }
  void TearDown() override { fs::remove(path_); }

  // The functions (or Python names) of stack ID, innermost first, as a reader sees them.
  std::vector<std::string> read_stack(uint64_t id, uint32_t* flags = nullptr) {
    writer_->finish(pb::Footer());
    std::string error;
    auto reader = TraceReader::open(path_, error);
    EXPECT_TRUE(reader) << error;
    Event e;
    while (reader->next(e)) {
    }
    std::vector<std::string> names;
    if (flags) *flags = reader->stack_flags(id);
    const auto* frames = reader->stack(id);
    if (!frames) return names;
    for (uint64_t frame : *frames) names.emplace_back(reader->string(reader->frame(frame)->function()));
    return names;
  }

  std::string path_;
  Symbolizer symbolizer_;
  std::unique_ptr<TraceWriter> writer_;
  std::unique_ptr<StackBuilder> builder_;
};

TEST_F(StackBuilderTest, PythonFramesStandWhereTheEvaluationLoopStood) {
  uint64_t inner = outer_call(), loop = _PyEval_EvalFrameDefault_probe();
  Module m = module_of(inner);
  builder_->add_module(m.bias, std::min(inner, loop) - 0x1000, std::max(inner, loop) + 0x1000, m.path);
  // Described by lines (frames taken through the C API): the second word of a pair is the line.
  builder_->add_code({0xC0DE1, "forward", "model.py", 50, python::LineTable::kLines, ""});
  builder_->add_code({0xC0DE2, "train_step", "train.py", 10, python::LineTable::kLines, ""});
  const uint64_t native[] = {inner, loop};
  const uint64_t python[] = {0xC0DE1, 57, 0xC0DE2, 12};  // innermost first
  uint64_t id = builder_->intern(native, 2, python, 2, ring::kPythonFrames, false);
  ASSERT_NE(id, 0u);
  // The same raw stack is the same stack; a truncated one is another.
  EXPECT_EQ(builder_->intern(native, 2, python, 2, ring::kPythonFrames, false), id);
  EXPECT_NE(builder_->intern(native, 2, python, 2, ring::kPythonFrames, true), id);
  std::vector<std::string> names = read_stack(id);
  ASSERT_EQ(names.size(), 4u);
  EXPECT_NE(names[0].find("inlined_call"), std::string::npos);
  EXPECT_NE(names[1].find("outer_call"), std::string::npos);
  EXPECT_EQ(names[2], "forward");
  EXPECT_EQ(names[3], "train_step");
}

TEST_F(StackBuilderTest, ANativeOnlyThreadOfAPythonProgramSaysItHadNoGil) {
  uint64_t inner = outer_call();
  Module m = module_of(inner);
  builder_->add_module(m.bias, inner - 0x1000, inner + 0x1000, m.path);
  const uint64_t native[] = {inner};
  uint64_t id = builder_->intern(native, 1, nullptr, 0, ring::kPythonNoGil, false);
  uint32_t flags = 0;
  std::vector<std::string> names = read_stack(id, &flags);
  EXPECT_EQ(names.size(), 2u);
  EXPECT_EQ(flags, static_cast<uint32_t>(pb::STACK_PYTHON_NO_GIL));
}

TEST_F(StackBuilderTest, AFrameInNoModuleIsKeptAsAnAddress) {
  const uint64_t native[] = {0xdead0000};
  uint64_t id = builder_->intern(native, 1, nullptr, 0, ring::kNoPython, false);
  std::vector<std::string> names = read_stack(id);
  ASSERT_EQ(names.size(), 1u);
  EXPECT_EQ(names[0], "");
  EXPECT_EQ(builder_->intern(nullptr, 0, nullptr, 0, ring::kNoPython, false), 0u) << "no frames: no stack";
}

}  // namespace
