// The settings memtrace hands the injector (ring/environment.h names them): from the environment,
// which `memtrace run` and memtrace.record set, or, in a process `memtrace attach` joined (whose
// environment memtrace cannot change safely: the program may read it at the same time), from the
// list attach gave, which takes precedence.
#pragma once

namespace memtrace::inject {

// NAME's value: attach's, else the environment's; null when neither has it.
const char* setting(const char* name);

// Takes TEXT's "NAME=VALUE" lines as attach's list, replacing the last one (on the thread memtrace
// stopped at a moment it holds no lock of the C library's: it may allocate). False when TEXT does
// not fit.
bool set_attach_settings(const char* text);
// Whether memtrace attach gave its settings (a forked child must not use them: the collector is
// its parent's).
bool attach_settings_given();

}  // namespace memtrace::inject
