"""Every rank adds its number into a sum over all ranks (MPI_Allreduce) and checks it.

Started by ``srun --mpi=pmix``: the ranks learn their number and their peers from Slurm's
PMIx server, with no mpirun. Exits 1 on any rank whose result is wrong.
"""

from __future__ import annotations

import socket
import sys
from array import array

from mpi4py import MPI


def main() -> int:
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    # A buffer reduction (MPI's own MPI_SUM over doubles), not a pickled Python object.
    send = array("d", [float(rank + 1), 1.0])
    recv = array("d", [0.0, 0.0])
    comm.Allreduce([send, MPI.DOUBLE], [recv, MPI.DOUBLE], op=MPI.SUM)
    hosts = sorted(set(comm.allgather(socket.gethostname().split(".")[0])))
    want = size * (size + 1) / 2
    ok = recv[0] == want and recv[1] == size
    print(f"rank {rank}/{size} on {socket.gethostname().split('.')[0]}: "
          f"sum {recv[0]:g} (want {want:g}), count {recv[1]:g}", flush=True)
    comm.Barrier()
    if rank == 0:
        print(f"allreduce {'ok' if ok else 'WRONG'}: {size} ranks on {len(hosts)} nodes "
              f"({','.join(hosts)}), MPI {'.'.join(map(str, MPI.Get_version()))}, "
              f"{MPI.Get_library_version().splitlines()[0].strip()}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
