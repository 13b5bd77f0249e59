// `memtrace export --format jsonl`: one JSON object per event, all processes merged in time order.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace memtrace {

// Writes every event of TRACES to OUT. Returns false with ERROR set when a trace cannot be
// opened; a cut or damaged trace exports what it holds and adds its problem to WARNINGS.
bool export_jsonl(const std::vector<std::string>& traces, std::FILE* out, std::vector<std::string>& warnings,
                  std::string& error);

}  // namespace memtrace
