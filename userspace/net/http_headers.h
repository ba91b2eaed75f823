// HTTP header names and values as both ends of the agent's HTTP keep them (the
// server's requests, the client's responses): names in ASCII lower case, a
// repeated header's values joined with ", " (RFC 9110, 5.3).
#pragma once
#include <cctype>
#include <map>
#include <string>
#include <utility>

namespace argus::net {

inline std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

inline void add_header(std::map<std::string, std::string>& headers, const std::string& name, const std::string& value) {
  std::string key = lower(name);
  auto it = headers.find(key);
  if (it == headers.end())
    headers.emplace(std::move(key), value);
  else
    it->second += ", " + value;
}

}  // namespace argus::net
