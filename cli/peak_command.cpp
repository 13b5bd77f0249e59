// memtrace peak PATH: when each device peaked, and what was live then, by site.
#include <cstdio>
#include <memory>
#include <set>

#include "command.h"
#include "options.h"

namespace memtrace::cli {

namespace {

struct PeakCli {
  AnalysisCli analysis;
  std::string layer = "reserved";
  int device = -1;
  CLI::Option* device_option = nullptr;
};

int peak(PeakCli& c) {
  PeakOptions options;
  options.layer = c.layer == "allocated" ? Layer::kAllocated : c.layer == "device" ? Layer::kDevice : Layer::kReserved;
  if (*c.device_option) options.device = c.device;
  options.by_category = c.analysis.by == "category";
  options.by_owner = c.analysis.by == "owner";
  if (options.by_owner && options.layer != Layer::kReserved) {
    std::fprintf(stderr,
                 "memtrace peak: --by owner shows who held the whole device at the reserved peak: leave out --layer\n");
    return kExitUsage;
  }
  // Categories are the allocated layer's, shown with it or grouped by.
  c.analysis.options.categories = options.by_category || options.layer == Layer::kAllocated;
  std::vector<ProcessAnalysis> processes;
  if (!load_analyses("peak", c.analysis, processes)) return kExitUsage;
  if (options.device) {  // a device the run never used is a mistake, not an empty answer
    std::set<int32_t> devices;
    for (const ProcessAnalysis& p : processes)
      for (const auto* layer : {&p.report, &p.allocated})
        for (const DeviceReport& d : layer->devices) devices.insert(d.device);
    if (!devices.count(*options.device)) {
      std::string known;
      for (int32_t d : devices) known += (known.empty() ? "" : ", ") + std::to_string(d);
      std::fprintf(
          stderr, "memtrace peak: --device %d: the run used %s\n", *options.device,
          known.empty() ? "no device" : ("device" + std::string(devices.size() > 1 ? "s " : " ") + known).c_str());
      return kExitUsage;
    }
  }
  show(c.analysis.json, peak_view(processes, options));
  return 0;
}

}  // namespace

Command add_peak_command(CLI::App& app) {
  auto c = std::make_shared<PeakCli>();
  CLI::App* cmd = app.add_subcommand("peak", "When each device peaked, and what was live then, by site");
  add_analysis_options(cmd, c->analysis);
  c->analysis.options.fragmentation = false;  // what peak does not show
  cmd->add_option("--layer", c->layer,
                  "reserved (what the allocation APIs hold; default), allocated (what allocators handed out) or device "
                  "(what the device had in use: the reserved layer and what lay outside it)")
      ->check(CLI::IsMember({"reserved", "allocated", "device"}));
  c->device_option = cmd->add_option("--device", c->device, "Only this device")->check(CLI::Range(0, 1024));
  return {cmd, [c] { return peak(*c); }};
}

}  // namespace memtrace::cli
