// libFuzzer target: any bytes given as a PyTorch snapshot end in a trace that reads back whole, or
// in a message; never a crash, a hang, a leak, or memory out of proportion to the input.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "memtrace/format/trace_reader.h"
#include "memtrace/format/trace_writer.h"
#include "memtrace/importers/torch_snapshot.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int fd = ::memfd_create("fuzz", MFD_CLOEXEC);
  if (fd < 0) return 0;
  std::string error;
  bool ok;
  {
    auto writer = memtrace::TraceWriter::create_on(::dup(fd), "fuzz", error, 0);
    if (!writer) __builtin_trap();
    ok = memtrace::import_torch_snapshot(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz input",
                                         *writer, error);
    if (!ok && error.empty()) __builtin_trap();  // a refusal must say why
  }
  {
    // The second pass parsing the pickle again, not reading the first's entries back: the same verdict.
    std::string again;
    auto writer = memtrace::TraceWriter::create_on(::memfd_create("fuzz-again", MFD_CLOEXEC), "fuzz", again, 0);
    if (!writer) __builtin_trap();
    bool parsed = memtrace::import_torch_snapshot(std::string_view(reinterpret_cast<const char*>(data), size),
                                                  "fuzz input", *writer, again, nullptr, false);
    if (parsed != ok) __builtin_trap();
  }
  if (ok) {
    ::lseek(fd, 0, SEEK_SET);
    std::FILE* file = ::fdopen(::dup(fd), "rb");
    auto reader = memtrace::TraceReader::open(file, "imported", error);
    if (!reader) __builtin_trap();  // what the importer writes, the reader reads
    memtrace::Event event;
    while (reader->next(event)) {
      if (const auto* stack = reader->stack(event.stack_id))
        for (uint64_t id : *stack)
          if (!reader->frame(id)) __builtin_trap();
    }
    if (!reader->footer() || reader->corrupt()) __builtin_trap();
  }
  ::close(fd);
  return 0;
}
