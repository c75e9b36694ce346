from svcgw.cli import main

main()
