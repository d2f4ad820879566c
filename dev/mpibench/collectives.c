/* Open MPI collective benchmark printing the same nccl-tests table as
 * `cann-train bench collective`, so the two can be compared size by size
 * (make bench-mpi). float32 (or -d), sum; out-of-place and in-place; every size is
 * checked against the exact expected result; time is the mean over ranks.
 *
 * usage: mpirun -n N collectives [-c COLL] [-d float|double|int32] [-b MIN] [-e MAX] [-f FACTOR] [-w WARMUP] [-n ITERS] [-t 0|1]
 *
 * -d is the element type (MPI_FLOAT, MPI_DOUBLE, MPI_INT), as nccl-tests'
 * and our -d; sizes are in bytes, counts in elements of that type.
 *
 * COLL is allreduce (default), reducescatter, allgather, broadcast, reduce
 * or alltoall. Sizes, counts and bus-bandwidth factors follow nccl-tests
 * and our benchmark: for reducescatter, allgather and alltoall the size is
 * the whole buffer of p·n elements (count n per rank) and busbw is
 * algbw·(p−1)/p; allreduce 2(p−1)/p; broadcast and reduce 1 (root 0).
 * MPI_Bcast has only one form (the root's buffer is the message): out of
 * place, the root copies its input to its output and broadcasts that, the
 * work an out-of-place broadcast (nccl-tests', ours) does; MPI_Alltoall has
 * no in-place column (as ours).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum coll { ALLREDUCE, REDUCESCATTER, ALLGATHER, BROADCAST, REDUCE, ALLTOALL };
static const char *names[] = {"allreduce", "reducescatter", "allgather", "broadcast", "reduce", "alltoall"};

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

/* The element type (-d): its name, size and MPI datatype. */
enum dtype { FLOAT, DOUBLE, INT32 };
static const char *dnames[] = {"float", "double", "int32"};
static enum dtype dt = FLOAT;
static long es = 4;
static MPI_Datatype mdt;

/* Distinct values, exact in every type and in their sums: rank r, element i. */
static double value(int r, long i) { return (double)((i * 7 + r * 13) % 1024); }

static double sum_at(int size, long i) {
    double s = 0;
    for (int r = 0; r < size; r++) s += value(r, i);
    return s;
}

static void set(void *b, long i, double v) {
    switch (dt) {
    case FLOAT: ((float *)b)[i] = (float)v; break;
    case DOUBLE: ((double *)b)[i] = v; break;
    case INT32: ((int *)b)[i] = (int)v; break;
    }
}

static double get(const void *b, long i) {
    switch (dt) {
    case FLOAT: return ((const float *)b)[i];
    case DOUBLE: return ((const double *)b)[i];
    default: return ((const int *)b)[i];
    }
}

struct shape {
    long n;             /* count column: elements per rank (whole buffer for flat collectives) */
    long send, recv;    /* elements */
    long bytes;         /* size column */
    double factor;      /* busbw / algbw */
};

static struct shape shape_of(enum coll c, long bytes, int p) {
    struct shape s;
    long n = bytes / es;
    switch (c) {
    case REDUCESCATTER: n /= p; s = (struct shape){n, p * n, n, es * p * n, (double)(p - 1) / p}; break;
    case ALLGATHER:     n /= p; s = (struct shape){n, n, p * n, es * p * n, (double)(p - 1) / p}; break;
    case ALLTOALL:      n /= p; s = (struct shape){n, p * n, p * n, es * p * n, (double)(p - 1) / p}; break;
    case ALLREDUCE:     s = (struct shape){n, n, n, es * n, 2.0 * (p - 1) / p}; break;
    default:            s = (struct shape){n, n, n, es * n, 1.0}; break;
    }
    return s;
}

/* fill prepares the buffers of one call: send holds this rank's input and,
 * in place, recv holds it where the collective expects it. */
static void fill(enum coll c, struct shape s, char *send, char *recv, int inplace, int rank) {
    for (long i = 0; i < s.send; i++) set(send, i, value(rank, i));
    if (!inplace && c != BROADCAST) return;
    switch (c) {
    case ALLGATHER: memcpy(recv + rank * s.n * es, send, s.n * es); break;
    case BROADCAST: if (rank == 0) memcpy(recv, send, s.n * es); break;
    default: memcpy(recv, send, s.send * es); break;
    }
}

