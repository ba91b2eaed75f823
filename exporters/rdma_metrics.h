// rdma::LinkSnapshot -> Prometheus families (per link: device, port) and link_degraded events.
//
// Families, in this order, each listed (HELP and TYPE) even when it has no series:
//   argus_ib_port_receive_bytes_total{device,port}        counter, bytes (the x4 applied)
//   argus_ib_port_transmit_bytes_total{device,port}       counter, bytes
//   argus_ib_port_errors_total{device,port,counter}       counter, by sysfs counter name
//   argus_ib_port_transmit_wait_total{device,port}        counter, port_xmit_wait ticks
//   argus_ib_link_rate_bytes_per_second{device,port}      gauge (ports whose rate is known)
//   argus_ib_link_up{device,port}                         gauge 0/1 (state ACTIVE)
//   argus_ib_link_degraded{device,port,reason}            gauge 0/1, all 7 reasons per port
//   argus_rank_nic_info{job_id,rank,device,port}          gauge = 1: the rank's GPU sits
//                                                         next to that NIC port
//   argus_rdma_skips_total{reason}                        counter: the RDMA layer's counted skips
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <prometheus/metric_family.h>

#include "rdma/link_model.h"

namespace argus {

std::vector<prometheus::MetricFamily> collect_rdma_metrics(const rdma::LinkSnapshot& snap,
                                                           const std::vector<rdma::RankGpu>& ranks);

}  // namespace argus
