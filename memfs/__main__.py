from memfs.cli.spawn import main

main()  # `python -m memfs` too: usage, and _MEMFS_COMPLETE for completion
