#!/usr/bin/env bash
# make bench-mpi: ours vs Open MPI, allreduce, 2 and 4 ranks, TCP and shared
# memory, same sizes, one session. Prints both tables and ours/MPI busbw.
#
# Fairness: Open MPI gets its tuned collectives and pre-faulted user buffers;
# glibc is told not to return freed memory to the kernel
# (GLIBC_TUNABLES, see shared/reference/collectives.md §3.3), because Open
# MPI mallocs a message-sized temporary buffer on every large allreduce and
# a fresh page costs ~150 µs to fault in on these VMs. Both sides run the
# same ranks on the same cores, oversubscribed alike at 4 ranks.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-bin/cann-train}
SIZES=${SIZES:-"-b 4K -e 64M -f 4"}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
TUNE='glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736:glibc.malloc.top_pad=1073741824'
out=$(mktemp -d)
for n in 2 4; do
  for tr in tcp shm; do
    if [ $tr = tcp ]; then btl="tcp,self"; shm=""; else btl="vader,self"; shm="--shm"; fi
    mpirun -n $n --oversubscribe --bind-to none --mca btl $btl -x GLIBC_TUNABLES=$TUNE \
      bin/mpi_allreduce $SIZES > $out/mpi-$n-$tr.txt
    $BIN bench collective --coll allreduce --np $n $SIZES $shm --limits 1 > $out/ours-$n-$tr.txt 2>/dev/null
    echo "=== $n ranks, $tr: Open MPI"; cat $out/mpi-$n-$tr.txt
    echo "=== $n ranks, $tr: cann-train"; cat $out/ours-$n-$tr.txt
    echo "=== $n ranks, $tr: out-of-place busbw, ours / Open MPI"
    awk 'FNR==NR { if ($1 ~ /^[0-9]+$/) mpi[$1]=$8; next }
         $1 ~ /^[0-9]+$/ && ($1 in mpi) { r = (mpi[$1] > 0) ? $8/mpi[$1] : 0;
           printf "%12d  ours %7.2f  mpi %7.2f  ratio %5.2f  (%s)\n", $1, $8, mpi[$1], r, $14 }' \
      $out/mpi-$n-$tr.txt $out/ours-$n-$tr.txt
  done
done
