from egg_mcp.cli import main

main()
