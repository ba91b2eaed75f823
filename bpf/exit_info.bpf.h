/* The exit_info map (tgid -> struct argus_exit_info) that the signal and OOM
 * programs fill and the exit program empties, and its helpers. */
#ifndef ARGUS_EXIT_INFO_BPF_H
#define ARGUS_EXIT_INFO_BPF_H

#include "helpers.bpf.h"
#include "argus_exit.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, ARGUS_MAX_TRACKED);
	__type(key, __u32);
	__type(value, struct argus_exit_info);
} exit_info SEC(".maps") __weak;

/* The tgid's entry, created empty when absent; a full map is counted. */
static __always_inline struct argus_exit_info *argus_exit_info_of(__u32 tgid)
{
	struct argus_exit_info *info = bpf_map_lookup_elem(&exit_info, &tgid);
	if (info)
		return info;
	struct argus_exit_info zero = {};
	long err = bpf_map_update_elem(&exit_info, &tgid, &zero, BPF_NOEXIST);
	if (err && err != -17 /* EEXIST: another CPU created it */) {
		argus_count_error(ARGUS_ERR_EXIT_INFO_FULL);
		return 0;
	}
	info = bpf_map_lookup_elem(&exit_info, &tgid);
	if (!info)
		argus_count_error(ARGUS_ERR_EXIT_INFO_FULL);
	return info;
}

#endif
