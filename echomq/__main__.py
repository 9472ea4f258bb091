from echomq.cli.main import main

main()
