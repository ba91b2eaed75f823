/* The error strings of the libcuda.so.1 shim (cuda_shim.c): the names of
 * bpf/argus_result_codes.h, with descriptions as the real driver gives them. */
#include "cuda_shim_internal.h"
#include "argus_result_codes.h"

#include <stddef.h>

static const char *describe(CUresult e)
{
	switch (e) {
	case 0:
		return "no error";
	case 1:
		return "invalid argument";
	case 2:
		return "out of memory";
	case 3:
		return "initialization error (cuInit has not been called)";
	case 4:
		return "driver shutting down";
	case 100:
		return "no CUDA-capable device is detected";
	case 101:
		return "invalid device ordinal";
	case 200:
		return "device kernel image is invalid";
	case 201:
		return "invalid device context";
	case 400:
		return "invalid resource handle";
	case 500:
		return "named symbol not found";
	case 600:
		return "device not ready";
	case 700:
		return "an illegal memory access was encountered";
	case 719:
		return "unspecified launch failure";
	case 801:
		return "operation not supported";
	case 999:
		return "unknown error";
	default:
		return argus_cuda_result_name(e);
	}
}

CU_API CUresult cuGetErrorString(CUresult error, const char **pStr)
{
	if (!pStr)
		return CUDA_ERROR_INVALID_VALUE;
	*pStr = argus_cuda_result_name(error) ? describe(error) : NULL;
	return *pStr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CU_API CUresult cuGetErrorName(CUresult error, const char **pStr)
{
	if (!pStr)
		return CUDA_ERROR_INVALID_VALUE;
	*pStr = argus_cuda_result_name(error);
	return *pStr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
