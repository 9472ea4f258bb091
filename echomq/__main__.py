from echomq.cli import main

main()
