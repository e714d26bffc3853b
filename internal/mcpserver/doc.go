// Package mcpserver is `neuralisfs mcp`: a Model Context Protocol server
// (github.com/modelcontextprotocol/go-sdk) whose tools and resources are
// answered by the running daemon over its control socket. The daemon
// identifies the process by SO_PEERCRED and decides every call for that
// uid with the same policy, file permissions, audit log and review queue
// as the mount (README "MCP server").
//
// It owns the tool and resource definitions and the rendering of the
// daemon's answers; it decides nothing itself, and knows nothing of FUSE
// or of host paths: a request names a uri (<slug>://<path>).
package mcpserver
