from proxy.ops.cli import main

main()
