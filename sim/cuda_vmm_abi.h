/* The CUDA driver's virtual memory management structs, as cuda.h lays them out
 * (enums are ints): what the libcuda shim implements (cuda_shim_internal.h),
 * what the simulated ranks pass it (worker_rank.h), and what the memory bench
 * calls it with (bench/gpu_memory_load.c). One copy, for C and C++, checked
 * against cuda.h's sizes; the toolkit's header is not needed to build them. */
#ifndef ARGUS_SIM_CUDA_VMM_ABI_H
#define ARGUS_SIM_CUDA_VMM_ABI_H

typedef unsigned long long CUmemGenericAllocationHandle;

typedef struct CUmemLocation_st {
	int type; /* CU_MEM_LOCATION_TYPE_* (DEVICE = 1) */
	int id;
} CUmemLocation;

typedef struct CUmemAllocationProp_st {
	int type;                 /* CU_MEM_ALLOCATION_TYPE_* (PINNED = 1) */
	int requestedHandleTypes; /* CUmemAllocationHandleType (none = 0) */
	CUmemLocation location;
	void *win32HandleMetaData;
	struct {
		unsigned char compressionType;
		unsigned char gpuDirectRDMACapable;
		unsigned short usage;
		unsigned char reserved[4];
	} allocFlags;
} CUmemAllocationProp;

typedef struct CUmemAccessDesc_st {
	CUmemLocation location;
	int flags; /* CU_MEM_ACCESS_FLAGS_PROT_* (READWRITE = 3) */
} CUmemAccessDesc;

#ifdef __cplusplus
static_assert(sizeof(CUmemAllocationProp) == 32 && sizeof(CUmemAccessDesc) == 12, "as in cuda.h");
#else
_Static_assert(sizeof(CUmemAllocationProp) == 32 && sizeof(CUmemAccessDesc) == 12, "as in cuda.h");
#endif

#endif
