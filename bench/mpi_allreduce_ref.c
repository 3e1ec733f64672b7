/* SPDX-License-Identifier: Apache-2.0
 * mpi_allreduce_ref: the Open MPI reference for bench/allreduce.sh (built there with mpicc, not
 * by the main build). Same sizes, timing and formulas as bench_allreduce; buffers allocated and
 * touched once, so first-touch cost is not measured. Rank 0 prints one row per size. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    long long min_b = argc > 1 ? atoll(argv[1]) : 4096,
              max_b = argc > 2 ? atoll(argv[2]) : 64 << 20;
    double seconds = argc > 3 ? atof(argv[3]) : 3.0;
    size_t maxc = (size_t)max_b / sizeof(float);
    float *in = malloc(maxc * sizeof(float)), *out = malloc(maxc * sizeof(float));
    for (size_t i = 0; i < maxc; i++)
        in[i] = out[i] = 1.0f;
    if (rank == 0)
        printf("# Open MPI MPI_Allreduce, %d ranks, float32 sum\n", n);
    for (long long bytes = min_b; bytes <= max_b; bytes *= 2) {
        int count = (int)(bytes / (long long)sizeof(float));
        for (int i = 0; i < 3; i++)
            MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < 3; i++)
            MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double per = (MPI_Wtime() - t0) / 3;
        int want = (int)(seconds / 12 / per) + 3;
        if (want > 100000)
            want = 100000;
        MPI_Bcast(&want, 1, MPI_INT, 0, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        for (int i = 0; i < want; i++)
            MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double us = (MPI_Wtime() - t0) * 1e6 / want;
        double algbw = (double)bytes / 1e3 / us;
        if (rank == 0)
            printf("  %12lld %12d %12.1f %12.2f %12.2f\n", bytes, count, us, algbw,
                   algbw * 2.0 * (n - 1) / n);
        fflush(stdout);
    }
    free(in);
    free(out);
    MPI_Finalize();
    return 0;
}
