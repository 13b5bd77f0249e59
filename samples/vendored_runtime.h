// The functions of samples/vendored_plugin.cpp, found in the plugin after dlopen.
#pragma once

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace sample {

struct VendoredPlugin {
  int (*set_device)(int);
  int (*malloc)(void**, size_t);
  int (*free)(void*);
  int (*last_error)();
  int (*device_of)(const void*);
  int (*driver_entry_points)();

  // Loads DIR/libvendored_plugin.so privately, as Python loads an extension; exits on failure.
  static VendoredPlugin load(const std::string& dir) {
    void* lib = ::dlopen((dir + "/libvendored_plugin.so").c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      std::fprintf(stderr, "cannot load the plugin: %s\n", ::dlerror());
      std::exit(2);
    }
    VendoredPlugin p{};
    p.set_device = reinterpret_cast<int (*)(int)>(::dlsym(lib, "plugin_set_device"));
    p.malloc = reinterpret_cast<int (*)(void**, size_t)>(::dlsym(lib, "plugin_malloc"));
    p.free = reinterpret_cast<int (*)(void*)>(::dlsym(lib, "plugin_free"));
    p.last_error = reinterpret_cast<int (*)()>(::dlsym(lib, "plugin_last_error"));
    p.device_of = reinterpret_cast<int (*)(const void*)>(::dlsym(lib, "plugin_device_of"));
    p.driver_entry_points = reinterpret_cast<int (*)()>(::dlsym(lib, "plugin_driver_entry_points"));
    if (!p.set_device || !p.malloc || !p.free || !p.last_error || !p.device_of || !p.driver_entry_points) {
      std::fprintf(stderr, "the plugin lacks its functions\n");
      std::exit(2);
    }
    return p;
  }
};

}  // namespace sample
