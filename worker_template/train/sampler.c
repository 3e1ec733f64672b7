/* SPDX-License-Identifier: Apache-2.0
 * sampler.c: DistributedSampler semantics (torch.utils.data.distributed, drop_last=False):
 * shuffle with seed + epoch, pad by repeating the head to a multiple of world, stride by rank. */
#include <errno.h>
#include <stdlib.h>

#include "train.h"

size_t train_sampler_num_samples(size_t n, int world) {
    return (n + (size_t)world - 1) / (size_t)world;
}

int train_sampler_indices(size_t n, int world, int rank, uint64_t seed, uint64_t epoch, int shuffle,
                          size_t *idx, ddp_err_t *err) {
    if (n == 0 || world < 1 || rank < 0 || rank >= world)
        return ddp_err_set(err, -EINVAL, "sampler: bad arguments (n %zu, world %d, rank %d)", n,
                           world, rank);
    size_t *perm = malloc(n * sizeof *perm);
    if (perm == NULL)
        return ddp_err_set(err, -ENOMEM, "sampler: out of memory for %zu indices", n);
    for (size_t i = 0; i < n; i++)
        perm[i] = i;
    if (shuffle) {
        /* Every rank draws the same permutation: the generator depends on seed + epoch only. */
        train_rng_t r;
        train_rng_seed(&r, seed + epoch);
        for (size_t i = n - 1; i > 0; i--) {
            size_t j = (size_t)train_rng_below(&r, (uint64_t)i + 1);
            size_t t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
    }
    size_t per = train_sampler_num_samples(n, world);
    /* Padded position p (< per * world) maps to perm[p % n]: the head repeats, as PyTorch's
     * indices += indices[:padding] (repeated when the padding exceeds n). */
    for (size_t k = 0; k < per; k++)
        idx[k] = perm[((size_t)rank + k * (size_t)world) % n];
    free(perm);
    return 0;
}
