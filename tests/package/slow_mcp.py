#!/usr/bin/env python3
"""A stdio MCP server that answers initialize late (argv[1] ms): while it waits, once's
/readyz answers 503 mcp_starting, and READY=1 must not reach systemd. Standard library only,
so it runs as the user once from a world-readable /tmp directory."""
import json
import sys
import time

delay = int(sys.argv[1]) / 1000 if len(sys.argv) > 1 else 1.5
for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    if "id" not in msg:
        continue  # a notification
    if msg.get("method") == "initialize":
        time.sleep(delay)
        result = {"protocolVersion": msg.get("params", {}).get("protocolVersion", "2025-06-18"),
                  "capabilities": {"tools": {}}, "serverInfo": {"name": "slow", "version": "1"}}
    elif msg.get("method") == "tools/list":
        result = {"tools": []}
    else:
        result = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}) + "\n")
    sys.stdout.flush()
