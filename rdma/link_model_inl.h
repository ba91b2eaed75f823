// Header-only helpers of link_model.h (usable by exporters without linking argus_rdma).
#pragma once
#include <algorithm>
#include <tuple>

#include "rdma/link_model.h"

namespace argus::rdma {

inline std::vector<RankNic> rank_nics(const LinkSnapshot& snap, const std::vector<RankGpu>& ranks) {
  std::vector<RankNic> out;
  for (const auto& r : ranks) {
    std::string pci = r.gpu_pci;
    if (pci.empty() && r.gpu_index >= 0) {
      for (const auto& g : snap.gpus) {
        if (g.index == r.gpu_index) pci = g.pci_address;
      }
    }
    if (pci.empty()) continue;
    for (const auto& d : snap.devices) {
      for (const auto& a : d.gpus) {
        if (a.gpu_pci != pci) continue;
        for (const auto& p : snap.ports) {
          if (p.device == d.name) out.push_back({r.job_id, r.rank, d.name, p.port, a.kind});
        }
      }
    }
  }
  std::sort(out.begin(), out.end(), [](const RankNic& a, const RankNic& b) {
    return std::tie(a.job_id, a.rank, a.device, a.port) < std::tie(b.job_id, b.rank, b.device, b.port);
  });
  out.erase(std::unique(out.begin(), out.end(),
                        [](const RankNic& a, const RankNic& b) {
                          return std::tie(a.job_id, a.rank, a.device, a.port) ==
                                 std::tie(b.job_id, b.rank, b.device, b.port);
                        }),
            out.end());
  return out;
}

}  // namespace argus::rdma
