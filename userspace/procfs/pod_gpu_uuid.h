// GPU UUIDs by host index, from the NVIDIA driver's procfs files
// (<proc-root>/driver/nvidia/gpus/<domain:bus:device.function>/information, one
// "GPU UUID:   GPU-..." line each). nvidia-smi (and CUDA under
// CUDA_DEVICE_ORDER=PCI_BUS_ID) numbers GPUs in PCI bus order, which is the
// order of those directory names (fixed-width lowercase hex). With no driver
// files there is no map, and so no gpu_uuid label.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace argus::procfs {

// The UUID on an information file's "GPU UUID:" line; nullopt when absent or not
// shaped as "GPU-" and 36 characters of 8-4-4-4-12 hex.
std::optional<std::string> gpu_uuid_from_information(std::string_view text);

// Each GPU's UUID by index (PCI bus order); "" for a GPU whose file holds none.
// Empty when the driver's directory is absent. At most 64 GPUs are read.
std::vector<std::string> gpu_uuids_by_index(const std::string& proc_root);

}  // namespace argus::procfs
