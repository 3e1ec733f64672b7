/* SPDX-License-Identifier: Apache-2.0
 * rng.c: xoshiro256** seeded through splitmix64; the only randomness train uses, so a seed
 * reproduces data, initialization and shuffles bit for bit on every machine. */
#include <math.h>

#include "train.h"

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void train_rng_seed(train_rng_t *r, uint64_t seed) {
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

uint64_t train_rng_next(train_rng_t *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double train_rng_uniform(train_rng_t *r) {
    return (double)(train_rng_next(r) >> 11) * 0x1.0p-53;
}

double train_rng_normal(train_rng_t *r) {
    double u1 = train_rng_uniform(r), u2 = train_rng_uniform(r);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

uint64_t train_rng_below(train_rng_t *r, uint64_t n) {
    /* Rejection sampling: drop the top values that would bias the modulo. */
    uint64_t lim = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do
        x = train_rng_next(r);
    while (x >= lim);
    return x % n;
}
