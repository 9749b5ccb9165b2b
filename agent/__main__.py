from nodeagent.agent.cli.main import main

main()
