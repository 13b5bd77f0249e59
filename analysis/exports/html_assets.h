// The HTML report's page, its script and style, and the charting library it bundles (uPlot, from
// npm, pinned by analysis/exports/html/package-lock.json), built into memtrace (embed.cmake).
#pragma once

#include <string_view>

namespace memtrace::html_assets {

extern const std::string_view kPage;
extern const std::string_view kScript;
extern const std::string_view kStyle;
extern const std::string_view kCommonScript;
extern const std::string_view kJobPage;
extern const std::string_view kJobScript;
extern const std::string_view kUplotScript;
extern const std::string_view kUplotStyle;
extern const std::string_view kUplotLicense;

}  // namespace memtrace::html_assets