static void call(enum coll c, struct shape s, char *send, char *recv, int inplace, int rank) {
    void *in = inplace ? MPI_IN_PLACE : send;
    switch (c) {
    case ALLREDUCE: MPI_Allreduce(in, recv, (int)s.n, mdt, MPI_SUM, MPI_COMM_WORLD); break;
    case REDUCESCATTER: MPI_Reduce_scatter_block(in, recv, (int)s.n, mdt, MPI_SUM, MPI_COMM_WORLD); break;
    case ALLGATHER: MPI_Allgather(in, (int)s.n, mdt, recv, (int)s.n, mdt, MPI_COMM_WORLD); break;
    case BROADCAST:
        if (!inplace && rank == 0) memcpy(recv, send, s.n * es);
        MPI_Bcast(recv, (int)s.n, mdt, 0, MPI_COMM_WORLD);
        break;
    case REDUCE:
        /* in place only at the root, as MPI defines it */
        MPI_Reduce(inplace && rank == 0 ? MPI_IN_PLACE : send, recv, (int)s.n, mdt, MPI_SUM, 0, MPI_COMM_WORLD);
        break;
    case ALLTOALL: MPI_Alltoall(send, (int)s.n, mdt, recv, (int)s.n, mdt, MPI_COMM_WORLD); break;
    }
}

/* wrong counts this rank's wrong elements after one call. */
static long wrong(enum coll c, struct shape s, const char *recv, int rank, int size) {
    long bad = 0;
    switch (c) {
    case ALLREDUCE:
        for (long i = 0; i < s.n; i++) bad += get(recv, i) != sum_at(size, i);
        break;
    case REDUCESCATTER:
        for (long i = 0; i < s.n; i++) bad += get(recv, i) != sum_at(size, rank * s.n + i);
        break;
    case ALLGATHER:
        for (int r = 0; r < size; r++)
            for (long i = 0; i < s.n; i++) bad += get(recv, r * s.n + i) != value(r, i);
        break;
    case BROADCAST:
        for (long i = 0; i < s.n; i++) bad += get(recv, i) != value(0, i);
        break;
    case REDUCE:
        if (rank == 0)
            for (long i = 0; i < s.n; i++) bad += get(recv, i) != sum_at(size, i);
        break;
    case ALLTOALL: /* block r of rank q's output is block q of rank r's input */
        for (int r = 0; r < size; r++)
            for (long i = 0; i < s.n; i++) bad += get(recv, r * s.n + i) != value(r, rank * s.n + i);
        break;
    }
    return bad;
}

/* With -t 1 every timed call is part of a training step's pattern, as
 * cann-train's --touch 1: its input is rewritten just before it (copied
 * from pattern) and its output read just after it (copied to sink), both
 * in the time. */
static int touch = 0;
static char *pattern, *sink;

