from scalerl.cli import main

main()
