#include "memtrace/base/folder_trust.h"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

namespace memtrace {

bool is_private_group(gid_t gid) {
  const passwd* user = ::getpwuid(::geteuid());
  const std::string name = user && user->pw_name ? user->pw_name : "";
  const group* g = ::getgrgid(gid);
  if (!g || name.empty() || name != g->gr_name) return false;
  for (char** member = g->gr_mem; member && *member; ++member)
    if (name != *member) return false;
  return true;
}

std::string why_folder_is_not_private(const struct stat& st, bool group_shared) {
  if (st.st_uid != ::geteuid()) return "belongs to another user (uid " + std::to_string(st.st_uid) + ")";
  if (st.st_mode & 002) return "may be written by anyone";
  if ((st.st_mode & 020) && !group_shared && !is_private_group(st.st_gid)) return "may be written by its group";
  return {};
}

}  // namespace memtrace
