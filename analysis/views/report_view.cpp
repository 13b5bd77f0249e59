#include "memtrace/views/report_render.h"
#include "memtrace/views/views.h"

namespace memtrace {

ReportView report_view(std::vector<ProcessAnalysis>&& processes) {
  ReportView view;
  for (ProcessAnalysis& p : processes) view.processes.push_back(std::move(p.report));
  return view;
}

nlohmann::json to_json(const ReportView& view) { return report_json(view.processes); }
std::string to_text(const ReportView& view) { return report_text(view.processes); }

}  // namespace memtrace
