// `memtrace export --format jsonl`: one JSON object per event, all processes merged in time order.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace memtrace {

// Writes every event of TRACES to OUT. Returns false with ERROR set when a trace cannot be
// opened; a cut or damaged trace exports what it holds and adds its problem to WARNINGS.
// An allocation carries "stack" (innermost first, CUDA frames on top cut unless KEEP_CUDA_FRAMES).
bool export_jsonl(const std::vector<std::string>& traces, std::FILE* out, bool keep_cuda_frames,
                  std::vector<std::string>& warnings, std::string& error);

}  // namespace memtrace
