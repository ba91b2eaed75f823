// GPU UUIDs by index from the NVIDIA driver's procfs files, on fixture trees.
#include "userspace/procfs/pod_gpu_uuid.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/support/temp_dir.h"

namespace argus::procfs {
namespace {

namespace fs = std::filesystem;

// The driver's information file as it lays it out (one "Key:  value" per line).
std::string information(const std::string& uuid, const std::string& bus) {
  return "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 0\nGPU UUID: \t " + uuid +
         "\nVideo BIOS: \t 96.00.74.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\n"
         "Bus Location: \t " +
         bus + "\nDevice Minor: \t 3\nGPU Firmware: \t 535.129.03\nGPU Excluded:\t No\n";
}

void gpu(const fs::path& root, const std::string& bus, const std::string& text) {
  fs::create_directories(root / "driver/nvidia/gpus" / bus);
  std::ofstream(root / "driver/nvidia/gpus" / bus / "information") << text;
}

TEST(PodGpuUuid, ParsesTheInformationFile) {
  EXPECT_EQ(gpu_uuid_from_information(information("GPU-8932f937-d72c-4106-c12f-20bd9faed9f6", "0000:3b:00.0")),
            "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6");
  EXPECT_FALSE(gpu_uuid_from_information("Model: x\n"));
  EXPECT_FALSE(gpu_uuid_from_information("GPU UUID: GPU-8932f937\n"));
  EXPECT_FALSE(gpu_uuid_from_information("GPU UUID: ??\n"));
  EXPECT_FALSE(gpu_uuid_from_information(""));
}

TEST(PodGpuUuid, IndexesFollowPciBusOrder) {
  testing_support::TempDir t("gpus");
  const std::string a = "GPU-aaaaaaaa-0000-0000-0000-000000000000", b = "GPU-bbbbbbbb-0000-0000-0000-000000000000",
                    c = "GPU-cccccccc-0000-0000-0000-000000000000";
  // Written out of order; the device minors do not matter.
  gpu(t.path, "0000:b1:00.0", information(c, "0000:b1:00.0"));
  gpu(t.path, "0000:18:00.0", information(a, "0000:18:00.0"));
  gpu(t.path, "0000:3b:00.0", information(b, "0000:3b:00.0"));
  gpu(t.path, "0000:5e:00.0", "garbage\n");  // a GPU whose file names no UUID keeps its place
  fs::create_directories(t.path / "driver/nvidia/gpus/not-a-bus");
  EXPECT_EQ(gpu_uuids_by_index(t.str()), (std::vector<std::string>{a, b, "", c}));
}

TEST(PodGpuUuid, NoDriverNoMap) {
  testing_support::TempDir t("gpus");
  EXPECT_TRUE(gpu_uuids_by_index(t.str()).empty());
}

}  // namespace
}  // namespace argus::procfs
