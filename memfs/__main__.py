from memfs.cli import main

main()
