// Text in a trace is UTF-8: protobuf refuses to parse a string field that is not, so one program
// argument or file name of other bytes would make the whole trace unreadable. What is not valid
// UTF-8 is written as \xNN for each byte that is not.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace memtrace {

// The length of the valid UTF-8 sequence at the start of S (1 to 4), or 0 if there is none.
inline size_t utf8_sequence(std::string_view s) {
  auto b = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  auto cont = [&](size_t i) { return i < s.size() && (b(i) & 0xc0) == 0x80; };
  uint8_t c = b(0);
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) return cont(1) ? 2 : 0;
  if (c >= 0xe0 && c <= 0xef) {
    if (!cont(1) || !cont(2)) return 0;
    if (c == 0xe0 && b(1) < 0xa0) return 0;   // overlong
    if (c == 0xed && b(1) >= 0xa0) return 0;  // a surrogate
    return 3;
  }
  if (c >= 0xf0 && c <= 0xf4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if (c == 0xf0 && b(1) < 0x90) return 0;   // overlong
    if (c == 0xf4 && b(1) >= 0x90) return 0;  // beyond U+10FFFF
    return 4;
  }
  return 0;
}

inline bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t n = utf8_sequence(s.substr(i));
    if (!n) return false;
    i += n;
  }
  return true;
}

inline std::string valid_utf8(std::string_view s) {
  if (is_valid_utf8(s)) return std::string(s);
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < s.size();) {
    size_t n = utf8_sequence(s.substr(i));
    if (n) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      auto c = static_cast<uint8_t>(s[i++]);
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace memtrace
