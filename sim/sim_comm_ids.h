/* The unique ids of the communicators a simulated job derives from its world
 * id, shared by the libnccl.so.2 shim (C: ncclCommSplit/ncclCommShrink children)
 * and argus-sim (C++: the ranks' DP and PP groups, and the truth).
 *
 * A real job broadcasts a fresh ncclGetUniqueId through its store for each
 * group made with ncclCommInitRank, and NCCL makes a child's id inside
 * ncclCommSplit. Here both are a pure function of the parent's id, so that every
 * member computes the same one without a store, the truth can name it, and
 * every segment of a job keeps the world id's first ARGUS_SIM_JOB_ID_BYTES bytes
 * (sim_shm.h: how the launcher finds them all).
 *
 *   derived id = parent[0..4) ++ 124 bytes of splitmix64 seeded by
 *                fnv1a64(parent[0..16)) ^ domain ^ a ^ b (mixed one by one)
 *
 * domain ARGUS_SIM_ID_SPLIT: a = the parent's derivation count (splits and
 * shrinks this rank made from it so far, the same on every member as NCCL
 * requires them in the same order), b = the color. ARGUS_SIM_ID_SHRINK: a = the
 * count, b = fnv1a of the excluded ranks. ARGUS_SIM_ID_GROUP: a = the group kind
 * (ARGUS_SIM_COMM_*), b = the group index. Bytes 4..8 (the segment name's own
 * part) never equal the parent's. */
#ifndef ARGUS_SIM_COMM_IDS_H
#define ARGUS_SIM_COMM_IDS_H

#include <stdint.h>
#include <string.h>

#include "sim_shm.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ARGUS_SIM_ID_SPLIT 0x53504c49u  /* "SPLI" */
#define ARGUS_SIM_ID_SHRINK 0x53485249u /* "SHRI" */
#define ARGUS_SIM_ID_GROUP 0x47525550u  /* "GRUP" */

/* Group kinds of a framework job (the truth's "kind"). */
#define ARGUS_SIM_COMM_WORLD 0
#define ARGUS_SIM_COMM_TP 1
#define ARGUS_SIM_COMM_DP 2
#define ARGUS_SIM_COMM_PP 3
#define ARGUS_SIM_COMM_EP 4

static inline uint64_t argus_sim_fnv1a(const void *data, size_t n, uint64_t h)
{
	const unsigned char *b = (const unsigned char *)data;
	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

static inline uint64_t argus_sim_splitmix64(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* `out` (ARGUS_SIM_UNIQUE_ID_BYTES) from the parent id's first 16 bytes. */
static inline void argus_sim_derive_id(const void *parent, uint32_t domain, uint64_t a, uint64_t b,
				       unsigned char out[ARGUS_SIM_UNIQUE_ID_BYTES])
{
	const unsigned char *p = (const unsigned char *)parent;
	uint64_t st = argus_sim_fnv1a(p, 16, 0xcbf29ce484222325ull);
	st = argus_sim_fnv1a(&domain, sizeof domain, st);
	st = argus_sim_fnv1a(&a, sizeof a, st);
	st = argus_sim_fnv1a(&b, sizeof b, st);
	memcpy(out, p, ARGUS_SIM_JOB_ID_BYTES);
	for (size_t i = ARGUS_SIM_JOB_ID_BYTES; i < ARGUS_SIM_UNIQUE_ID_BYTES; i += 8) {
		uint64_t x = argus_sim_splitmix64(&st);
		size_t n = ARGUS_SIM_UNIQUE_ID_BYTES - i < 8 ? ARGUS_SIM_UNIQUE_ID_BYTES - i : 8;
		memcpy(out + i, &x, n);
	}
	if (memcmp(out + ARGUS_SIM_JOB_ID_BYTES, p + ARGUS_SIM_JOB_ID_BYTES, 4) == 0)
		out[ARGUS_SIM_JOB_ID_BYTES] ^= 1u;
}

#ifdef __cplusplus
}
#endif

#endif /* ARGUS_SIM_COMM_IDS_H */
