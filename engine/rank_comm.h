/* Which communicator the model's collectives of a rank group run on, and
 * building it. A group's control messages (jobs, the decoder's lockstep)
 * always use host memory; the model's tensors live where the backend puts
 * them, so its communicator must take that memory:
 *
 *   host    CPU backend: the host communicator itself.
 *   nccl    CUDA, every rank on its own GPU.
 *   staged  CUDA, some ranks share a GPU (NCCL refuses duplicate devices):
 *           device buffers staged through the host communicator
 *           (comm_staged_init). Also selectable on the CPU backend, where
 *           it runs the staging protocol with memmoves (tests).
 *
 * auto picks host on the CPU, and on CUDA nccl unless two ranks report the
 * same device id (tm_device_id: the GPU's UUID), then staged. */
#ifndef TANDEM_ENGINE_RANK_COMM_H
#define TANDEM_ENGINE_RANK_COMM_H
#include <stddef.h>
#include "engine/comm.h"
#include "engine/device.h"
#include "kernels/backend.h"

typedef enum {
    RANK_COMM_AUTO = 0,
    RANK_COMM_HOST,
    RANK_COMM_NCCL,
    RANK_COMM_STAGED,
} rank_comm_kind;

/* "auto", "host", "nccl", "staged": 0, or -1 for anything else. */
int rank_comm_parse(const char *s, rank_comm_kind *out);
const char *rank_comm_name(rank_comm_kind k);

/* The choice (no communication): `want` for a group of n ranks on backend
 * `kind` whose device ids are ids[0..n). Refuses what cannot work with the
 * reason in err: host with device buffers, nccl on the CPU or with two
 * ranks on one GPU (naming them), staged across machines is the caller's
 * check (same_host = 0 refuses it). */
int rank_comm_choose(kn_backend_kind kind, rank_comm_kind want,
                     const char (*ids)[TM_DEVICE_ID_MAX], int n, int same_host,
                     rank_comm_kind *out, char *err, size_t errlen);

/* Collective over host_world (a host communicator of every rank of the
 * group, on one machine): gathers the ranks' device ids, chooses, and
 * builds *out, a communicator of all the ranks in be's memory, owned by the
 * caller (a duplicate of host_world for host). *chosen says which. */
int rank_comm_open(comm *host_world, const kn_backend *be, rank_comm_kind want, comm **out,
                   rank_comm_kind *chosen, char *err, size_t errlen);

#endif
