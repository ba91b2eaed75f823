#include "userspace/common/comm_id.h"

#include <openssl/sha.h>

#include <cstdio>

namespace argus {

std::string comm_id_from_uid(const uint8_t* uid, std::size_t n) {
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(uid, n, d);
  std::string out;
  char buf[3];
  for (int i = 0; i < 8; ++i) {
    std::snprintf(buf, sizeof(buf), "%02x", d[i]);
    out += buf;
  }
  return out;
}

}  // namespace argus
