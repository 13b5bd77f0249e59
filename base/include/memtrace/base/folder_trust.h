// Whether a folder memtrace reuses is the user's alone: another user who owns it, or may write in
// it, could swap what memtrace writes there or leave a link where it writes (SECURITY.md).
#pragma once

#include <sys/stat.h>

#include <string>

namespace memtrace {

// Whether GID is the user's private group (Debian's and Ubuntu's user private groups: named as
// the user, no other member), where a group-writable folder (umask 002) is still the user's alone.
bool is_private_group(gid_t gid);

// Why the folder ST describes is not the user's alone ("belongs to another user (uid N)", "may be
// written by anyone", "may be written by its group"); empty when it is. GROUP_SHARED: the user
// asked the group to write (--umask).
std::string why_folder_is_not_private(const struct stat& st, bool group_shared = false);

}  // namespace memtrace
