"""metalslurm: bare-metal GPU servers to a Slurm cluster, as code."""
