"""memfs on this machine: the control socket, the embedded local server, which server a
command uses, process titles, logs."""
