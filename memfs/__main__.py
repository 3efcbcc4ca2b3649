from memfs.cli import main

main(prog_name="memfs")  # `python -m memfs` too: usage, and _MEMFS_COMPLETE for completion
