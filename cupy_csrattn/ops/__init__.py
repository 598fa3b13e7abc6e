"""The public ops: validate arguments, choose the backend, document. Nothing else."""
