"""HTTP plumbing every door shares (the pages and `/mcp`): what a connection and a request
body may cost before any door's own code runs."""
