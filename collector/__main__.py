from nodeagent.collector.cli import main

main()
