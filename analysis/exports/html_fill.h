// A page template of the HTML report's (html/*.html) filled in: its data, the style, the shared
// script (common.js), uPlot and its licence where the template has their marks, and MORE (mark,
// text) pairs.
#pragma once

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>

namespace memtrace {

std::string fill_page(std::string_view page_template, const nlohmann::json& data,
                      std::initializer_list<std::pair<std::string_view, std::string_view>> more);

}  // namespace memtrace
