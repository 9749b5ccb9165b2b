from nodeagent.collector.cli.main import main

main()
