from autoshard.cli import main

main()
