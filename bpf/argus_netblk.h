/* TCP retransmit and block I/O structs shared by bpf/tcp_retransmit.bpf.c,
 * bpf/block_io.bpf.c and the agent (issue 12, parts 4 and 6). */
#ifndef ARGUS_BPF_ARGUS_NETBLK_H
#define ARGUS_BPF_ARGUS_NETBLK_H

#include "argus.h"

#define ARGUS_MAX_TCP_RETRANS 8192 /* sockets x remotes with retransmits not yet read */
#define ARGUS_MAX_BLOCK_INFLIGHT 16384 /* requests of tracked processes in flight */

/* A socket that retransmitted: its inode (what /proc/PID/fd names as
 * "socket:[N]"; 0 when it has no file any more) and its remote address. */
struct argus_tcp_key {
	__u64 ino;
	__u16 family; /* AF_INET (2) or AF_INET6 (10) */
	__u16 pad0;
	__u32 pad1;
	__u8 addr[16]; /* AF_INET: the first 4 bytes */
};

/* A block request issued by a tracked process, until it completes. */
struct argus_block_start {
	__u64 start_ns;
	__u32 tgid;
	__u32 op; /* enum argus_block_op */
};

ARGUS_ASSERT_SIZE(argus_tcp_key, 32);
ARGUS_ASSERT_SIZE(argus_block_start, 16);

#endif /* ARGUS_BPF_ARGUS_NETBLK_H */
