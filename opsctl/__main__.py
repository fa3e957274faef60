from opsctl.entry import main

main()
