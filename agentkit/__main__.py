from agentkit.cli import main

main()
