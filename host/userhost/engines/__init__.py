"""External engines: Codex, Claude Code and ACP agents driven in a Wuu permission mode.

Each adapter passes the conversation's permission mode to its program as the spec's table says
(spec/data/engine_permission_modes.json, EnginePermissionTable in
spec/schema/permissions/permission_modes.schema.json), then checks that the program runs in the mode it was
given, as the program itself reports it: a program whose own configuration overrode the mode is stopped
(`EngineRefused`), never driven in a mode the user did not choose. A permission request that the mode leaves
to the host goes to the host's approval bridge (`ApprovalBridge`).

- `acp.AcpEngine`: any agent over the Agent Client Protocol (its `category=mode` config option, or a fallback).
- `claude_code.ClaudeCodeEngine`: Claude Code's headless transport (`claude -p`, stream JSON).
- `codex.CodexEngine`: Codex's app server (`codex app-server`, JSON-RPC over stdio).
"""
