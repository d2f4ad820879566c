/* MPI_Allreduce benchmark printing the same nccl-tests table as
 * `cann-train bench collective`, so the two can be compared size by size
 * (make bench-mpi). float32 sum; out-of-place and in-place; every size is
 * checked against the exact expected sum; time is the mean over ranks.
 *
 * usage: mpirun -n N allreduce [-b MIN] [-e MAX] [-f FACTOR] [-w WARMUP] [-n ITERS]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long parse_size(const char *s) {
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    }
    return (long)v;
}

/* Distinct, exactly representable values: rank r, element i. */
static float value(int r, long i) { return (float)((i * 7 + r * 13) % 1024); }

static double run(float *send, float *recv, long count, int iters, int inplace, int rank, int size, long *wrong) {
    for (long i = 0; i < count; i++) send[i] = value(rank, i);
    if (inplace) memcpy(recv, send, count * sizeof(float));
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int it = 0; it < iters; it++) {
        if (inplace) {
            MPI_Allreduce(MPI_IN_PLACE, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        } else {
            MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        }
    }
    double t = (MPI_Wtime() - t0) / iters;
    /* check one fresh call */
    if (inplace) memcpy(recv, send, count * sizeof(float));
    MPI_Allreduce(inplace ? MPI_IN_PLACE : send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    long bad = 0;
    for (long i = 0; i < count; i++) {
        double want = 0;
        for (int r = 0; r < size; r++) want += value(r, i);
        if (recv[i] != (float)want) bad++;
    }
    MPI_Allreduce(&bad, wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    double sum;
    MPI_Allreduce(&t, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return sum / size;
}

int main(int argc, char **argv) {
    long minb = 8, maxb = 256L << 20;
    int factor = 2, warm = 5, iters = 0;
    MPI_Init(&argc, &argv);
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-b")) minb = parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "-e")) maxb = parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "-f")) factor = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-w")) warm = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-n")) iters = atoi(argv[i + 1]);
    }
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    float *send = malloc(maxb), *recv = malloc(maxb);
    memset(send, 1, maxb); /* pre-fault both buffers */
    memset(recv, 1, maxb);
    if (rank == 0) {
        printf("# MPI_Allreduce benchmark: %d ranks, float32 sum\n", size);
        printf("#%62s%36s\n", "out-of-place", "in-place");
        printf("# %10s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s\n", "size", "count", "type", "redop", "root",
               "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
    }
    double busbw_sum = 0;
    int nsizes = 0;
    long total_wrong = 0;
    for (long bytes = minb; bytes <= maxb; bytes *= factor) {
        long count = bytes / sizeof(float);
        if (count == 0) continue;
        int n = iters;
        if (n == 0) { /* aim at ~0.2 s per size, agreed from rank 0's warm-up */
            long w = 0;
            double tw = run(send, recv, count, warm, 0, rank, size, &w);
            n = tw > 0 ? (int)(0.2 / tw) : 1000;
            if (n < 3) n = 3;
            if (n > 10000) n = 10000;
            MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
        } else {
            long w = 0;
            run(send, recv, count, warm, 0, rank, size, &w);
        }
        long wo = 0, wi = 0;
        double to = run(send, recv, count, n, 0, rank, size, &wo);
        double ti = run(send, recv, count, n, 1, rank, size, &wi);
        double b = count * sizeof(float), f = 2.0 * (size - 1) / size;
        double ao = b / to / 1e9, ai = b / ti / 1e9;
        if (rank == 0)
            printf("%12ld %12ld %8s %6s %6d %9.2f %7.2f %7.2f %6ld %9.2f %7.2f %7.2f %6ld\n", (long)b, count, "float",
                   "sum", -1, to * 1e6, ao, ao * f, wo, ti * 1e6, ai, ai * f, wi);
        busbw_sum += ao * f;
        nsizes++;
        total_wrong += wo + wi;
    }
    if (rank == 0) {
        printf("# Out of bounds values : %ld %s\n", total_wrong, total_wrong ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %g\n", nsizes ? busbw_sum / nsizes : 0);
    }
    free(send);
    free(recv);
    MPI_Finalize();
    return total_wrong ? 1 : 0;
}
