# The fuzz targets (fuzz_<name>.cpp, corpus/<name>/), read by fuzz/CMakeLists.txt both
# as the clang sub-build that compiles them and from the main build that runs them.
set(ARGUS_FUZZ_TARGETS
  procfs_maps
  procfs_environ
  procfs_stat
  elf_symbols
  rdma_sysfs
  gpu_wire
  http_query)
# gpu/cupti_convert needs the CUPTI headers (like gpu/ itself).
set(ARGUS_FUZZ_CUPTI_TARGETS gpu_kernel_name)
