from nodeagent.agent.cli import main

main()
