// The settings memtrace hands the injector (ring/environment.h names them): from the environment,
// which `memtrace run` and memtrace.record set, or, in a process `memtrace attach` joined (whose
// environment memtrace cannot change safely: the program may read it at the same time), from the
// list attach gave, which takes precedence.
#pragma once

namespace memtrace::inject {

// Whether this process runs with raised rights (set-user-ID, set-group-ID, capabilities: the
// kernel's AT_SECURE): then no setting is taken and nothing recorded or loaded.
bool secure_program();

// NAME's value: attach's, else the environment's; null when neither has it, and in a secure
// program (secure_program()).
const char* setting(const char* name);

// Takes TEXT's "NAME=VALUE" lines as attach's list, replacing the last one (on the thread memtrace
// stopped at a moment it holds no lock of the C library's: it may allocate). False when TEXT does
// not fit.
bool set_attach_settings(const char* text);
// Whether memtrace attach gave its settings (a forked child must not use them: the collector is
// its parent's).
bool attach_settings_given();

}  // namespace memtrace::inject