static double run(enum coll c, struct shape s, char *send, char *recv, int iters, int inplace, int rank, int size,
                  long *nwrong) {
    fill(c, s, send, recv, inplace, rank);
    char *in = inplace ? recv : send;
    long inlen = (inplace ? (s.send > s.recv ? s.send : s.recv) : s.send) * es, outlen = s.recv * es;
    if (touch) memcpy(pattern, in, inlen);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int it = 0; it < iters; it++) {
        if (touch) memcpy(in, pattern, inlen);
        call(c, s, send, recv, inplace, rank);
        if (touch) memcpy(sink, recv, outlen);
    }
    double t = (MPI_Wtime() - t0) / iters;
    /* check one fresh call */
    fill(c, s, send, recv, inplace, rank);
    call(c, s, send, recv, inplace, rank);
    long bad = wrong(c, s, recv, rank, size);
    MPI_Allreduce(&bad, nwrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    double sum;
    MPI_Allreduce(&t, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return sum / size;
}

/* lookup is s's index in names[0..n), or aborts naming what it is. */
static int lookup(const char *s, const char **names, int n, const char *what, int rank) {
    for (int k = 0; k < n; k++)
        if (!strcmp(s, names[k])) return k;
    if (rank == 0) {
        fprintf(stderr, "collectives: unknown %s %s (want", what, s);
        for (int k = 0; k < n; k++) fprintf(stderr, " %s", names[k]);
        fprintf(stderr, ")\n");
    }
    MPI_Abort(MPI_COMM_WORLD, 2);
    return -1;
}

int main(int argc, char **argv) {
    long minb = 8, maxb = 256L << 20;
    int factor = 2, warm = 5, iters = 0;
    enum coll c = ALLREDUCE;
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-b")) minb = parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "-e")) maxb = parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "-f")) factor = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-w")) warm = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-n")) iters = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-t")) touch = atoi(argv[i + 1]) != 0;
        else if (!strcmp(argv[i], "-d")) dt = (enum dtype)lookup(argv[i + 1], dnames, 3, "type", rank);
        else if (!strcmp(argv[i], "-c")) c = (enum coll)lookup(argv[i + 1], names, 6, "collective", rank);
    }
    if (factor < 2 || minb < 1 || maxb < minb) {
        if (rank == 0) fprintf(stderr, "collectives: need -f >= 2 and 1 <= -b <= -e\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    /* the largest buffer any collective here needs: p·n elements for the
     * whole-buffer collectives, n for the flat ones, both ≤ maxb bytes */
    es = dt == DOUBLE ? 8 : 4;
    mdt = dt == DOUBLE ? MPI_DOUBLE : dt == INT32 ? MPI_INT : MPI_FLOAT;
    char *send = malloc(maxb), *recv = malloc(maxb);
    if (!send || !recv) MPI_Abort(MPI_COMM_WORLD, 1);
    memset(send, 1, maxb); /* pre-fault both buffers */
    memset(recv, 1, maxb);
    if (touch) {
        pattern = malloc(maxb), sink = malloc(maxb);
        if (!pattern || !sink) MPI_Abort(MPI_COMM_WORLD, 1);
        memset(pattern, 1, maxb);
        memset(sink, 1, maxb);
    }
    int inplace_col = c != ALLTOALL;
    if (rank == 0) {
        printf("# MPI benchmark: %s, %d ranks, %s sum\n", names[c], size, dt == FLOAT ? "float32" : dnames[dt]);
        if (touch) printf("# touch: every call's input rewritten just before it and its output read just after it, both in the time (-t 1)\n");
        printf("#%62s%36s\n", "out-of-place", "in-place");
        printf("# %10s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s\n", "size", "count", "type", "redop", "root",
               "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
    }
    double busbw_sum = 0;
    int nsizes = 0;
    long total_wrong = 0;
    int root = (c == BROADCAST || c == REDUCE) ? 0 : -1;
    const char *redop = (c == ALLGATHER || c == BROADCAST || c == ALLTOALL) ? "none" : "sum";
    for (long bytes = minb; bytes <= maxb; bytes *= factor) {
        struct shape s = shape_of(c, bytes, size);
        if (s.n == 0) continue;
        int n = iters;
        long w = 0;
        if (n == 0) { /* aim at ~0.2 s per size, agreed from rank 0's warm-up */
            double tw = run(c, s, send, recv, warm, 0, rank, size, &w);
            n = tw > 0 ? (int)(0.2 / tw) : 1000;
            if (n < 3) n = 3;
            if (n > 10000) n = 10000;
            MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
        } else {
            run(c, s, send, recv, warm, 0, rank, size, &w);
        }
        long wo = 0, wi = 0;
        double to = run(c, s, send, recv, n, 0, rank, size, &wo);
        double ao = s.bytes / to / 1e9;
        if (rank == 0)
            printf("%12ld %12ld %8s %6s %6d %9.2f %7.2f %7.2f %6ld", s.bytes, s.n, dnames[dt], redop, root, to * 1e6, ao,
                   ao * s.factor, wo);
        if (inplace_col) {
            double ti = run(c, s, send, recv, n, 1, rank, size, &wi);
            double ai = s.bytes / ti / 1e9;
            if (rank == 0) printf(" %9.2f %7.2f %7.2f %6ld\n", ti * 1e6, ai, ai * s.factor, wi);
        } else if (rank == 0) {
            printf(" %9s %7s %7s %6s\n", "N/A", "N/A", "N/A", "N/A");
        }
        busbw_sum += ao * s.factor;
        nsizes++;
        total_wrong += wo + wi;
    }
    if (rank == 0) {
        printf("# Out of bounds values : %ld %s\n", total_wrong, total_wrong ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %g\n", nsizes ? busbw_sum / nsizes : 0);
    }
    free(send);
    free(recv);
    free(pattern);
    free(sink);
    MPI_Finalize();
    return total_wrong ? 1 : 0;
}
