from rngdctl.cli import main

main()
